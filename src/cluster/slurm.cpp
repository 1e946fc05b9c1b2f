// `gpueval slurm CONFIG` (gpueval/cluster.h): a sharded run as three Slurm jobs. The plan job runs
// `gpueval plan` once (on one GPU when the budget is calibrated); a job array runs one shard per
// node with --requeue, each shard's gpueval a job step; the merge job runs `gpueval merge` after
// the whole array succeeded (afterok). Slurm requeues a shard itself on preemption or node
// failure; a shard step killed on its node (scancel --signal=KILL, the OOM killer, kill -9)
// makes the batch script requeue its own task, at most max_requeues times. Either way the shard
// starts again from its journal.
#include <filesystem>
#include <iostream>
#include <sstream>

#include "common/file_io.h"
#include "common/process.h"
#include "gpueval/cluster.h"
#include "gpueval/error.h"

namespace gpueval {
namespace {

namespace fs = std::filesystem;

// A word for bash, single-quoted unless it is plainly safe.
std::string sh(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./=:,+@%") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The #SBATCH lines every job shares: name, log, and the cluster options.
std::string header(const SlurmOptions& o, const std::string& name, const std::string& log) {
  std::string h = "#!/bin/bash\n# Written by `gpueval slurm`; submit.sh submits the three jobs in order.\n";
  h += fmt::format("#SBATCH --job-name={}\n#SBATCH --nodes=1\n#SBATCH --ntasks=1\n#SBATCH --output={}\n", name, log);
  if (!o.partition.empty()) h += "#SBATCH --partition=" + o.partition + "\n";
  if (!o.time.empty()) h += "#SBATCH --time=" + o.time + "\n";
  if (!o.account.empty()) h += "#SBATCH --account=" + o.account + "\n";
  if (!o.qos.empty()) h += "#SBATCH --qos=" + o.qos + "\n";
  for (const std::string& a : o.sbatch_args) h += "#SBATCH " + a + "\n";
  return h;
}

std::string plan_script(const SlurmOptions& o, const RunConfig& config, const std::string& dir) {
  const bool calibrate = config.batch_size == "auto" && config.batch_tokens <= 0;
  std::string s = header(o, "gpueval-plan", dir + "/slurm/plan-%j.out");
  std::string gpus = "cpu";
  if (calibrate && o.gpus_per_node > 0) {
    s += "#SBATCH --gpus-per-node=1\n";  // the budget is probed once, on one GPU, for every shard
    gpus = "all";
  } else if (calibrate) {
    // As many CPU workers as a shard has: a CPU worker's budget depends on its share of memory.
    s += fmt::format("#SBATCH --cpus-per-task={}\n", o.cpu_workers * std::max<int64_t>(1, config.cpu_threads));
    gpus = fmt::format("cpu:{}", o.cpu_workers);
  }
  if (!o.mem.empty()) s += "#SBATCH --mem=" + o.mem + "\n";
  s += "set -euo pipefail\n";
  s += fmt::format("exec {} plan {} --shards {} --gpus {}\n", sh(o.executable), sh(dir + "/slurm/config.yaml"), o.nodes,
                   gpus);
  return s;
}

std::string shards_script(const SlurmOptions& o, const RunConfig& config, const std::string& dir) {
  std::string s = header(o, "gpueval-shards", dir + "/slurm/shard-%a.out");
  s += fmt::format("#SBATCH --array=0-{}\n#SBATCH --requeue\n#SBATCH --open-mode=append\n", o.nodes - 1);
  std::string gpus;
  if (o.gpus_per_node > 0) {
    s += fmt::format("#SBATCH --gpus-per-node={}\n", o.gpus_per_node);
    if (o.cpus_per_task > 0) s += fmt::format("#SBATCH --cpus-per-task={}\n", o.cpus_per_task);
    gpus = "all";
  } else {
    const int64_t cpus =
        o.cpus_per_task > 0 ? o.cpus_per_task : o.cpu_workers * std::max<int64_t>(1, config.cpu_threads);
    s += fmt::format("#SBATCH --cpus-per-task={}\n", cpus);
    gpus = fmt::format("cpu:{}", o.cpu_workers);
  }
  if (!o.mem.empty()) s += "#SBATCH --mem=" + o.mem + "\n";
  s += fmt::format(
      "set -u\n"
      "shard=$((SLURM_ARRAY_TASK_ID - ${{SLURM_ARRAY_TASK_MIN:-0}}))\n"
      "restarts=${{SLURM_RESTART_COUNT:-0}}\n"
      "echo \"gpueval: shard $shard/{n}, job $SLURM_JOB_ID on $(hostname), start $((restarts + 1)) at $(date -u +%FT%TZ)\"\n"
      "srun --ntasks=1 {exe} run {dir} --shard \"$shard/{n}\" --gpus {gpus}\n"
      "rc=$?\n"
      "# A step that a signal ended (scancel --signal, the OOM killer, kill -9 on the node) is requeued;\n"
      "# the shard starts again from its journal. Exit 1 (bad input) and 3 (a quarantined batch) are not.\n"
      "if [ \"$rc\" -gt 128 ] && [ \"$restarts\" -lt {max} ]; then\n"
      "  echo \"gpueval: shard $shard step ended with status $rc; requeueing (restart $((restarts + 1)) of {max})\"\n"
      "  scontrol requeue \"$SLURM_JOB_ID\"\n"
      "  exit 0\n"
      "fi\n"
      "exit \"$rc\"\n",
      fmt::arg("n", o.nodes), fmt::arg("exe", sh(o.executable)), fmt::arg("dir", sh(dir)), fmt::arg("gpus", gpus),
      fmt::arg("max", o.max_requeues));
  return s;
}

std::string merge_script(const SlurmOptions& o, const std::string& dir) {
  std::string s = header(o, "gpueval-merge", dir + "/slurm/merge-%j.out");
  if (!o.mem.empty()) s += "#SBATCH --mem=" + o.mem + "\n";
  s += "set -euo pipefail\n";
  s += fmt::format("exec {} merge {}\n", sh(o.executable), sh(dir));
  return s;
}

std::string submit_script(const std::string& dir) {
  return fmt::format(
      "#!/bin/bash\n"
      "# Submits the plan, then the shards after it, then the merge after every shard (afterok).\n"
      "set -euo pipefail\n"
      "cd {dir}/slurm\n"
      "plan=$(sbatch --parsable plan.sbatch); plan=${{plan%%;*}}\n"
      "shards=$(sbatch --parsable --dependency=afterok:$plan shards.sbatch); shards=${{shards%%;*}}\n"
      "merge=$(sbatch --parsable --dependency=afterok:$shards merge.sbatch); merge=${{merge%%;*}}\n"
      "echo \"plan=$plan shards=$shards merge=$merge\"\n",
      fmt::arg("dir", sh(dir)));
}

}  // namespace

int run_slurm_command(const RunConfig& config_in, const SlurmOptions& o, std::ostream& out) {
  if (o.nodes < 1) throw Error(fmt::format("--nodes: must be at least 1, got {}", o.nodes));
  if (o.gpus_per_node < 0) throw Error(fmt::format("--gpus-per-node: must be 0 or more, got {}", o.gpus_per_node));
  if (o.cpu_workers < 1) throw Error(fmt::format("--cpu-workers: must be at least 1, got {}", o.cpu_workers));
  const RunConfig config = with_absolute_paths(config_in);
  const std::string dir = config.output;
  io::make_directories(dir + "/slurm");
  // The config every job reads, with the flags applied and absolute paths (JSON is YAML).
  io::write_file_atomic(dir + "/slurm/config.yaml", "# The run config of " + config_in.source +
                                                        " with its flags applied, written by `gpueval slurm`.\n" +
                                                        run_config_file(config).dump(2) + "\n");
  const std::pair<const char*, std::string> files[] = {{"plan.sbatch", plan_script(o, config, dir)},
                                                       {"shards.sbatch", shards_script(o, config, dir)},
                                                       {"merge.sbatch", merge_script(o, dir)},
                                                       {"submit.sh", submit_script(dir)}};
  for (const auto& [name, text] : files) {
    const std::string path = dir + "/slurm/" + name;
    io::write_file_atomic(path, text);
    fs::permissions(path, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);
  }
  out << fmt::format("wrote {0}/slurm/plan.sbatch, shards.sbatch ({1} shards), merge.sbatch and submit.sh\n", dir,
                     o.nodes);
  if (!o.submit) {
    out << fmt::format("submit with: bash {}/slurm/submit.sh; watch with: gpueval status {}\n", dir, dir);
    return 0;
  }
  // sbatch needs the caller's environment (PATH, SLURM_CONF, the account's variables).
  int rc = -1;
  process::Capture how;
  how.keep_environment = true;
  how.with_stderr = true;
  std::string output = process::run_and_capture({"/bin/bash", dir + "/slurm/submit.sh"}, rc, how);
  while (!output.empty() && output.back() == '\n') output.pop_back();
  if (rc != 0 || output.rfind("plan=", 0) != 0) {
    std::replace(output.begin(), output.end(), '\n', ' ');
    throw Error(fmt::format("{}/slurm/submit.sh: sbatch failed: {}", dir, output));
  }
  io::write_file_atomic(dir + "/slurm/jobs.txt", output + "\n");
  out << fmt::format("submitted: {}; watch with: gpueval status {}\n", output, dir);
  return 0;
}

}  // namespace gpueval
