// The one-run-per-output-folder rule: every flow that writes an output folder (a run, a nightly
// run over several checkpoints, a shard, a plan, a merge) holds that folder's DirectoryLock
// (common/dir_lock.h) from before its first read of the journal until its last report is written.
// A second process on the same folder exits with kExitBusy and one line naming the holder, or,
// with --wait (EvaluationOptions::wait), logs whom it waits for and starts once the lock is free.
#pragma once

#include <string>

#include "common/dir_lock.h"
#include "gpueval/evaluation.h"

namespace gpueval {

// Creates `dir` if needed and takes its lock for `options.command`.
DirectoryLock lock_output(const std::string& dir, const EvaluationOptions& options);

}  // namespace gpueval
