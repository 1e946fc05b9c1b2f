#include "run/scheduler.h"

#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <iostream>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/wire_json.h"
#include "gpueval/error.h"
#include "run/dispatch.h"
#include "run/frame_channel.h"
#include "run/signals.h"
#include "run/subprocess.h"
#include "run/weight_broadcast.h"
#include "run/wire.h"
#include "run/worker_launch.h"
#include "run/worker_messages.h"

namespace gpueval {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

enum class State { kDown, kStarting, kIdle, kBusy, kRetired };

const char* state_name(State s) {
  switch (s) {
    case State::kDown: return "restarting";
    case State::kStarting: return "starting";
    case State::kIdle: return "idle";
    case State::kBusy: return "busy";
    case State::kRetired: return "retired";
  }
  return "?";
}

// A batch sent to a worker and not yet answered.
struct InFlight {
  size_t batch;  // its index in the plan
  std::vector<size_t> positions;  // of its items, those it was sent (the others came ahead before)
  Clock::time_point sent;
};

struct Worker {
  DeviceSlot slot;
  std::string model;  // the checkpoint it holds or is loading
  std::optional<Child> child;
  FrameChannel channel;  // over the child's pipes: a new one with every process, used only while it runs
  State state = State::kDown;
  Clock::time_point last_seen;
  Clock::time_point start_at;  // when a kDown worker may be (re)started
  // Its batches in flight, in the order sent: the one it computes, and at most one more sent ahead
  // for its running set (dispatch.h's choose_ahead). Busy while there is one.
  std::vector<InFlight> flight;
  int64_t prefix_id = -1;  // the prefix of its last batch: its PrefixCache holds it
  Clock::time_point busy_mark;  // since when its busy time is not yet counted
  int64_t restarts = 0;
  int broadcast_rank = -1;  // its rank while its first load goes over NCCL, else -1
  bool fresh = false;  // started for `model` and given no batch, probe or switch: only the model in memory
  std::vector<int32_t> probed_prefix;  // a probe's sample prefix, in its PrefixCache; run() maps it to prefix_id
  int64_t batches_done = 0;
  int64_t tokens_done = 0;
  int64_t tokens_requested = 0;  // item costs of its finished batches: what they would take without reuse
  int64_t tokens_computed = 0;
  int64_t tokens_scored = 0;
  double busy_seconds = 0;
  double load_seconds = -1;  // what its Hello reply said of loading `model`; -1: not yet
};

std::string log_path(const SchedulerOptions& o, const DeviceSlot& slot) {
  if (o.log_dir.empty()) return "";
  std::string name = slot.name();
  std::replace(name.begin(), name.end(), ':', '_');
  return o.log_dir + "/" + o.log_name + "_" + name + ".log";
}

// A new process for `w`, sent its Hello for `model_dir`: it is starting. Error when it cannot be spawned.
void launch(Worker& w, const SchedulerOptions& o, const std::string& model_dir,
            std::optional<WorkerHello::Broadcast> broadcast = std::nullopt) {
  w.child.emplace(launch_worker(w.slot, o.executable, log_path(o, w.slot)));
  w.channel = FrameChannel(w.child->result_fd(), w.child->command_fd());
  w.state = State::kStarting;
  w.prefix_id = -1;  // a new process starts with an empty prefix cache
  w.probed_prefix.clear();
  w.last_seen = Clock::now();
  w.flight.clear();
  w.model = model_dir;
  w.fresh = true;
  w.load_seconds = -1;
  WorkerHello hello = first_hello(w.slot, model_dir, o.dtype, o.heartbeat_period_s);
  hello.broadcast = broadcast;
  // Into an empty pipe; what it does not take now, run() or probe() flushes.
  if (const int err = w.channel.send(Frame{FrameType::kHello, pack_payload(to_json(hello))}))
    throw Error(fmt::format("write to worker failed: {}", std::strerror(err)));
  std::cerr << fmt::format("[sched] started worker {} (pid {}{})\n", w.slot.name(), w.child->pid(),
                           w.child->forked_ahead() ? ", forked ahead" : "");
}

// Ends `w`'s process now; it is down, to be started again by the next run().
void end_worker(Worker& w) {
  if (w.child) {
    w.child->kill_and_wait(std::chrono::milliseconds(0));
    w.child.reset();
  }
  w.channel = FrameChannel();
  w.state = State::kDown;
  w.fresh = false;
}

// Ends every worker: a Shutdown frame and a few seconds to exit after a clean run, signals at
// once after an interruption or a fatal error. Every Child is reaped.
void shutdown_workers(std::vector<Worker>& workers, const SchedulerReport& report) {
  const bool clean = !report.interrupted && report.fatal_error.empty();
  for (Worker& w : workers) {
    if (!w.child) continue;
    if (clean) {
      try {
        write_frame(w.child->command_fd(), Frame{FrameType::kShutdown, pack_payload(nlohmann::json::object())});
      } catch (const std::exception&) {}
    }
    w.child->close_command();
  }
  // After a Shutdown frame a worker exits by itself; give it a few seconds before signals.
  const auto deadline = Clock::now() + std::chrono::seconds(clean ? 5 : 0);
  for (Worker& w : workers) {
    if (!w.child) continue;
    while (!w.child->poll() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ExitStatus st = w.child->kill_and_wait(std::chrono::milliseconds(1000));
    if (!st.success() && clean)
      std::cerr << fmt::format("[sched] worker {} {} at shutdown\n", w.slot.name(), st.describe());
    w.child.reset();
    w.channel = FrameChannel();
    w.state = State::kRetired;
  }
}

// One run(): the event loop over the pool's workers for one plan and checkpoint.
class Loop {
 public:
  Loop(const SchedulerOptions& o, std::vector<Worker>& workers, const Plan& plan, const std::string& model_dir,
       const Scheduler::ResultCallback& on_result, const Scheduler::StatusCallback& on_status,
       const Scheduler::ItemsCallback& on_items)
      : o_(o),
        plan_(plan),
        model_dir_(model_dir),
        on_result_(on_result),
        on_status_(on_status),
        on_items_(on_items),
        workers_(workers) {
    for (size_t i = 0; i < plan.batches.size(); ++i) {
      queue_.push_back(i);
      tokens_total_ += plan.batches[i].padded_tokens;
    }
    attempts_.assign(plan.batches.size(), 0);
    failures_.assign(plan.batches.size(), "");
    ahead_.assign(plan.batches.size(), {});
    reset_workers();
    begin_broadcast_group();
  }

  SchedulerReport run() {
    SignalScope signals;
    start_ = Clock::now();
    last_status_ = start_ - std::chrono::seconds(10);
    while (!finished()) {
      if (const int sig = signals.stop_signal()) {
        report_.interrupted = true;
        report_.signal = sig;
        std::cerr << fmt::format("[sched] {} received: stopping dispatch and ending workers\n",
                                 sig == SIGINT ? "SIGINT" : "SIGTERM");
        break;
      }
      if (!report_.fatal_error.empty()) break;
      const auto now = Clock::now();
      for (Worker& w : workers_)
        if (w.state == State::kDown && now >= w.start_at) start_worker(w);
      dispatch();
      if (all_retired()) {
        report_.fatal_error = "every worker exhausted its restarts; the remaining batches were not run";
        break;
      }
      wait_for_events(signals);
      check_health();
      maybe_status(false);
    }
    // Interrupted or failed: every worker ends now. Otherwise they stay for the next checkpoint
    // (Scheduler::shutdown ends them).
    if (report_.interrupted || !report_.fatal_error.empty()) shutdown_workers(workers_, report_);
    report_.wall_seconds = seconds_between(start_, Clock::now());
    report_.timing = timing();
    for (size_t i : quarantined_)
      report_.quarantined.push_back({plan_.batches[i].id, attempts_[i], failures_[i], request_indices(i)});
    maybe_status(true);
    return report_;
  }

 private:
  // Workers kept from the previous checkpoint: their counters start again, one that was retired
  // or shut down gets a new process, and heartbeats that queued up in the pipes while no loop was
  // reading them do not count as silence.
  void reset_workers() {
    const auto now = Clock::now();
    for (Worker& w : workers_) {
      w.restarts = 0;
      w.batches_done = 0;
      w.tokens_done = 0;
      w.tokens_requested = 0;
      w.tokens_computed = 0;
      w.tokens_scored = 0;
      w.busy_seconds = 0;
      if (w.model != model_dir_) w.load_seconds = -1;  // it holds the previous checkpoint: it loads this one
      w.last_seen = now;
      if (!w.child) {
        w.state = State::kDown;
        w.start_at = now;
      }
      // A probe left its sample's prefix in the worker's cache: the plan's batches with it go there first.
      if (w.child && !w.probed_prefix.empty()) {
        for (const Batch& b : plan_.batches)
          if (b.prefix_id >= 0 && b.prefix == w.probed_prefix) {
            w.prefix_id = b.prefix_id;
            break;
          }
      }
      w.probed_prefix.clear();
    }
  }

  // A weight broadcast needs every rank to start together: only when no worker is running yet.
  void begin_broadcast_group() {
    broadcast_group_ = o_.load == "broadcast" &&
                       std::none_of(workers_.begin(), workers_.end(), [](const Worker& w) { return bool(w.child); });
    for (size_t i = 0; i < workers_.size(); ++i)
      workers_[i].broadcast_rank = broadcast_group_ ? static_cast<int>(i) : -1;
    if (broadcast_group_)
      std::cerr << fmt::format(
          "[sched] load: broadcast: worker {} reads the checkpoint, NCCL sends it to {} other(s)\n",
          workers_[0].slot.name(), workers_.size() - 1);
  }

  bool finished() const {
    if (!queue_.empty()) return false;
    for (const Worker& w : workers_)
      if (w.state == State::kBusy) return false;
    return true;
  }

  bool all_retired() const {
    for (const Worker& w : workers_)
      if (w.state != State::kRetired) return false;
    return true;
  }

  // Starting, idle or busy: a process that holds (or is loading) a model.
  static bool is_up(const Worker& w) { return w.state != State::kRetired && w.state != State::kDown; }

  std::vector<int64_t> request_indices(size_t batch) const {
    std::vector<int64_t> out;
    for (const auto& item : plan_.batches[batch].items)
      if (out.empty() || out.back() != item.request_index) out.push_back(item.request_index);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  void start_worker(Worker& w) {
    std::optional<WorkerHello::Broadcast> broadcast;
    if (broadcast_group_ && w.broadcast_rank >= 0)
      broadcast = WorkerHello::Broadcast{w.broadcast_rank, static_cast<int>(workers_.size())};
    try {
      launch(w, o_, model_dir_, broadcast);
    } catch (const Error& e) {
      if (!w.child) {
        report_.fatal_error = fmt::format("cannot start worker {}: {}", w.slot.name(), e.what());
        return;
      }
      crash(w, e.what());
    }
  }

  void send(Worker& w, const Frame& frame) {
    if (const int err = w.channel.send(frame)) write_failed(w, err);
  }

  // Writes what the pipe takes now; the rest waits for POLLOUT.
  void flush(Worker& w) {
    if (const int err = w.channel.flush()) write_failed(w, err);
  }

  void write_failed(Worker& w, int err) { crash(w, fmt::format("write to worker failed: {}", std::strerror(err))); }

  void dispatch() {
    for (Worker& w : workers_) {
      if (w.state != State::kIdle) continue;
      std::vector<QueuedBatch> queued;
      std::vector<int64_t> others;
      for (size_t i : queue_) queued.push_back(queued_batch(i));
      for (const Worker& o : workers_)
        if (&o != &w && is_up(o)) others.push_back(o.prefix_id);
      const DispatchChoice choice = choose_dispatch(queued, w.model == model_dir_, w.prefix_id, others);
      if (choice.action == DispatchChoice::Action::kWait) continue;  // another idle worker may still take one
      if (choice.action == DispatchChoice::Action::kSwitchCheckpoint)
        switch_checkpoint(w);
      else
        send_batch(w, choice.position);
    }
    // Then the look-ahead: a busy worker whose generation batch is draining gets its next one.
    const size_t up = static_cast<size_t>(std::count_if(workers_.begin(), workers_.end(), is_up));
    for (Worker& w : workers_) {
      if (w.state != State::kBusy || w.flight.size() != 1) continue;
      std::vector<QueuedBatch> queued;
      for (size_t i : queue_) queued.push_back(queued_batch(i));
      const size_t i = w.flight.front().batch;
      const Batch& b = plan_.batches[i];
      const FlightBatch current{is_generation(b), b.prefix_id, static_cast<int64_t>(b.items.size()),
                                static_cast<int64_t>(ahead_[i].size()), b.max_rows};
      if (const std::optional<size_t> k = choose_ahead(queued, {current}, up)) send_batch(w, *k);
    }
  }

  static bool is_generation(const Batch& b) {
    return !b.items.empty() && b.items.front().type == RequestType::kGenerateUntil;
  }

  QueuedBatch queued_batch(size_t i) const {
    const Batch& b = plan_.batches[i];
    return {b.prefix_id, static_cast<int64_t>(b.prefix.size()), b.padded_tokens, is_generation(b)};
  }

  // It holds the previous checkpoint: it loads this one in place (a second Hello).
  void switch_checkpoint(Worker& w) {
    w.model = model_dir_;
    w.fresh = false;
    w.state = State::kStarting;
    w.prefix_id = -1;
    w.load_seconds = -1;
    send(w, Frame{FrameType::kHello, pack_payload(switch_hello_json(model_dir_, o_.dtype))});
  }

  void send_batch(Worker& w, size_t position) {
    const size_t i = queue_[position];
    queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(position));
    const Batch& planned = plan_.batches[i];
    if (planned.prefix_id >= 0) w.prefix_id = planned.prefix_id;
    const auto now = Clock::now();
    if (w.flight.empty()) w.busy_mark = now;
    w.state = State::kBusy;
    w.fresh = false;
    InFlight& f = w.flight.emplace_back(InFlight{i, {}, now});
    if (!first_sent_) first_sent_ = now;
    for (size_t k = 0; k < planned.items.size(); ++k)
      if (!ahead_[i].count(k)) f.positions.push_back(k);
    if (w.flight.size() > 1)
      std::cerr << fmt::format("[sched] batch {} sent ahead to worker {} (batch {} is ending)\n", planned.id,
                               w.slot.name(), plan_.batches[w.flight.front().batch].id);
    if (f.positions.size() == planned.items.size())
      return send(w, Frame{FrameType::kWork, pack_payload({{"batch", to_json(planned)}})});
    // Its worker failed after some items came ahead: those are final, the rest runs without them.
    std::cerr << fmt::format("[sched] batch {} goes on without its {} items that ended ahead ({} of {} left)\n",
                             planned.id, ahead_[i].size(), f.positions.size(), planned.items.size());
    if (f.positions.empty()) {
      std::vector<ItemResult> items;
      for (const auto& [k, r] : ahead_[i]) items.push_back(r);
      return finish_batch(w, w.flight.size() - 1, std::move(items), ExecutionStats{});
    }
    send(w, Frame{FrameType::kWork, pack_payload({{"batch", to_json(generation_batch_subset(planned, f.positions))}})});
  }

  void wait_for_events(const SignalScope& signals) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, bool>> owners;  // (worker, is_result_fd)
    for (Worker& w : workers_) {
      if (!w.child || !is_up(w)) continue;
      fds.push_back({w.child->result_fd(), POLLIN, 0});
      owners.emplace_back(&w, true);
      if (w.channel.has_output()) {
        fds.push_back({w.child->command_fd(), POLLOUT, 0});
        owners.emplace_back(&w, false);
      }
    }
    // Wake for the next heartbeat deadline, restart, or status tick, at most every 200 ms.
    timespec timeout{0, 200 * 1000 * 1000};
    int n = ::ppoll(fds.data(), fds.size(), &timeout, signals.wait_mask());
    if (n <= 0) return;  // timeout or EINTR (a signal: handled by the loop)
    for (size_t k = 0; k < fds.size(); ++k) {
      Worker& w = *owners[k].first;
      if (!w.child || fds[k].revents == 0) continue;
      if (owners[k].second)
        read_from(w);
      else
        flush(w);
    }
  }

  void read_from(Worker& w) {
    const uint64_t before = w.channel.bytes_received();
    FrameChannel::Receive r = FrameChannel::Receive::kDrained;
    try {
      r = w.channel.receive([&](const Frame& f) {
        w.last_seen = Clock::now();
        handle_frame(w, f);
        return w.child.has_value();  // false: it crashed while handling
      });
    } catch (const FrameError& e) {
      return crash(w, fmt::format("sent a bad frame: {}", e.what()));
    }
    if (w.channel.bytes_received() != before) w.last_seen = Clock::now();
    if (r == FrameChannel::Receive::kEnd || r == FrameChannel::Receive::kFailed) {
      const bool truncated = w.channel.buffered() > 0;
      ExitStatus st = w.child->kill_and_wait(std::chrono::milliseconds(2000));
      crash(w, fmt::format("closed its pipe{} and {}", truncated ? " mid-frame" : "", st.describe()));
    }
  }

  void handle_frame(Worker& w, const Frame& f) {
    nlohmann::json j;
    try {
      j = unpack_payload(f);
    } catch (const FrameError& e) {
      return crash(w, fmt::format("sent a bad payload: {}", e.what()));
    }
    // Each message is decoded and checked in full before it changes any state
    // (worker_messages.h); a malformed one is the worker's crash, never the scheduler's.
    HelloReply hello;
    ErrorReply error;
    ResultReply result;
    ItemsReply ahead;
    std::string nccl_id;
    try {
      switch (f.type) {
        case FrameType::kHeartbeat: return;
        case FrameType::kHello: hello = hello_reply_from_json(j); break;
        case FrameType::kBroadcast: nccl_id = broadcast_id_from_json(j); break;
        case FrameType::kResult: result = result_reply_from_json(j); break;
        case FrameType::kItems: ahead = items_reply_from_json(j); break;
        case FrameType::kError: error = error_reply_from_json(j); break;
        default: return crash(w, fmt::format("protocol error: unexpected {} frame", frame_type_name(f.type)));
      }
    } catch (const Error& e) {
      return crash(w, fmt::format("protocol error: {}", e.what()));
    }
    switch (f.type) {
      case FrameType::kHello: return on_hello_frame(w, hello);
      case FrameType::kBroadcast: return on_broadcast_frame(w, nccl_id);
      case FrameType::kResult: return on_result_frame(w, std::move(result));
      case FrameType::kItems: return on_items_frame(w, std::move(ahead));
      case FrameType::kError: return on_error_frame(w, error);
      default: return;
    }
  }

  void on_hello_frame(Worker& w, const HelloReply& hello) {
    if (w.state != State::kStarting) return crash(w, "protocol error: unexpected Hello");
    w.state = State::kIdle;
    w.load_seconds = hello.load_seconds;
    std::cerr << fmt::format("[sched] worker {} ready ({} loaded in {:.2f}s)\n", w.slot.name(), hello.model,
                             hello.load_seconds);
    if (broadcast_group_ && std::none_of(workers_.begin(), workers_.end(), [](const Worker& o) {
          return o.broadcast_rank >= 0 && o.state == State::kStarting;
        }))
      end_broadcast_group();
  }

  // Rank 0's NCCL id, once, while the group loads: every other rank gets it.
  void on_broadcast_frame(Worker& w, const std::string& nccl_id) {
    if (!broadcast_group_ || w.broadcast_rank != 0 || w.state != State::kStarting)
      return crash(w, "protocol error: unexpected broadcast frame");
    for (Worker& o : workers_)
      if (o.broadcast_rank > 0 && o.child) send(o, Frame{FrameType::kBroadcast, pack_payload({{"nccl_id", nccl_id}})});
  }

  void on_error_frame(Worker& w, const ErrorReply& error) {
    const std::string& message = error.message;
    if (w.state == State::kStarting || error.batch_id < 0) {
      // A worker that cannot load its model will fail the same way on every restart.
      report_.fatal_error = fmt::format("worker {}: {}", w.slot.name(), message);
      return;
    }
    const std::optional<size_t> k = flight_of(w, error.batch_id);
    if (!k)
      return crash(w, fmt::format("protocol error: an error for batch {}, which it does not hold", error.batch_id));
    fail_batch(w, fmt::format("worker {} reported: {}", w.slot.name(), message), /*restart=*/false, *k);
  }

  static bool same_item(const ItemResult& r, const WorkItem& item) {
    return r.request_index == item.request_index && r.part == item.part;
  }

  static bool same_result(const ItemResult& a, const ItemResult& b) {
    return a.parts == b.parts && std::memcmp(&a.logprob, &b.logprob, sizeof a.logprob) == 0 &&
           a.is_greedy == b.is_greedy && a.num_tokens == b.num_tokens && a.text == b.text;
  }

  // The items of a Result frame for the batch `w` computes, in the batch's order with those that
  // came ahead merged in; Error if they are not exactly the items it was sent, in order, or differ
  // from what came ahead.
  std::vector<ItemResult> result_items(ResultReply& result, const InFlight& f) const {
    const size_t i = f.batch;
    const Batch& batch = plan_.batches[i];
    if (result.items.size() != f.positions.size())
      throw Error(fmt::format("{} results for {} items", result.items.size(), f.positions.size()));
    std::vector<ItemResult> items(batch.items.size());
    for (const auto& [k, r] : ahead_[i]) items[k] = r;
    for (size_t k = 0; k < f.positions.size(); ++k) {
      const size_t at = f.positions[k];
      ItemResult& r = result.items[k];
      if (!same_item(r, batch.items[at])) throw Error("results out of order");
      if (auto it = ahead_[i].find(at); it != ahead_[i].end() && !same_result(it->second, r))
        throw Error(fmt::format("the result of request {} differs from the one that came ahead", r.request_index));
      items[at] = std::move(r);
    }
    return items;
  }

  // Items of the batch in flight that ended ahead of it: kept (and handed to on_items) so that a
  // failed worker's batch goes on without them.
  void on_items_frame(Worker& w, ItemsReply reply) {
    if (w.state != State::kBusy) return crash(w, "protocol error: items while idle");
    const std::optional<size_t> f = flight_of(w, reply.batch_id);
    if (!f) return crash(w, "protocol error: items of a batch it does not hold");
    const std::vector<size_t>& positions = w.flight[*f].positions;
    const size_t i = w.flight[*f].batch;
    const Batch& batch = plan_.batches[i];
    std::vector<size_t> at;
    for (const ItemResult& r : reply.items) {
      auto k = std::find_if(positions.begin(), positions.end(), [&](size_t p) { return same_item(r, batch.items[p]); });
      if (k == positions.end() || ahead_[i].count(*k) || std::find(at.begin(), at.end(), *k) != at.end())
        return crash(
            w, fmt::format("protocol error: an item of request {} that is not one still to come", r.request_index));
      at.push_back(*k);
    }
    for (size_t k = 0; k < at.size(); ++k) ahead_[i].emplace(at[k], reply.items[k]);
    items_ahead_ += static_cast<int64_t>(at.size());
    if (!report_.fatal_error.empty() || !on_items_) return;
    try {
      on_items_(batch, reply.items);
    } catch (const std::exception& e) {
      report_.fatal_error = e.what();
    }
  }

  void on_result_frame(Worker& w, ResultReply result) {
    if (w.state != State::kBusy) return crash(w, "protocol error: a result while idle");
    const std::optional<size_t> f = flight_of(w, result.batch_id);
    if (!f) return crash(w, "protocol error: result for a batch it does not hold");
    std::vector<ItemResult> items;
    try {
      items = result_items(result, w.flight[*f]);
    } catch (const std::exception& e) {
      return crash(w, fmt::format("protocol error: {}", e.what()));
    }
    finish_batch(w, *f, std::move(items), result.stats);
  }

  // Which of `w`'s batches in flight has this id.
  std::optional<size_t> flight_of(const Worker& w, int64_t batch_id) const {
    for (size_t k = 0; k < w.flight.size(); ++k)
      if (plan_.batches[w.flight[k].batch].id == batch_id) return k;
    return std::nullopt;
  }

  // `w`'s batch flight[k] is done: `items` are all of its items, in order. Its busy time counts
  // from when it was sent or the worker's previous result, whichever is later (batches in flight
  // together are busy time once).
  void finish_batch(Worker& w, size_t k, std::vector<ItemResult> items, const ExecutionStats& stats) {
    const size_t i = w.flight[k].batch;
    const Batch& batch = plan_.batches[i];
    w.flight.erase(w.flight.begin() + static_cast<std::ptrdiff_t>(k));
    ahead_[i].clear();
    report_.stats.add(stats);
    last_result_ = Clock::now();
    w.busy_seconds += seconds_between(w.busy_mark, *last_result_);
    w.busy_mark = *last_result_;
    w.tokens_computed += stats.tokens_computed;
    for (const WorkItem& item : batch.items) w.tokens_requested += item.cost();
    for (const ItemResult& r : items) w.tokens_scored += r.num_tokens;
    w.batches_done += 1;
    w.tokens_done += batch.padded_tokens;
    tokens_done_ += batch.padded_tokens;
    report_.batches_done += 1;
    if (w.flight.empty()) w.state = State::kIdle;
    // A result the aggregator cannot keep (its journal is full) ends the run; nothing after it is delivered.
    if (!report_.fatal_error.empty()) return;
    try {
      on_result_(batch, std::move(items), w.slot.name());
    } catch (const std::exception& e) {
      report_.fatal_error = e.what();
    }
  }

  // `w`'s batch flight[k] failed (all of them: k absent, the worker is gone): back to the queue, the
  // first sent first, or into quarantine.
  void fail_batch(Worker& w, const std::string& reason, bool restart, std::optional<size_t> k = std::nullopt) {
    std::vector<InFlight> failed;
    if (k) {
      failed.push_back(std::move(w.flight[*k]));
      w.flight.erase(w.flight.begin() + static_cast<std::ptrdiff_t>(*k));
    } else {
      failed = std::move(w.flight);
      w.flight.clear();
    }
    for (auto f = failed.rbegin(); f != failed.rend(); ++f) {
      const size_t i = f->batch;
      attempts_[i] += 1;
      failures_[i] = reason;
      if (attempts_[i] >= o_.max_attempts) {
        quarantined_.push_back(i);
        std::cerr << fmt::format("[sched] batch {} quarantined after {} failed attempts (last: {})\n",
                                 plan_.batches[i].id, attempts_[i], reason);
      } else {
        queue_.push_front(i);  // retried next, with the same contents, so its results do not change
      }
    }
    if (!restart && w.state == State::kBusy && w.flight.empty()) w.state = State::kIdle;
  }

  // The group has loaded (or failed): later starts of any worker load with mmap.
  void end_broadcast_group() {
    broadcast_group_ = false;
    for (Worker& o : workers_) o.broadcast_rank = -1;
  }

  void crash(Worker& w, const std::string& reason) {
    std::cerr << fmt::format("[sched] worker {} failed: {}\n", w.slot.name(), reason);
    if (broadcast_group_ && w.broadcast_rank >= 0) {
      // The other ranks would wait for it inside NCCL forever: they restart too, loading with mmap.
      end_broadcast_group();
      for (Worker& o : workers_)
        if (&o != &w && o.child && o.state == State::kStarting)
          crash(o, fmt::format("lost worker {} of its weight broadcast", w.slot.name()));
    }
    fail_batch(w, fmt::format("worker {} {}", w.slot.name(), reason), /*restart=*/true);
    if (w.child) {
      w.child->kill_and_wait(std::chrono::milliseconds(0));
      w.child.reset();
    }
    report_.worker_restarts += 1;
    w.restarts += 1;
    if (w.restarts > o_.max_worker_restarts) {
      w.state = State::kRetired;
      std::cerr << fmt::format("[sched] worker {} retired after {} restarts\n", w.slot.name(), w.restarts - 1);
      return;
    }
    w.state = State::kDown;
    // Exponential backoff: 0.1 s, 0.2 s, ... capped at 5 s.
    const double delay = std::min(5.0, 0.1 * std::pow(2.0, static_cast<double>(w.restarts - 1)));
    w.start_at = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(delay * 1e6));
  }

