#include "run/worker.h"

#include <ATen/Parallel.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "common/strings.h"
#include "common/wire_json.h"
#include "gpueval/error.h"
#include "gpueval/model.h"
#include "gpueval/tokenizer.h"
#include "model/kernels/cpu_matmul.h"
#include "model/config/dtype.h"
#include "plan/planner.h"
#include "run/batch_probe.h"
#include "run/cpu_allocator.h"
#include "run/device_memory.h"
#include "run/executor.h"
#include "run/prefix_cache.h"
#include "run/subprocess.h"
#include "run/weight_broadcast.h"
#include "run/wire.h"
#include "run/worker_hello.h"
#include "run/worker_messages.h"

namespace gpueval {
namespace {

using Clock = std::chrono::steady_clock;

// Injected faults for the fault tests: GPUEVAL_FAULT=<kind>:<n>.
//   crash:R, corrupt:R, hang:R   on the batch holding request R: abort, a damaged frame, silence
//   hold:R (hold:any)            on the batch holding request R (any batch): log "holding batch",
//                                keep heartbeating, and run it only once GPUEVAL_FAULT_RELEASE exists
//   slow:MS                      sleep MS milliseconds before every batch
//   oom:T                        a forward of more than T padded tokens runs out of memory
//   crash-items:N, hold-items:N  once a batch has sent N finished items ahead of its result (kItems):
//   twice-items:N                abort, or log "holding batch B after N finished items" and wait as hold
//                                does, or send the N-th again (a protocol error the scheduler must catch)
//   crash-join:N                 once the worker's first generation batch has sent an item ahead, wait
//                                for the next batch (the scheduler's look-ahead), let it join the
//                                running set, and abort once it has sent N finished items (0: as it joins)
// GPUEVAL_FAULT_ONCE=path fires it in the one worker that creates the file; GPUEVAL_FAULT_MODEL=s
// only while the loaded checkpoint's path ends with s; GPUEVAL_FAULT_AFTER=N only once the worker
// has passed N batches the fault applies to (hold:any after N: the worker's batch N+1). Tests wait on what a fault
// logs, not on time.
struct Fault {
  enum class Kind {
    kNone,
    kCrash,
    kCorrupt,
    kHang,
    kHold,
    kSlow,
    kOom,
    kCrashItems,
    kHoldItems,
    kTwiceItems,
    kCrashJoin
  } kind = Kind::kNone;
  int64_t request_index = -1;  // kSlow: milliseconds; kOom: the most padded tokens a forward may hold; k*Items: N
  bool any_batch = false;  // kHold: every batch
  std::string once_path;  // fire only if this worker creates the file
  std::string release_path;  // kHold: the file that lets a held batch go on
  std::string model_suffix;  // fire only on a checkpoint whose path ends with this
  int64_t after = 0;  // pass this many batches the fault applies to first
  int64_t passed = 0;
  bool fired = false;

