#include "tasks/dataset_bounds.h"

#include "gpueval/error.h"

namespace gpueval {

void check_document_size(uint64_t bytes, const std::string& where, const char* what) {
  if (bytes <= kMaxDocumentBytes) return;
  fail(where, "{} is {} bytes, past the bound of {} (64 MiB) that gpueval accepts for one document", what, bytes,
       kMaxDocumentBytes);
}

}  // namespace gpueval