  void check_health() {
    const auto now = Clock::now();
    for (Worker& w : workers_) {
      if (!w.child || !is_up(w)) continue;
      if (auto st = w.child->poll()) {
        crash(w, st->describe());
        continue;
      }
      const double silent = seconds_between(w.last_seen, now);
      if (silent > o_.heartbeat_timeout_s) crash(w, fmt::format("missed its heartbeat for {:.1f}s", silent));
    }
  }

  void maybe_status(bool final) {
    const auto now = Clock::now();
    if (!final && seconds_between(last_status_, now) < 1.0) return;
    last_status_ = now;
    if (on_status_) on_status_(status_at(now), final);
  }

  SchedulerStatus status_at(Clock::time_point now) const {
    SchedulerStatus s;
    s.batches_total = static_cast<int64_t>(plan_.batches.size());
    s.batches_done = report_.batches_done;
    s.batches_quarantined = static_cast<int64_t>(quarantined_.size());
    s.tokens_total = tokens_total_;
    s.tokens_done = tokens_done_;
    s.items_ahead = items_ahead_;
    s.elapsed_s = seconds_between(start_, now);
    if (tokens_done_ > 0) s.eta_s = s.elapsed_s * static_cast<double>(tokens_total_ - tokens_done_) / tokens_done_;
    for (const Worker& w : workers_) s.workers.push_back(worker_status(w, now));
    s.timing = timing();
    return s;
  }