  bool applies_to(const Batch& batch, const std::string& model_dir) const {
    if (!ends_with(model_dir, model_suffix)) return false;
    if (any_batch) return true;
    for (const auto& item : batch.items)
      if (item.request_index == request_index) return true;
    return false;
  }
  // The faults that act on one batch (not slow, not oom): whether this one fires on `batch` now.
  bool fires_on(const Batch& batch, const std::string& model_dir) {
    if (kind == Kind::kNone || kind == Kind::kSlow || kind == Kind::kOom || kind == Kind::kCrashJoin ||
        fires_on_items())
      return false;
    if (!applies_to(batch, model_dir)) return false;
    if (passed < after) {
      ++passed;
      return false;
    }
    return claim();
  }
  bool fires_on_items() const {
    return kind == Kind::kCrashItems || kind == Kind::kHoldItems || kind == Kind::kTwiceItems;
  }
  // Whether it can still fire in this worker (no other has claimed it).
  bool may_fire() const { return !fired && (once_path.empty() || !io::path_exists(once_path)); }
  // Decides, at the moment of firing, whether this worker is the one.
  bool claim() {
    if (fired) return false;
    if (once_path.empty()) return true;
    int fd = ::open(once_path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    ::close(fd);
    fired = true;
    return true;
  }
};

Fault fault_from_env() {
  Fault f;
  const char* env = std::getenv("GPUEVAL_FAULT");
  if (!env || !*env) return f;
  std::string s(env);
  auto colon = s.find(':');
  if (colon == std::string::npos) return f;
  const std::string kind = s.substr(0, colon);
  f.request_index = std::atoll(s.c_str() + colon + 1);
  f.any_batch = s.compare(colon + 1, std::string::npos, "any") == 0;
  if (kind == "crash")
    f.kind = Fault::Kind::kCrash;
  else if (kind == "corrupt")
    f.kind = Fault::Kind::kCorrupt;
  else if (kind == "hang")
    f.kind = Fault::Kind::kHang;
  else if (kind == "hold")
    f.kind = Fault::Kind::kHold;
  else if (kind == "slow")
    f.kind = Fault::Kind::kSlow;
  else if (kind == "oom")
    f.kind = Fault::Kind::kOom;
  else if (kind == "crash-items")
    f.kind = Fault::Kind::kCrashItems;
  else if (kind == "hold-items")
    f.kind = Fault::Kind::kHoldItems;
  else if (kind == "twice-items")
    f.kind = Fault::Kind::kTwiceItems;
  else if (kind == "crash-join")
    f.kind = Fault::Kind::kCrashJoin;
  if (const char* once = std::getenv("GPUEVAL_FAULT_ONCE")) f.once_path = once;
  if (const char* release = std::getenv("GPUEVAL_FAULT_RELEASE")) f.release_path = release;
  if (const char* model = std::getenv("GPUEVAL_FAULT_MODEL")) f.model_suffix = model;
  if (const char* after = std::getenv("GPUEVAL_FAULT_AFTER")) f.after = std::atoll(after);
  return f;
}

// Serialises frame writes from the main loop and the heartbeat thread.
class FrameWriter {
 public:
  explicit FrameWriter(int fd) : fd_(fd) {}
  void send(FrameType type, const nlohmann::json& payload) {
    std::lock_guard<std::mutex> lock(mu_);
    write_frame(fd_, Frame{type, pack_payload(payload)});
  }
  void send_raw(const std::string& bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

 private:
  int fd_;
  std::mutex mu_;
};

class Heartbeat {
 public:
  Heartbeat(FrameWriter& writer, double period_s) : writer_(writer), period_(period_s) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Heartbeat() { stop(); }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopped_) {
      lock.unlock();
      try {
        writer_.send(FrameType::kHeartbeat, nlohmann::json::object());
      } catch (const std::exception&) {
        return;  // the scheduler is gone; the main loop sees EOF
      }
      lock.lock();
      cv_.wait_for(lock, std::chrono::duration<double>(period_), [this] { return stopped_; });
    }
  }

