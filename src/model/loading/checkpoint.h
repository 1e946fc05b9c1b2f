// A model checkpoint directory in Hugging Face layout: either one model.safetensors, or shards
// listed by model.safetensors.index.json:
//   {"metadata": {...}, "weight_map": {"<tensor name>": "<shard file name>", ...}}
// where each shard is a .safetensors file in the same directory. When both exist, model.safetensors
// wins, as in transformers.
//
// open() maps every file and cross-checks the index against the shards up front, so a checkpoint
// that opens is complete and unambiguous: every indexed tensor is in the shard the index names, no
// tensor is in two shards, and no shard holds a tensor the index does not list. A CheckpointFiles shares
// its mapped files; copies are cheap and tensors it returns keep their file mapped on their own.
// It is immutable after open() and safe to use from several threads. (Named CheckpointFiles, not
// Checkpoint: evaluation/checkpoints.h's Checkpoint is one checkpoint of a run, and two classes
// of one name in one namespace broke the one-definition rule: AddressSanitizer caught one's
// destructor freeing the other's members.)
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/loading/safetensors.h"

namespace gpueval {

class CheckpointFiles {
 public:
  static constexpr char kSingleFile[] = "model.safetensors";
  static constexpr char kIndexFile[] = "model.safetensors.index.json";

  // Throws Error if neither file exists, a shard is missing, the index names a tensor absent from
  // its shard, a tensor appears in two shards, or any file is malformed.
  static CheckpointFiles open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  // The methods below throw Error naming the directory and the tensor if it is absent.
  const TensorInfo& info(const std::string& name) const;
  at::Tensor tensor(const std::string& name) const;  // [info(name).shape], zero-copy view
  std::string file_of(const std::string& name) const;  // path of the file holding it

 private:
  struct Entry {
    std::shared_ptr<const SafetensorsFile> file;
    const TensorInfo* info;  // points into file->tensors(), kept alive by `file`
  };

  explicit CheckpointFiles(std::string dir) : dir_(std::move(dir)) {}
  const Entry& entry(const std::string& name) const;
  // Registers every tensor of `file`; `where` names the file blamed for a duplicate.
  void add_file(const std::shared_ptr<const SafetensorsFile>& file, const std::string& where);
  void load_index(const std::string& index_path);

  std::string dir_;
  std::map<std::string, Entry> entries_;  // ordered, so names() comes out sorted
};

}  // namespace gpueval