  RunTiming timing() const {
    RunTiming t;
    if (first_sent_) t.first_batch_s = seconds_between(start_, *first_sent_);
    if (first_sent_ && last_result_) t.compute_s = seconds_between(*first_sent_, *last_result_);
    for (const Worker& w : workers_)
      t.workers.push_back({w.slot.name(), w.load_seconds, w.busy_seconds, w.batches_done, w.tokens_requested,
                           w.tokens_computed, w.tokens_scored});
    return t;
  }

  WorkerStatus worker_status(const Worker& w, Clock::time_point now) const {
    WorkerStatus ws;
    ws.name = w.slot.name();
    ws.state = state_name(w.state);
    ws.pid = w.child ? w.child->pid() : 0;
    ws.batch = w.flight.empty() ? -1 : plan_.batches[w.flight.front().batch].id;
    ws.batches_in_flight = static_cast<int64_t>(w.flight.size());
    ws.batches_done = w.batches_done;
    ws.tokens_done = w.tokens_done;
    ws.tokens_per_second = w.busy_seconds > 0 ? w.tokens_done / w.busy_seconds : 0;
    ws.heartbeat_age_s = w.child ? seconds_between(w.last_seen, now) : 0;
    ws.restarts = w.restarts;
    return ws;
  }

  const SchedulerOptions& o_;
  const Plan& plan_;
  const std::string& model_dir_;
  const Scheduler::ResultCallback& on_result_;
  const Scheduler::StatusCallback& on_status_;
  const Scheduler::ItemsCallback& on_items_;
  std::deque<size_t> queue_;
  std::vector<std::map<size_t, ItemResult>> ahead_;  // [batch]: its items that came ahead, by position
  int64_t items_ahead_ = 0;
  std::vector<int64_t> attempts_;
  std::vector<std::string> failures_;
  std::vector<size_t> quarantined_;
  std::vector<Worker>& workers_;
  bool broadcast_group_ = false;  // the workers' first load goes over NCCL (weight_broadcast.h)
  int64_t tokens_total_ = 0, tokens_done_ = 0;
  Clock::time_point start_, last_status_;
  std::optional<Clock::time_point> first_sent_, last_result_;  // the compute window (RunTiming)
  SchedulerReport report_;
};

}  // namespace

