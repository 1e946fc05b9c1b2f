// The gpueval_sentencepiece module: the only code that touches the
// SentencePiece library, behind the C table of ../sentencepiece_module.h.
// Built as a separate MODULE (not part of gpueval_core) so that
// libsentencepiece and its bundled protobuf are only loaded into a private
// symbol namespace; see that header for why. Nothing here throws across the
// boundary: failures become a return code and a message.
#include <exception>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

#include "tokenizer/sentencepiece_module.h"

struct GpuevalSpModel {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

void report(GpuevalSpTextSink sink, void* context, const std::string& message) {
  sink(context, message.data(), message.size());
}

GpuevalSpModel* load(const char* path, GpuevalSpTextSink error, void* error_context) {
  try {
    auto model = new GpuevalSpModel;
    const auto status = model->processor.Load(path);
    if (!status.ok()) {
      report(error, error_context, status.ToString());
      delete model;
      return nullptr;
    }
    return model;
  } catch (const std::exception& e) {
    report(error, error_context, e.what());
    return nullptr;
  }
}

void free_model(GpuevalSpModel* model) { delete model; }

int encode(const GpuevalSpModel* model, const char* text, size_t size, GpuevalSpIdSink ids, void* ids_context,
           GpuevalSpTextSink error, void* error_context) {
  try {
    std::vector<int> pieces;
    const auto status = model->processor.Encode(std::string_view(text, size), &pieces);
    if (!status.ok()) {
      report(error, error_context, status.ToString());
      return 1;
    }
    ids(ids_context, pieces.data(), pieces.size());
    return 0;
  } catch (const std::exception& e) {
    report(error, error_context, e.what());
    return 1;
  }
}

int decode(const GpuevalSpModel* model, const int* ids, size_t count, GpuevalSpTextSink text, void* text_context,
           GpuevalSpTextSink error, void* error_context) {
  try {
    std::string decoded;
    const auto status = model->processor.Decode(std::vector<int>(ids, ids + count), &decoded);
    if (!status.ok()) {
      report(error, error_context, status.ToString());
      return 1;
    }
    text(text_context, decoded.data(), decoded.size());
    return 0;
  } catch (const std::exception& e) {
    report(error, error_context, e.what());
    return 1;
  }
}

int piece_size(const GpuevalSpModel* model) { return model->processor.GetPieceSize(); }

void id_to_piece(const GpuevalSpModel* model, int id, GpuevalSpTextSink piece, void* context) {
  report(piece, context, model->processor.IdToPiece(id));
}

int piece_to_id(const GpuevalSpModel* model, const char* piece, size_t size) {
  return model->processor.PieceToId(std::string_view(piece, size));
}

int is_control(const GpuevalSpModel* model, int id) { return model->processor.IsControl(id) ? 1 : 0; }
int is_unknown(const GpuevalSpModel* model, int id) { return model->processor.IsUnknown(id) ? 1 : 0; }
int bos_id(const GpuevalSpModel* model) { return model->processor.bos_id(); }
int eos_id(const GpuevalSpModel* model) { return model->processor.eos_id(); }

const GpuevalSentencePieceApi kApi = {
    GPUEVAL_SENTENCEPIECE_API_VERSION,
    load,
    free_model,
    encode,
    decode,
    piece_size,
    id_to_piece,
    piece_to_id,
    is_control,
    is_unknown,
    bos_id,
    eos_id,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const GpuevalSentencePieceApi* gpueval_sentencepiece_api() {
  return &kApi;
}
