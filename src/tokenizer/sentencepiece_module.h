// The C boundary between gpueval_core and the gpueval_sentencepiece module.
//
// Debian's libsentencepiece carries its own copy of protobuf 3.14 and exports
// those symbols; LibTorch loads the system libprotobuf 3.21. In one symbol
// namespace either copy's calls land in the other and the process dies at
// startup. So SentencePiece lives only in a module that gpueval_core dlopen()s
// with RTLD_LOCAL | RTLD_DEEPBIND, and the two sides talk through this table
// of plain C functions. Results come back through sink callbacks, so no memory
// allocated on one side is ever freed on the other.
//
// Every function may be called from many threads on the same model once it is
// loaded; SentencePiece's processor is only read after Load().
#pragma once

#include <stddef.h>

extern "C" {

struct GpuevalSpModel;

// Receives text (a decoded string, a piece, an error message), not NUL-terminated.
typedef void (*GpuevalSpTextSink)(void* context, const char* text, size_t size);
typedef void (*GpuevalSpIdSink)(void* context, const int* ids, size_t count);

struct GpuevalSentencePieceApi {
  int version;  // kGpuevalSentencePieceApiVersion
  // Null on failure, after passing the reason to error.
  GpuevalSpModel* (*load)(const char* path, GpuevalSpTextSink error, void* error_context);
  void (*release)(GpuevalSpModel* model);
  // 0 on success; otherwise the reason went to error.
  int (*encode)(const GpuevalSpModel* model, const char* text, size_t size, GpuevalSpIdSink ids, void* ids_context,
                GpuevalSpTextSink error, void* error_context);
  int (*decode)(const GpuevalSpModel* model, const int* ids, size_t count, GpuevalSpTextSink text, void* text_context,
                GpuevalSpTextSink error, void* error_context);
  int (*piece_size)(const GpuevalSpModel* model);
  // id must be in [0, piece_size).
  void (*id_to_piece)(const GpuevalSpModel* model, int id, GpuevalSpTextSink piece, void* context);
  // SentencePiece answers the unk id for an unknown piece.
  int (*piece_to_id)(const GpuevalSpModel* model, const char* piece, size_t size);
  int (*is_control)(const GpuevalSpModel* model, int id);
  int (*is_unknown)(const GpuevalSpModel* model, int id);
  int (*bos_id)(const GpuevalSpModel* model);  // -1 when the model has none
  int (*eos_id)(const GpuevalSpModel* model);
};

#define GPUEVAL_SENTENCEPIECE_API_VERSION 1
#define GPUEVAL_SENTENCEPIECE_API_SYMBOL "gpueval_sentencepiece_api"

// The one symbol the module exports.
typedef const GpuevalSentencePieceApi* (*GpuevalSentencePieceApiFunction)(void);

}  // extern "C"