struct Scheduler::Pool {
  std::vector<Worker> workers;
};

nlohmann::json RunTiming::to_json() const {
  nlohmann::json ws = nlohmann::json::array();
  for (const WorkerTiming& w : workers)
    ws.push_back({{"name", w.name},
                  {"load_s", w.load_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(w.load_s)},
                  {"busy_s", w.busy_s},
                  {"batches", w.batches},
                  {"tokens_requested", w.tokens_requested},
                  {"tokens_computed", w.tokens_computed},
                  {"tokens_scored", w.tokens_scored}});
  return {{"first_batch_s", first_batch_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(first_batch_s)},
          {"compute_s", compute_s},
          {"workers", ws}};
}

nlohmann::json RunTiming::summary(double before_run_s) const {
  nlohmann::json j = to_json();
  int64_t requested = 0, computed = 0, scored = 0;
  for (const WorkerTiming& w : workers) {
    requested += w.tokens_requested;
    computed += w.tokens_computed;
    scored += w.tokens_scored;
  }
  const auto rate = [&](double n) { return compute_s > 0 ? nlohmann::json(n / compute_s) : nlohmann::json(nullptr); };
  j["before_first_batch_s"] =
      first_batch_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(before_run_s + first_batch_s);
  j["tokens_requested"] = requested;
  j["tokens_computed"] = computed;
  j["tokens_scored"] = scored;
  j["requested_tokens_per_s"] = rate(static_cast<double>(requested));
  j["computed_tokens_per_s"] = rate(static_cast<double>(computed));
  for (size_t i = 0; i < workers.size(); ++i) j["workers"][i]["busy_fraction"] = rate(workers[i].busy_s);
  return j;
}

