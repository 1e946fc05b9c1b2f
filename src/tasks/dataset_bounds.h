// The bounds gpueval puts on a dataset file before parsing it, so a corrupt or runaway file
// (a JSONL line that never ends, a CSV quote that is never closed, a HellaSwag file of one
// endless line) is refused with one line naming the file and the line, instead of growing a
// parse tree without limit. One document is at most 64 MiB of text: far past any evaluation
// document (a context of 2^24 tokens, gpueval's position bound, is under that in any tokenizer
// we know), and small enough that parsing it stays within a few hundred MiB. A dataset file is at
// most 16 GiB (io::read_file's default).
// Owns only the constants and the check; callers are the dataset readers in tasks/.
#pragma once

#include <cstdint>
#include <string>

namespace gpueval {

inline constexpr uint64_t kMaxDocumentBytes = uint64_t{1} << 26;

// Throws Error "WHERE: WHAT is N bytes, past the bound of 67108864 (64 MiB) that gpueval accepts
// for one document" when bytes > kMaxDocumentBytes. `what` names the unit: "the line", "the record".
void check_document_size(uint64_t bytes, const std::string& where, const char* what);

}  // namespace gpueval