  FrameWriter& writer_;
  double period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::thread thread_;
};

// `load: broadcast` (weight_broadcast.h): rank 0 makes the NCCL id and sends it up in a kBroadcast
// frame; the other ranks read theirs, forwarded by the scheduler, as the frame after their Hello.
DecoderModel load_broadcast(const WorkerHello::Broadcast& spec, const std::string& model_dir,
                            const LoadOptions& options, int in, FrameWriter& writer, const std::string& name) {
  BroadcastGroup group;
  group.rank = spec.rank;
  group.world = spec.world;
#ifdef GPUEVAL_WITH_NCCL
  if (group.rank == 0) {
    group.nccl_id = new_broadcast_id();
    writer.send(FrameType::kBroadcast, {{"nccl_id", group.nccl_id}});
  } else {
    std::optional<Frame> f = read_frame(in);
    if (!f || f->type != FrameType::kBroadcast)
      throw FrameError(fmt::format("worker: expected a broadcast frame after Hello, got {}",
                                   f ? frame_type_name(f->type) : "end of stream"));
    group.nccl_id = broadcast_id_from_json(unpack_payload(*f));
  }
  std::cerr << fmt::format("[{}] weights over NCCL: rank {} of {}{}\n", name, group.rank, group.world,
                           group.rank == 0 ? " (reads the checkpoint)" : "");
  return load_model_broadcast(model_dir, options, group);
#else
  (void)in;
  (void)writer;
  (void)name;
  (void)model_dir;
  (void)options;
  // The scheduler only asks for a broadcast when this build has NCCL.
  throw Error(fmt::format("worker: asked to load by NCCL broadcast (rank {} of {}), but this build has no NCCL",
                          group.rank, group.world));
#endif
}

// The checkpoint this worker holds and what running batches on it needs.
struct Replica {
  WorkerHello hello;  // the Hello it was loaded by
  LoadOptions options;
  DecoderModel model{nullptr};
  std::unique_ptr<Tokenizer> tokenizer;
  PrefixCache prefixes;
};

// Loads `hello`'s model, first dropping the one held (a later Hello switches checkpoints in place:
// the next checkpoint of a nightly run loads without a new process), then says Hello back.
void load_checkpoint(Replica& r, const WorkerHello& hello, int in, FrameWriter& writer) {
  r.hello = hello;
  const bool reload = !r.model.is_empty();
  r.prefixes = PrefixCache();
  r.model = nullptr;
  r.tokenizer.reset();
  if (reload) release_cached_memory(r.options.device);
  const auto t0 = Clock::now();
  r.options.dtype = resolve_dtype(hello.dtype, r.options.device, hello.model);
  const std::string matmul = r.options.device.is_cpu() ? cpu_matmul_description() : "";
  std::cerr << fmt::format("[{}] pid {} {} {} on {} ({} -> {}, {} threads{})\n", hello.worker, ::getpid(),
                           reload ? "switching to" : "loading", hello.model, r.options.device.str(), hello.dtype,
                           dtype_name(r.options.dtype), hello.threads, matmul.empty() ? "" : ", " + matmul);
  if (hello.broadcast) {
    r.model = load_broadcast(*hello.broadcast, hello.model, r.options, in, writer, hello.worker);
  } else {
    r.model = load_model(hello.model, r.options);
  }
  r.tokenizer = load_tokenizer(hello.model);
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (const int64_t packed = r.model->packed_weight_bytes(); packed > 0)
    std::cerr << fmt::format("[{}] projections packed for oneDNN's matmul: {:.0f} MiB of this worker's own\n",
                             hello.worker, static_cast<double>(packed) / (1 << 20));
  writer.send(FrameType::kHello, {{"pid", ::getpid()}, {"load_seconds", load_s}, {"model", hello.model}});
}

ExecutionOptions execution_options(Replica& r, const Fault& fault) {
  ExecutionOptions exec;
  exec.prefixes = &r.prefixes;
  if (fault.kind == Fault::Kind::kOom) {
    // Injected: a forward of more than N padded tokens runs out of memory, as a full GPU would.
    const int64_t limit = fault.request_index;
    exec.before_forward = [limit](int64_t rows, int64_t width) {
      TORCH_CHECK_WITH(OutOfMemoryError, rows * width <= limit, "injected out of memory: ", rows, " rows x ", width,
                       " tokens > ", limit);
    };
  }
  return exec;
}

// The probe computes the sample's prefix into the worker's own cache: the run's first batches
// with that prefix, which the scheduler sends here (Scheduler::probe), find it there.
void answer_probe(Replica& r, const Frame& frame, FrameWriter& writer) {
  const ProbeOptions probe = probe_options_from_json(unpack_payload(frame));
  try {
    const ProbeResult result = probe_batch_tokens(*r.model, *r.tokenizer, probe, &r.prefixes);
    writer.send(FrameType::kResult, {{"probe", to_json(result)},
                                     {"device", device_description(r.options.device, r.hello.threads)},
                                     {"dtype", dtype_name(r.options.dtype)}});
  } catch (const Error& e) {
    writer.send(FrameType::kError, {{"batch_id", -1}, {"message", e.what()}});
  }
}

void wait_for_release(const Fault& fault) {
  while (fault.release_path.empty() || !io::path_exists(fault.release_path))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// The faults after a batch's n-th finished item has been sent (as `frame`): abort, the frame again,
// or a hold until released.
void inject_item_fault(Fault& fault, const Batch& batch, const std::string& name, size_t n, FrameWriter& writer,
                       const nlohmann::json& frame) {
  if (!fault.fires_on_items() || static_cast<int64_t>(n) != fault.request_index || !fault.claim()) return;
  std::cerr << fmt::format("[{}] injected fault on batch {} after {} finished items\n", name, batch.id, n);
  if (fault.kind == Fault::Kind::kCrashItems) std::abort();
  if (fault.kind == Fault::Kind::kTwiceItems) return writer.send(FrameType::kItems, frame);
  std::cerr << fmt::format("[{}] pid {} holding batch {} after {} finished items\n", name, ::getpid(), batch.id, n)
            << std::flush;
  wait_for_release(fault);
}

// crash-join:N: abort once a batch that joined a running set has sent N items ahead (0: as it joins).
void inject_join_fault(Fault& fault, const Batch& batch, const std::string& name, int64_t n) {
  if (fault.kind != Fault::Kind::kCrashJoin || n != fault.request_index || !fault.claim()) return;
  std::cerr << fmt::format("[{}] injected fault on batch {}, joined, after {} finished items\n", name, batch.id, n)
            << std::flush;
  std::abort();
}

// The per-batch faults: abort, a corrupted answer, silence forever, or a hold until released.
// True when the batch has been answered (with a corrupt frame) and must not run.
bool inject_fault(Fault& fault, const Batch& batch, const std::string& name, FrameWriter& writer,
                  Heartbeat& heartbeat) {
  std::cerr << fmt::format("[{}] injected fault on batch {}\n", name, batch.id);
  if (fault.kind == Fault::Kind::kHold) {
    std::cerr << fmt::format("[{}] pid {} holding batch {}\n", name, ::getpid(), batch.id) << std::flush;
    wait_for_release(fault);
  }
  if (fault.kind == Fault::Kind::kCrash) std::abort();
  if (fault.kind == Fault::Kind::kCorrupt) {
    std::string bytes = encode_frame(Frame{FrameType::kResult, pack_payload({{"batch_id", batch.id}})});
    bytes[bytes.size() - 1] ^= 0x5a;
    writer.send_raw(bytes);
    return true;
  }
  if (fault.kind == Fault::Kind::kHang) {
    heartbeat.stop();
    for (;;) ::pause();
  }
  return false;
}

// Runs one batch and answers with its results, or with an error frame naming the batch. Items
// final before the batch is (a generation's sequences as they end) go ahead, one kItems frame each.
void run_batch(Replica& r, const Batch& batch, ExecutionOptions exec, FrameWriter& writer, Fault& fault) {
  const auto b0 = Clock::now();
  std::set<std::pair<int64_t, int32_t>> sent;  // (request index, part)
  exec.on_item_done = [&](const ItemResult& item) {
    if (!sent.insert({item.request_index, item.part}).second) return;  // an out-of-memory split ran it again
    const nlohmann::json frame = {{"batch_id", batch.id}, {"items", nlohmann::json::array({to_json(item)})}};
    writer.send(FrameType::kItems, frame);
    inject_item_fault(fault, batch, r.hello.worker, sent.size(), writer, frame);
  };
  nlohmann::json items = nlohmann::json::array();
  ExecutionStats stats;
  try {
    for (const ItemResult& item : execute_batch(*r.model, *r.tokenizer, batch, exec, &stats))
      items.push_back(to_json(item));
  } catch (const Error& e) {
    writer.send(FrameType::kError, {{"batch_id", batch.id}, {"message", e.what()}});
    return;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - b0).count();
  if (stats.oom_splits > 0)
    std::cerr << fmt::format("[{}] batch {} ran out of memory and was split {} time(s)\n", r.hello.worker, batch.id,
                             stats.oom_splits);
  writer.send(FrameType::kResult,
              {{"batch_id", batch.id}, {"items", items}, {"seconds", secs}, {"stats", stats.to_json()}});
}

// A generation batch and the generation batches after it with the same prefix, through one running
// set (execute_generation): while rows are free, a kWork frame waiting on the command pipe with such
// a batch (the scheduler's look-ahead) joins it. Any other frame waiting there is kept in `pending`,
// served after this. Each batch is answered as its last sequence ends, its items going ahead one
// kItems frame each; a batch the run could not finish gets an error frame naming it. Joining needs
// rows that are independent (execute_generation decides) and no per-batch fault injected.
void run_generation(Replica& r, const Batch& first, ExecutionOptions exec, FrameWriter& writer, Fault& fault, int in,
                    std::deque<std::optional<Frame>>& pending) {
  std::map<int64_t, Clock::time_point> started{{first.id, Clock::now()}};  // the batches taken, unanswered
  std::map<std::pair<int64_t, int32_t>, const Batch*> owner;  // (request index, part) -> its batch
  std::deque<Batch> joined{first};
  std::set<std::pair<int64_t, int32_t>> sent;  // items sent ahead (request index, part)
  std::map<int64_t, size_t> sent_of;  // per batch id: how many
  auto own = [&](const Batch& b) {
    for (const WorkItem& item : b.items) owner[{item.request_index, item.part}] = &b;
  };
  own(joined.front());
  exec.on_item_done = [&](const ItemResult& item) {
    if (!sent.insert({item.request_index, item.part}).second) return;  // an out-of-memory rerun
    const Batch& batch = *owner.at({item.request_index, item.part});
    const nlohmann::json frame = {{"batch_id", batch.id}, {"items", nlohmann::json::array({to_json(item)})}};
    writer.send(FrameType::kItems, frame);
    const size_t n = ++sent_of[batch.id];
    if (batch.id != first.id) inject_join_fault(fault, batch, r.hello.worker, static_cast<int64_t>(n));
    if (fault.kind == Fault::Kind::kCrashJoin && joined.size() == 1 && fault.may_fire()) {
      // The fault's set-up: the next batch comes ahead once an item has (choose_ahead), and joins.
      pollfd p{in, POLLIN, 0};
      ::poll(&p, 1, -1);
    }
    inject_item_fault(fault, batch, r.hello.worker, n, writer, frame);
  };
  const bool may_join =
      fault.kind == Fault::Kind::kNone || fault.kind == Fault::Kind::kCrashJoin || fault.fires_on_items();
  const GenerationNext next = [&]() -> std::optional<Batch> {
    if (!may_join || !pending.empty()) return std::nullopt;
    pollfd p{in, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return std::nullopt;
    std::optional<Frame> frame = read_frame(in);
    if (frame && frame->type == FrameType::kWork) {
      Batch b;
      try {
        b = batch_from_json(wire::field(unpack_payload(*frame), "batch", "work"));
      } catch (const std::exception&) {
        b = Batch{};  // serve() reads it again and fails on it there
      }
      if (!b.items.empty() && b.items.front().type == RequestType::kGenerateUntil && b.prefix == first.prefix &&
          b.stop_ids == first.stop_ids) {
        std::cerr << fmt::format("[{}] batch {} joins batch {}'s running set\n", r.hello.worker, b.id, first.id);
        started[b.id] = Clock::now();
        own(joined.emplace_back(std::move(b)));
        inject_join_fault(fault, joined.back(), r.hello.worker, 0);
        return joined.back();
      }
    }
    pending.push_back(std::move(frame));
    return std::nullopt;
  };
  const GenerationDone done = [&](const Batch& b, std::vector<ItemResult> items, const ExecutionStats& stats) {
    nlohmann::json out = nlohmann::json::array();
    for (const ItemResult& item : items) out.push_back(to_json(item));
    const double secs = std::chrono::duration<double>(Clock::now() - started.at(b.id)).count();
    started.erase(b.id);
    if (stats.oom_splits > 0)
      std::cerr << fmt::format("[{}] batch {} ran out of memory and ran again on its own\n", r.hello.worker, b.id);
    writer.send(FrameType::kResult,
                {{"batch_id", b.id}, {"items", out}, {"seconds", secs}, {"stats", stats.to_json()}});
  };
  try {
    execute_generation(*r.model, *r.tokenizer, first, exec, next, done);
  } catch (const Error& e) {
    for (const auto& [id, t] : started) writer.send(FrameType::kError, {{"batch_id", id}, {"message", e.what()}});
  }
}

// Frames after the first Hello, until Shutdown or end of stream.
void serve(Replica& r, int in, FrameWriter& writer, Heartbeat& heartbeat, Fault& fault) {
  const ExecutionOptions exec = execution_options(r, fault);
  std::deque<std::optional<Frame>> pending;  // read while a generation ran, not for it: served first
  for (;;) {
    std::optional<Frame> frame;
    if (pending.empty()) {
      frame = read_frame(in);
    } else {
      frame = std::move(pending.front());
      pending.pop_front();
    }
    if (!frame || frame->type == FrameType::kShutdown) return;
    if (frame->type == FrameType::kHello) {
      load_checkpoint(r, worker_hello_from_json(unpack_payload(*frame), &r.hello), in, writer);
      continue;
    }
    if (frame->type == FrameType::kProbe) {
      answer_probe(r, *frame, writer);
      continue;
    }
    if (frame->type != FrameType::kWork)
      throw FrameError(fmt::format("worker: unexpected {} frame", frame_type_name(frame->type)));
    const Batch batch = batch_from_json(wire::field(unpack_payload(*frame), "batch", "work"));
    if (fault.kind == Fault::Kind::kSlow) std::this_thread::sleep_for(std::chrono::milliseconds(fault.request_index));
    if (fault.fires_on(batch, r.hello.model) && inject_fault(fault, batch, r.hello.worker, writer, heartbeat)) continue;
    const bool generation = !batch.items.empty() && batch.items.front().type == RequestType::kGenerateUntil;
    if (generation && fault.kind != Fault::Kind::kOom)
      run_generation(r, batch, exec, writer, fault, in, pending);
    else
      run_batch(r, batch, exec, writer, fault);
  }
}

}  // namespace

int run_worker() {
  // The scheduler owns shutdown: a terminal's Ctrl-C must not kill us mid-frame.
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  keep_freed_memory();  // batch after batch: reuse freed activations instead of faulting them in again
  const int in = inherited_command_fd();
  const int out = inherited_result_fd();
  FrameWriter writer(out);
  Fault fault = fault_from_env();
  try {
    std::optional<Frame> first = read_frame(in);
    if (!first) return 0;
    if (first->type != FrameType::kHello) throw FrameError("worker: expected a Hello frame first");
    Replica replica;
    const WorkerHello hello = worker_hello_from_json(unpack_payload(*first));
    if (hello.threads > 0) at::set_num_threads(hello.threads);
    Heartbeat heartbeat(writer, hello.heartbeat_s);
    replica.options.device = at::Device(hello.device);
    load_checkpoint(replica, hello, in, writer);
    serve(replica, in, writer, heartbeat, fault);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gpueval worker: " << e.what() << "\n";
    try {
      writer.send(FrameType::kError, {{"batch_id", -1}, {"message", e.what()}});
    } catch (const std::exception&) {}
    return 1;
  }
}

}  // namespace gpueval