Scheduler::Scheduler(SchedulerOptions options) : options_(std::move(options)), pool_(std::make_unique<Pool>()) {
  if (options_.load != "mmap" && options_.load != "broadcast")
    throw Error(fmt::format("scheduler: load must be mmap or broadcast, got '{}'", options_.load));
  if (options_.load == "broadcast") {
    const std::string why = broadcast_fallback_reason(options_.slots);
    if (!why.empty()) {
      std::cerr << fmt::format("[sched] load: broadcast falls back to per-worker mmap: {}\n", why);
      options_.load = "mmap";
    }
  }
  for (const DeviceSlot& s : options_.slots) {
    Worker w;
    w.slot = s;
    w.start_at = Clock::now();
    pool_->workers.push_back(std::move(w));
  }
}

Scheduler::~Scheduler() { shutdown(); }

SchedulerReport Scheduler::run(const Plan& plan, const std::string& model_dir, const ResultCallback& on_result,
                               const StatusCallback& on_status, const ItemsCallback& on_items) {
  if (options_.slots.empty()) throw Error("scheduler: no device slots");
  Loop loop(options_, pool_->workers, plan, model_dir, on_result, on_status, on_items);
  return loop.run();
}

int Scheduler::start_workers(const std::string& model_dir) {
  if (options_.load == "broadcast") return 0;
  int started = 0;
  std::vector<std::string> devices;  // GPUs whose first slot was seen
  for (Worker& w : pool_->workers) {
    if (w.slot.kind != DeviceSlot::Kind::kCpu) {
      const std::string device = "cuda:" + std::to_string(w.slot.index);
      if (std::find(devices.begin(), devices.end(), device) != devices.end()) continue;
      devices.push_back(device);
    }
    if (w.child) continue;
    try {
      launch(w, options_, model_dir);
      ++started;
    } catch (const Error& e) {
      // run() starts it again and reports what stays broken.
      std::cerr << fmt::format("[sched] worker {} did not start early: {}\n", w.slot.name(), e.what());
      end_worker(w);
    }
  }
  return started;
}

