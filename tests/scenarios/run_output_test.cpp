// What `gpueval run` shows a person: the table of scores on stdout (report.md's) and the line
// naming the report, logs on stderr, --quiet leaving errors only; on a terminal, a progress bar
// that never shares a line with a log line.
#include <gmock/gmock.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>

#include "run_outputs.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing::write_demo_config;

std::string expected_stdout(const std::string& out) {
  return testing::scores_table_of(out) + "\nfull report: " + out + "/report.md\n";
}

TEST(CliOutput, RunPrintsTheTableOnStdoutAndLogsOnStderr) {
  testing::TempDir dir;
  const std::string cfg = write_demo_config(dir, "demo");
  const auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string table = testing::scores_table_of(dir.file("demo"));
  EXPECT_THAT(table, HasSubstr("| demo_choice |"));
  EXPECT_THAT(table, HasSubstr("| demo_perplexity |"));
  EXPECT_EQ(r.out, expected_stdout(dir.file("demo")));
  EXPECT_THAT(r.err, HasSubstr("[sched] "));
  EXPECT_THAT(r.err, Not(HasSubstr("| Task |")));
}

TEST(CliOutput, QuietLeavesTheTableAndNothingOnStderr) {
  testing::TempDir dir;
  const std::string cfg = write_demo_config(dir, "demo");
  const auto r = testing::run_gpueval({"--gpus", "cpu:1", cfg, "--quiet"});  // the bare form of `run`
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected_stdout(dir.file("demo")));
  EXPECT_EQ(r.err, "");
}

TEST(CliOutput, QuietStillPrintsTheOneLineError) {
  testing::TempDir dir;
  const std::string cfg = dir.write("bad.yaml", "model: " + testing::source_dir() + "/models/stories260K\n" +
                                                    "tasks: [no_such_task]\noutput: " + dir.file("bad") + "\n");
  const auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", cfg, "--quiet"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  ASSERT_THAT(r.err, ::testing::StartsWith("gpueval: "));
  EXPECT_THAT(r.err, HasSubstr("no_such_task"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.back(), '\n');
}

struct PtyResult {
  int exit_code = -1;
  std::string bytes;  // everything the terminal received, stdout and stderr alike
};

// Runs gpueval with a pseudo-terminal as its stdin, stdout and stderr (TERM=xterm, 200 columns),
// reading all it writes until its side of the terminal is closed.
PtyResult run_in_pty(const std::vector<std::string>& args) {
  int master = -1;
  winsize ws{};
  ws.ws_row = 50;
  ws.ws_col = 200;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  if (pid < 0) throw std::runtime_error("forkpty failed");
  if (pid == 0) {
    ::setenv("TERM", "xterm", 1);
    std::vector<std::string> argv_s = {testing::binary()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  PtyResult r;
  char buf[4096];
  for (;;) {
    pollfd p{master, POLLIN, 0};
    const int ready = ::poll(&p, 1, 300000);  // a guard against a hung run, not a timing assumption
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      ADD_FAILURE() << "no output for 300 s";
      ::kill(pid, SIGKILL);
      break;
    }
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EIO: every descriptor of the terminal's other side is closed
    r.bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(master);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The lines a terminal shows for `bytes`: "\r\033[K" clears the line, "\r" returns to column 0
// (what follows overwrites), "\n" ends the line. The last element is the line the cursor is on.
std::vector<std::string> screen_lines(const std::string& bytes) {
  std::vector<std::string> lines;
  std::string line;
  size_t col = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes.compare(i, 4, "\r\033[K") == 0) {
      line.clear();
      col = 0;
      i += 3;
    } else if (bytes[i] == '\r') {
      col = 0;
    } else if (bytes[i] == '\n') {
      lines.push_back(line);
      line.clear();
      col = 0;
    } else {
      if (col < line.size())
        line[col] = bytes[i];
      else
        line += bytes[i];
      ++col;
    }
  }
  lines.push_back(line);
  return lines;
}

TEST(CliTerminal, LogLinesNeverShareALineWithTheProgressBar) {
  testing::TempDir dir;
  const std::string cfg = write_demo_config(dir, "demo");
  const PtyResult r = run_in_pty({"run", "--gpus", "cpu:1", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.bytes;
  // The bar is drawn: the scheduler's first status update draws it, whatever the timing.
  const std::regex bar(R"(\[[=> ]{24}\] \d+/\d+ batches)");
  EXPECT_TRUE(std::regex_search(r.bytes, bar)) << r.bytes;
  // Before the batches, the step the run is in.
  EXPECT_THAT(r.bytes, HasSubstr("tokenizing "));
  const std::vector<std::string> lines = screen_lines(r.bytes);
  for (const std::string& line : lines) {
    // A status line is always erased, never left among the log lines.
    EXPECT_FALSE(std::regex_search(line, bar)) << "a bar left on the screen: " << line;
    for (const char* start : {"[sched]", "| Task", "full report:"}) {
      const size_t at = line.find(start);
      EXPECT_TRUE(at == std::string::npos || at == 0) << "'" << start << "' mid-line: " << line;
    }
  }
  EXPECT_EQ(lines.back(), "") << "the status line is erased when the run ends";
  // The table is on the screen as on stdout.
  const std::string table = testing::scores_table_of(dir.file("demo"));
  std::string shown;
  for (const std::string& line : lines) shown += line + "\n";
  EXPECT_THAT(shown, HasSubstr(table + "\nfull report: " + dir.file("demo") + "/report.md\n"));
}

}  // namespace
}  // namespace gpueval