namespace {

// Drives `w` through a probe: flushes what it was sent, reads its Hello (it is then idle) and the
// probe's Result. Error on anything else, on its exit, or on silence past `silence_s`.
ProbeResult await_probe(Worker& w, double silence_s) {
  std::optional<ProbeResult> result;
  std::string error;
  const auto take = [&](const Frame& f) {
    const nlohmann::json j = unpack_payload(f);
    switch (f.type) {
      case FrameType::kHeartbeat: return true;
      case FrameType::kHello: {
        if (w.state != State::kStarting) throw Error("protocol error: unexpected Hello");
        const HelloReply hello = hello_reply_from_json(j);
        w.state = State::kIdle;
        w.load_seconds = hello.load_seconds;
        std::cerr << fmt::format("[sched] worker {} ready ({} loaded in {:.2f}s)\n", w.slot.name(), hello.model,
                                 hello.load_seconds);
        return true;
      }
      case FrameType::kResult: result = probe_result_from_json(wire::field(j, "probe", "probe result")); return false;
      case FrameType::kError: error = error_reply_from_json(j).message; return false;
      default: throw Error(fmt::format("protocol error: unexpected {} frame", frame_type_name(f.type)));
    }
  };
  for (;;) {
    if (const int err = w.channel.flush()) throw Error(fmt::format("write to worker failed: {}", std::strerror(err)));
    const uint64_t before = w.channel.bytes_received();
    const FrameChannel::Receive r = w.channel.receive(take);
    if (w.channel.bytes_received() != before) w.last_seen = Clock::now();
    if (!error.empty()) throw Error(error);
    if (result) return *result;
    if (r == FrameChannel::Receive::kFailed)
      throw Error(fmt::format("read from worker failed: {}", std::strerror(w.channel.read_errno())));
    if (r == FrameChannel::Receive::kEnd)
      throw Error(fmt::format("the worker {} before answering",
                              w.child->kill_and_wait(std::chrono::milliseconds(2000)).describe()));
    std::vector<pollfd> fds = {{w.child->result_fd(), POLLIN, 0}};
    if (w.channel.has_output()) fds.push_back({w.child->command_fd(), POLLOUT, 0});
    const int rc = ::poll(fds.data(), fds.size(), 200);
    if (rc < 0 && errno != EINTR) throw Error(fmt::format("poll failed: {}", std::strerror(errno)));
    if (const auto st = w.child->poll()) throw Error(st->describe());
    const double silent = seconds_between(w.last_seen, Clock::now());
    if (silent > silence_s) throw Error(fmt::format("silent for {:.1f}s", silent));
  }
}

}  // namespace

std::optional<ProbeResult> Scheduler::probe(const DeviceSlot& slot, const std::string& model_dir,
                                            const ProbeOptions& options) {
  if (options_.load == "broadcast") return std::nullopt;
  auto it = std::find_if(pool_->workers.begin(), pool_->workers.end(),
                         [&](const Worker& w) { return w.slot.name() == slot.name(); });
  if (it == pool_->workers.end()) return std::nullopt;
  Worker& w = *it;
  if (w.child && !(w.fresh && w.model == model_dir)) return std::nullopt;
  try {
    if (!w.child) launch(w, options_, model_dir);
    w.fresh = false;  // from here on its memory holds the probe's batches too
    if (const int err = w.channel.send(Frame{FrameType::kProbe, pack_payload(to_json(options))}))
      throw Error(fmt::format("write to worker failed: {}", std::strerror(err)));
    ProbeResult result = await_probe(w, options_.heartbeat_timeout_s);
    if (options.sample) w.probed_prefix = options.sample->prefix;
    return result;
  } catch (const FrameError& e) {
    end_worker(w);
    throw Error(fmt::format("probe on {}: bad frame: {}", slot.name(), e.what()));
  } catch (const Error& e) {
    end_worker(w);
    throw Error(fmt::format("probe on {}: {}", slot.name(), e.what()));
  } catch (const nlohmann::json::exception& e) {
    end_worker(w);
    throw Error(fmt::format("probe on {}: malformed reply: {}", slot.name(), e.what()));
  }
}

void Scheduler::shutdown() {
  if (pool_) shutdown_workers(pool_->workers, SchedulerReport());
}

void Scheduler::abandon_workers() {
  SchedulerReport abandoned;
  abandoned.fatal_error = "the run's inputs did not load";
  if (pool_) shutdown_workers(pool_->workers, abandoned);
}

}  // namespace gpueval
