#include "gpueval/run_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "test_util.h"

namespace gpueval {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// Each test writes its config into a fresh directory; paths in it resolve against that directory.
class RunConfigTest : public ::testing::Test {
 protected:
  // The canonical directory, as load_run_config resolves it (TMPDIR may be reached through a link).
  std::string dir() const { return fs::canonical(tmp_.path()).string(); }

  std::string write(const std::string& text, const std::string& name = "run.yaml") {
    const std::string path = tmp_.file(name);
    fs::create_directories(fs::path(path).parent_path());
    testing::write_text(path, text);
    return path;
  }

  RunConfig load(const std::string& text) { return load_run_config(write(text)); }

  // The message of the Error that loading `text` throws; fails the test if it loads.
  std::string error_of(const std::string& text) {
    const std::string path = write(text);
    try {
      load_run_config(path);
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "not one line: " << e.what();
      return e.what();
    }
    ADD_FAILURE() << "expected an error for:\n" << text;
    return "";
  }

  std::string overrides_error(const ConfigOverrides& overrides) {
    RunConfig config = load("model: m\ntasks: [t]\n");
    const RunConfig before = config;
    try {
      apply_overrides(config, overrides);
    } catch (const Error& e) {
      EXPECT_EQ(config.to_json(), before.to_json()) << "a failed override changed the config";
      return e.what();
    }
    ADD_FAILURE() << "expected an error";
    return "";
  }

  // "<dir>/run.yaml:<line>: " — how every error about a value in the file starts.
  std::string at(int line) const { return tmp_.file("run.yaml") + ":" + std::to_string(line) + ": "; }

  testing::TempDir tmp_;
};

TEST_F(RunConfigTest, FullConfigRoundTripsToJson) {
  const RunConfig c = load(R"(# every key
model: [ckpt/a, /abs/b]
tasks:
  - demo_choice
  - tasks/extra.yaml
batch_size: 16
batch_tokens: 8192
dtype: bfloat16
load: broadcast
seed: 18446744073709551615
fewshot_seed: 7
output: results/run1
limit: 50
num_fewshot: 5
max_length: 2048
add_bos: "false"
prefix_reuse: off
group_continuations: false
gpus: 0-3
cpu_threads: 2
max_attempts: 4
heartbeat_timeout_s: 2.5
max_worker_restarts: 0
max_memory: 512MiB
calibration_cache: cache/cal.sqlite
history: hist/history.sqlite
fail_on_regression: 1.5
)");
  const nlohmann::json expected = {
      {"source", tmp_.file("run.yaml")},
      {"models", {dir() + "/ckpt/a", "/abs/b"}},
      {"tasks", {"demo_choice", dir() + "/tasks/extra.yaml"}},
      {"batch_size", "16"},
      {"batch_tokens", 8192},
      {"dtype", "bfloat16"},
      {"load", "broadcast"},
      {"seed", 18446744073709551615ull},
      {"fewshot_seed", 7},
      {"output", dir() + "/results/run1"},
      {"limit", 50},
      {"num_fewshot", 5},
      {"max_length", 2048},
      {"add_bos", "false"},
      {"prefix_reuse", false},
      {"group_continuations", false},
      {"data", nlohmann::json::object()},
      {"gpus", "0-3"},
      {"cpu_threads", 2},
      {"max_attempts", 4},
      {"heartbeat_timeout_s", 2.5},
      {"max_worker_restarts", 0},
      {"max_memory", "512MiB"},
      {"calibration_cache", dir() + "/cache/cal.sqlite"},
      {"history", dir() + "/hist/history.sqlite"},
      {"fail_on_regression", 1.5},
  };
  EXPECT_EQ(c.to_json(), expected) << c.to_json().dump(2);
  EXPECT_EQ(c.seed, 18446744073709551615ull);
  EXPECT_EQ(c.to_json()["seed"].get<uint64_t>(), 18446744073709551615ull);
}

TEST_F(RunConfigTest, AbsentKeysTakeTheirDefaults) {
  const RunConfig c = load("model: m\ntasks: [demo_choice]\n");
  EXPECT_EQ(c.models, std::vector<std::string>{dir() + "/m"});
  EXPECT_EQ(c.tasks, std::vector<std::string>{"demo_choice"});
  EXPECT_EQ(c.batch_size, "auto");
  EXPECT_EQ(c.batch_tokens, 0);
  EXPECT_EQ(c.dtype, "auto");
  EXPECT_EQ(c.load, "mmap");
  EXPECT_EQ(c.seed, 1234u);
  EXPECT_EQ(c.fewshot_seed, 1234u);
  EXPECT_EQ(c.output, "out");  // a default is not in the file, so it stays relative to the working directory
  EXPECT_FALSE(c.limit);
  EXPECT_FALSE(c.num_fewshot);
  EXPECT_FALSE(c.max_length);
  EXPECT_EQ(c.gpus, "");
  EXPECT_EQ(c.max_attempts, 3);
  EXPECT_EQ(c.heartbeat_timeout_s, 30.0);
  EXPECT_EQ(c.max_worker_restarts, 10);
  EXPECT_EQ(c.cpu_threads, 1);
  EXPECT_EQ(c.add_bos, "auto");
  const nlohmann::json j = c.to_json();
  EXPECT_TRUE(j["limit"].is_null());
  EXPECT_TRUE(j["num_fewshot"].is_null());
  EXPECT_TRUE(j["max_length"].is_null());
}

TEST_F(RunConfigTest, NullOptionalsAreUnset) {
  const RunConfig c = load("model: m\ntasks: [t]\nlimit: null\nnum_fewshot: ~\nmax_length:\ngpus:\n");
  EXPECT_FALSE(c.limit);
  EXPECT_FALSE(c.num_fewshot);
  EXPECT_FALSE(c.max_length);
  EXPECT_EQ(c.gpus, "");
}

TEST_F(RunConfigTest, ModelIsOnePathOrAList) {
  EXPECT_EQ(load("model: one\ntasks: [t]\n").models, std::vector<std::string>{dir() + "/one"});
  EXPECT_EQ(load("model: [a, b, c]\ntasks: [t]\n").models,
            (std::vector<std::string>{dir() + "/a", dir() + "/b", dir() + "/c"}));
  EXPECT_EQ(load("model:\n  - a\n  - b\ntasks: [t]\n").models, (std::vector<std::string>{dir() + "/a", dir() + "/b"}));
  EXPECT_EQ(load("model: [only]\ntasks: t\n").tasks, std::vector<std::string>{"t"});
}

TEST_F(RunConfigTest, RelativePathsResolveAgainstTheFilesDirectory) {
  const std::string path = write(R"(model: ../models/stories260K/
tasks: [demo_choice, my_tasks/x.yaml, local.yaml, other.yml, ./named, /abs/task.yaml]
output: ../out
)",
                                 "configs/run.yaml");
  const RunConfig c = load_run_config(path);
  EXPECT_EQ(c.source, path);
  EXPECT_EQ(c.models, std::vector<std::string>{dir() + "/models/stories260K"});
  EXPECT_EQ(c.tasks,
            (std::vector<std::string>{"demo_choice", dir() + "/configs/my_tasks/x.yaml", dir() + "/configs/local.yaml",
                                      dir() + "/configs/other.yml", dir() + "/configs/named", "/abs/task.yaml"}));
  EXPECT_EQ(c.output, dir() + "/out");
}

TEST_F(RunConfigTest, ResolutionDoesNotDependOnTheWorkingDirectory) {
  const std::string path = write("model: m\ntasks: [t]\n", "sub/run.yaml");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir() + "/sub");
  RunConfig relative;
  try {
    relative = load_run_config("run.yaml");
  } catch (...) {
    fs::current_path(cwd);
    throw;
  }
  fs::current_path(cwd);
  EXPECT_EQ(relative.models, std::vector<std::string>{dir() + "/sub/m"});
  EXPECT_EQ(relative.source, "run.yaml");
  EXPECT_EQ(load_run_config(path).models, relative.models);
}

TEST_F(RunConfigTest, ShippedExampleLoadsAndDocumentsEveryKey) {
  const std::string example = testing::source_dir() + "/configs/example.yaml";
  const RunConfig c = load_run_config(example);
  const std::string root = fs::canonical(testing::source_dir()).string();
  EXPECT_EQ(c.models, std::vector<std::string>{root + "/models/stories260K"});
  EXPECT_EQ(c.tasks, (std::vector<std::string>{"demo_choice", "demo_perplexity"}));
  EXPECT_EQ(c.output, root + "/out");
  EXPECT_TRUE(fs::is_directory(c.models[0])) << c.models[0];
  // Apart from output, the example shows the defaults.
  RunConfig defaults = load("model: m\ntasks: [t]\n");
  nlohmann::json got = c.to_json(), want = defaults.to_json();
  for (const char* key : {"source", "models", "tasks", "output"}) {
    got.erase(key);
    want.erase(key);
  }
  EXPECT_EQ(got, want);

  std::ifstream in(example);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json all_keys = c.to_json();
  for (const auto& [key, value] : all_keys.items()) {
    if (key == "source") continue;
    const std::string name = key == "models" ? "model" : key;
    const bool documented = text.str().find("\n" + name + ":") != std::string::npos ||
                            text.str().find("\n# " + name + ":") != std::string::npos;
    EXPECT_TRUE(documented) << "configs/example.yaml does not show key '" << name << "'";
  }
}

TEST_F(RunConfigTest, UnknownKeyNamesLineAndSuggests) {
  EXPECT_THAT(error_of("model: m\ntasks: [t]\n\n# comment\nseed: 1\n\nbatchsize: 8\n"),
              HasSubstr(at(7) + "unknown key 'batchsize' (did you mean 'batch_size'?)"));
  EXPECT_THAT(error_of("models: m\ntasks: [t]\n"), HasSubstr(at(1) + "unknown key 'models' (did you mean 'model'?)"));
  EXPECT_THAT(error_of("model: m\ntasks: [t]\nfewshot: 5\n"),
              HasSubstr(at(3) + "unknown key 'fewshot' (did you mean 'num_fewshot'?)"));
  EXPECT_THAT(error_of("model: m\ntasks: [t]\noutput_dir: o\n"), HasSubstr("(did you mean 'output'?)"));
  EXPECT_THAT(error_of("model: m\ntasks: [t]\ndtpye: float32\n"), HasSubstr("(did you mean 'dtype'?)"));
  EXPECT_THAT(error_of("model: m\ntasks: [t]\nHeartbeat-Timeout-S: 5\n"),
              HasSubstr("(did you mean 'heartbeat_timeout_s'?)"));
  const std::string far = error_of("model: m\ntasks: [t]\nzzz: 1\n");
  EXPECT_THAT(far, AllOf(HasSubstr(at(3) + "unknown key 'zzz'"), HasSubstr("known keys: model, tasks"),
                         Not(HasSubstr("did you mean"))));
}

TEST_F(RunConfigTest, StructuralErrors) {
  EXPECT_THAT(error_of(""), AllOf(HasSubstr(tmp_.file("run.yaml") + ": "), HasSubstr("empty")));
  EXPECT_THAT(error_of("# nothing but a comment\n"), HasSubstr("empty"));
  EXPECT_THAT(error_of("- model\n- tasks\n"), HasSubstr(at(1) + "expected a mapping of keys"));
  EXPECT_THAT(error_of("tasks: [t]\n"),
              AllOf(HasSubstr(tmp_.file("run.yaml") + ": "), HasSubstr("missing required key 'model'")));
  EXPECT_THAT(error_of("model: m\n"), HasSubstr("missing required key 'tasks'"));
  EXPECT_THAT(error_of("model: m\ntasks: [t]\nseed: 1\nseed: 2\n"),
              HasSubstr(at(4) + "key 'seed' appears twice (first on line 3)"));
  EXPECT_THAT(error_of("model: m\ntasks: [t]\n---\nseed: 1\n"), HasSubstr(at(3) + "a second YAML document"));
  // A leading document marker, comments and "--- value" on the first document's own marker are one document.
  EXPECT_THAT(error_of("# c\n---\nmodel: m\ntasks: [t]\n--- # more\n"), HasSubstr(at(5) + "a second YAML document"));
  EXPECT_THAT(error_of("model: m\ntasks: [t]\n[a]: 1\n"), HasSubstr(at(3) + "keys must be plain names"));
}

TEST_F(RunConfigTest, YamlSyntaxErrorIsOneLineWithItsLine) {
  EXPECT_THAT(error_of("model: m\ntasks: [a, b\nseed: 1\n"),
              AllOf(HasSubstr(tmp_.file("run.yaml") + ":"), HasSubstr("invalid YAML"),
                    HasSubstr("end of sequence flow not found")));
  EXPECT_THAT(error_of("model: m\ntasks: [t]\nseed: a: b\n"),
              AllOf(HasSubstr(at(3) + "invalid YAML at column"), HasSubstr("illegal map value")));
}

// Found by fuzzing (fuzz_run_config): yaml-cpp keeps invalid UTF-8 in strings, which the run's
// JSON writers (plan.json, the journal's config) then refused with a json type_error that named no file.
TEST_F(RunConfigTest, InvalidUtf8IsRefusedWithTheFileAndByte) {
  EXPECT_EQ(error_of(std::string("model: m\ntasks: [demo\x0e\0_choice]\n", 30)),
            tmp_.file("run.yaml") + ":2: character U+000E is not allowed in YAML");
  EXPECT_THAT(error_of("model: m\ntasks: [t\xff]\n"),
              AllOf(HasSubstr(tmp_.file("run.yaml") + ": not valid UTF-8 (byte 18)"), Not(HasSubstr("\n"))));
}

TEST_F(RunConfigTest, UnreadableFileNamesIt) {
  const std::string missing = tmp_.file("absent.yaml");
  try {
    load_run_config(missing);
    FAIL() << "loaded a missing file";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(missing + ": "), HasSubstr("No such file or directory")));
  }
  try {
    load_run_config(tmp_.path());
    FAIL() << "loaded a directory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(tmp_.path() + ": "), HasSubstr("not a regular file")));
  }
}

TEST_F(RunConfigTest, WrongTypesNameLineAndKey) {
  const std::string head = "model: m\ntasks: [t]\n";
  EXPECT_THAT(error_of(head + "seed: abc\n"),
              HasSubstr(at(3) + "key 'seed' must be a non-negative integer below 2^64, got 'abc'"));
  EXPECT_THAT(error_of(head + "limit: \"10\"\n"),
              HasSubstr(at(3) + "key 'limit' must be a positive integer, got the quoted string \"10\""));
  EXPECT_THAT(error_of(head + "limit: 2.5\n"), HasSubstr(at(3) + "key 'limit' must be a positive integer, got '2.5'"));
  EXPECT_THAT(error_of(head + "batch_tokens: [1]\n"),
              HasSubstr(at(3) + "key 'batch_tokens' must be a non-negative integer, got a list"));
  EXPECT_THAT(error_of(head + "dtype: {a: 1}\n"),
              HasSubstr(at(3) + "key 'dtype' must be one of auto, float32, bfloat16, float16, got a mapping"));
  EXPECT_THAT(error_of(head + "max_attempts: true\n"),
              HasSubstr(at(3) + "key 'max_attempts' must be a positive integer, got 'true'"));
  EXPECT_THAT(error_of(head + "heartbeat_timeout_s: soon\n"),
              HasSubstr(at(3) + "key 'heartbeat_timeout_s' must be a positive number of seconds, got 'soon'"));
  EXPECT_THAT(error_of(head + "output: [a, b]\n"),
              HasSubstr(at(3) + "key 'output' must be a directory path, got a list"));
  EXPECT_THAT(error_of(head + "seed:\n"),
              HasSubstr(at(3) + "key 'seed' must be a non-negative integer below 2^64, got nothing"));
  EXPECT_THAT(error_of("model: {path: m}\ntasks: [t]\n"),
              HasSubstr(at(1) + "key 'model' must be a checkpoint path or a list of them, got a mapping"));
  EXPECT_THAT(error_of("model: m\ntasks:\n  - a\n  - [b]\n"),
              HasSubstr(at(4) + "key 'tasks': each entry must be a task name or path, got a list"));
  EXPECT_THAT(error_of("model: m\ntasks:\n"), HasSubstr(at(2) + "key 'tasks' must be a list of task names"));
}

TEST_F(RunConfigTest, OutOfRangeValuesNameLineAndKey) {
  const std::string head = "model: m\ntasks: [t]\n";
  EXPECT_THAT(error_of(head + "limit: 0\n"), HasSubstr(at(3) + "key 'limit' must be a positive integer, got 0"));
  EXPECT_THAT(error_of(head + "max_length: -5\n"),
              HasSubstr(at(3) + "key 'max_length' must be a positive integer, got -5"));
  EXPECT_THAT(error_of(head + "num_fewshot: -1\n"),
              HasSubstr(at(3) + "key 'num_fewshot' must be a non-negative integer, got -1"));
  EXPECT_THAT(error_of(head + "batch_tokens: -1\n"),
              HasSubstr(at(3) + "key 'batch_tokens' must be a non-negative integer, got -1"));
  EXPECT_THAT(error_of(head + "max_attempts: 0\n"), HasSubstr(at(3) + "key 'max_attempts' must be a positive integer"));
  EXPECT_THAT(error_of(head + "max_worker_restarts: -1\n"), HasSubstr(at(3) + "key 'max_worker_restarts'"));
  EXPECT_THAT(error_of(head + "heartbeat_timeout_s: 0\n"),
              HasSubstr(at(3) + "key 'heartbeat_timeout_s' must be a positive"));
  EXPECT_THAT(error_of(head + "heartbeat_timeout_s: .inf\n"), HasSubstr(at(3) + "key 'heartbeat_timeout_s'"));
  EXPECT_THAT(error_of(head + "seed: -1\n"), HasSubstr(at(3) + "key 'seed' must be a non-negative integer"));
  EXPECT_THAT(error_of(head + "seed: 18446744073709551616\n"), HasSubstr(at(3) + "key 'seed'"));
  EXPECT_THAT(error_of(head + "limit: 99999999999999999999\n"), HasSubstr(at(3) + "key 'limit' is out of range"));
  EXPECT_THAT(error_of(head + "batch_size: 0\n"),
              HasSubstr(at(3) + "key 'batch_size' must be 'auto' or a positive integer, got '0'"));
  EXPECT_THAT(error_of(head + "batch_size: -4\n"), HasSubstr(at(3) + "key 'batch_size' must be 'auto'"));
  EXPECT_THAT(error_of(head + "batch_size: big\n"), HasSubstr(at(3) + "key 'batch_size' must be 'auto'"));
  EXPECT_THAT(error_of(head + "dtype: fp16\n"),
              HasSubstr(at(3) + "key 'dtype' must be one of auto, float32, bfloat16, float16, got 'fp16'"));
  EXPECT_THAT(error_of(head + "load: nccl\n"), HasSubstr(at(3) + "key 'load' must be mmap or broadcast, got 'nccl'"));
  EXPECT_THAT(error_of(head + "load: [mmap]\n"), HasSubstr(at(3) + "key 'load' must be mmap or broadcast, got a"));
  EXPECT_THAT(error_of(head + "output: ''\n"), HasSubstr(at(3) + "key 'output' must not be empty"));
  EXPECT_THAT(error_of(head + "gpus: 3-1\n"), HasSubstr(at(3) + "key 'gpus': range end is below its start"));
  EXPECT_THAT(error_of(head + "gpus: x\n"), HasSubstr(at(3) + "key 'gpus': 'x' is not a GPU index or range"));
  EXPECT_THAT(error_of(head + "gpus: ''\n"), HasSubstr(at(3) + "key 'gpus': is empty"));
}

TEST_F(RunConfigTest, EmptyOrRepeatedListsAreErrors) {
  EXPECT_THAT(error_of("model: m\ntasks: []\n"), HasSubstr(at(2) + "key 'tasks' must list at least one task"));
  EXPECT_THAT(error_of("model: []\ntasks: [t]\n"), HasSubstr(at(1) + "key 'model' must list at least one model"));
  EXPECT_THAT(error_of("model: ''\ntasks: [t]\n"), HasSubstr(at(1) + "key 'model' has an empty model entry"));
  EXPECT_THAT(error_of("model: m\ntasks:\n  - a\n  - b\n  - a\n"), HasSubstr(at(5) + "key 'tasks' lists 'a' twice"));
  EXPECT_THAT(error_of("model: [x, ./x]\ntasks: [t]\n"), HasSubstr(at(1) + "key 'model' lists './x' twice"));
}

TEST_F(RunConfigTest, QuotedAndPlainStringsAreEqual) {
  const RunConfig c = load("model: \"m\"\ntasks: ['t']\nbatch_size: '8'\ndtype: \"float16\"\ngpus: \"0,0\"\n");
  EXPECT_EQ(c.batch_size, "8");
  EXPECT_EQ(c.dtype, "float16");
  EXPECT_EQ(c.gpus, "0,0");
  EXPECT_EQ(c.tasks, std::vector<std::string>{"t"});
}

TEST_F(RunConfigTest, OverridesWin) {
  RunConfig c = load("model: [a, b]\ntasks: [t]\nbatch_size: 4\nseed: 1\nlimit: 3\n");
  ConfigOverrides o;
  o.model = std::vector<std::string>{"cli/model"};
  o.output = "cli_out";
  o.batch_size = "auto";
  o.gpus = "cpu:2";
  o.limit = 7;
  o.num_fewshot = 0;
  o.seed = 99;
  o.tasks = std::vector<std::string>{"x", "y.yaml"};
  apply_overrides(c, o);
  EXPECT_EQ(c.models, std::vector<std::string>{"cli/model"});  // a flag's path is the working directory's
  EXPECT_EQ(c.output, "cli_out");
  EXPECT_EQ(c.batch_size, "auto");
  EXPECT_EQ(c.gpus, "cpu:2");
  EXPECT_EQ(c.limit, 7);
  EXPECT_EQ(c.num_fewshot, 0);
  EXPECT_EQ(c.seed, 99u);
  EXPECT_EQ(c.tasks, (std::vector<std::string>{"x", "y.yaml"}));
}

TEST_F(RunConfigTest, UnsetOverridesKeepTheFile) {
  RunConfig c = load("model: m\ntasks: [t]\nbatch_size: 4\nseed: 5\nlimit: 3\n");
  const nlohmann::json before = c.to_json();
  apply_overrides(c, ConfigOverrides{});
  EXPECT_EQ(c.to_json(), before);
}

TEST_F(RunConfigTest, OverridesAreValidatedAndNameTheFlag) {
  ConfigOverrides o;
  o.batch_size = "0";
  EXPECT_THAT(overrides_error(o), HasSubstr("--batch-size: must be 'auto' or a positive integer, got '0'"));
  o = {};
  o.batch_size = "many";
  EXPECT_THAT(overrides_error(o), HasSubstr("--batch-size: must be 'auto'"));
  o = {};
  o.limit = 0;
  EXPECT_THAT(overrides_error(o), HasSubstr("--limit: must be a positive integer, got 0"));
  o = {};
  o.num_fewshot = -2;
  EXPECT_THAT(overrides_error(o), HasSubstr("--num-fewshot: must be a non-negative integer, got -2"));
  o = {};
  o.gpus = "2-1";
  EXPECT_THAT(overrides_error(o), HasSubstr("--gpus 2-1: range end is below its start"));
  o = {};
  o.gpus = "";
  EXPECT_THAT(overrides_error(o), HasSubstr("--gpus ''"));
  o = {};
  o.model = std::vector<std::string>{""};
  EXPECT_THAT(overrides_error(o), HasSubstr("--model: must not be empty"));
  o = {};
  o.output = "";
  EXPECT_THAT(overrides_error(o), HasSubstr("--output: must not be empty"));
  o = {};
  o.tasks = std::vector<std::string>{};
  EXPECT_THAT(overrides_error(o), HasSubstr("--tasks: must list at least one task"));
  o = {};
  o.tasks = std::vector<std::string>{"a", ""};
  EXPECT_THAT(overrides_error(o), HasSubstr("--tasks: has an empty task entry"));
  o = {};
  o.tasks = std::vector<std::string>{"a", "a"};
  EXPECT_THAT(overrides_error(o), HasSubstr("--tasks: lists 'a' twice"));
  // A bad flag after good ones leaves the config as it was (checked in overrides_error).
  o = {};
  o.seed = 7;
  o.model = std::vector<std::string>{"x"};
  o.limit = -1;
  EXPECT_THAT(overrides_error(o), HasSubstr("--limit"));
}

TEST_F(RunConfigTest, DataRootsComeFromTheFileAndTheFlag) {
  RunConfig c = load("model: m\ntasks: [t]\ndata:\n  mmlu: ../data/mmlu\n  other: /abs/o\n");
  EXPECT_EQ(c.data, (std::map<std::string, std::string>{{"mmlu", fs::path(dir()).parent_path().string() + "/data/mmlu"},
                                                        {"other", "/abs/o"}}));
  ConfigOverrides o;
  o.data = {"mmlu=cli/mmlu"};
  apply_overrides(c, o);
  EXPECT_EQ(c.data.at("mmlu"), "cli/mmlu");
  EXPECT_EQ(c.data.at("other"), "/abs/o");
  o.data = {"mmlu"};
  EXPECT_THAT(overrides_error(o), HasSubstr("--data mmlu: must be NAME=PATH"));
  EXPECT_THAT(error_of("model: m\ntasks: [t]\ndata: [a]\n"), HasSubstr(at(3) + "key 'data' must be a mapping"));
}

}  // namespace
}  // namespace gpueval

namespace gpueval {
namespace {

TEST_F(RunConfigTest, AddBosIsAutoTrueOrFalse) {
  EXPECT_EQ(load("model: m\ntasks: [t]\nadd_bos: true\n").add_bos, "true");
  EXPECT_EQ(load("model: m\ntasks: [t]\nadd_bos: false\n").add_bos, "false");
  EXPECT_EQ(load("model: m\ntasks: [t]\nadd_bos: auto\n").add_bos, "auto");
  const std::string message = error_of("model: m\ntasks: [t]\nadd_bos: maybe\n");
  EXPECT_THAT(message, AllOf(HasSubstr("run.yaml:3"), HasSubstr("add_bos"), HasSubstr("auto, true or false"),
                             HasSubstr("maybe")));

  ConfigOverrides overrides;
  overrides.add_bos = "false";
  RunConfig config = load("model: m\ntasks: [t]\nadd_bos: true\n");
  apply_overrides(config, overrides);
  EXPECT_EQ(config.add_bos, "false");
  overrides.add_bos = "yes";
  EXPECT_THAT(overrides_error(overrides), AllOf(HasSubstr("--add-bos"), HasSubstr("'yes'")));
}

// --dtype, --max-length and --cpu-threads after `run` (and `requests`) override the file's keys,
// checked as the file's are.
TEST_F(RunConfigTest, DtypeMaxLengthAndCpuThreadsFlagsOverrideTheFile) {
  RunConfig config = load("model: m\ntasks: [t]\ndtype: float32\nmax_length: 512\ncpu_threads: 2\n");
  ConfigOverrides overrides;
  overrides.dtype = "bfloat16";
  overrides.max_length = 1024;
  overrides.cpu_threads = 4;
  apply_overrides(config, overrides);
  EXPECT_EQ(config.dtype, "bfloat16");
  EXPECT_EQ(config.max_length, 1024);
  EXPECT_EQ(config.cpu_threads, 4);
  ConfigOverrides bad;
  bad.dtype = "int8";
  EXPECT_THAT(overrides_error(bad), AllOf(HasSubstr("--dtype"), HasSubstr("'int8'")));
  bad = ConfigOverrides{};
  bad.max_length = 0;
  EXPECT_THAT(overrides_error(bad), AllOf(HasSubstr("--max-length"), HasSubstr("positive integer")));
  bad = ConfigOverrides{};
  bad.cpu_threads = -1;
  EXPECT_THAT(overrides_error(bad), HasSubstr("--cpu-threads"));
}

TEST_F(RunConfigTest, PrefixReuseIsOnOrOff) {
  EXPECT_TRUE(load("model: m\ntasks: [t]\n").prefix_reuse);
  EXPECT_FALSE(load("model: m\ntasks: [t]\nprefix_reuse: false\n").prefix_reuse);
  EXPECT_TRUE(load("model: m\ntasks: [t]\nprefix_reuse: on\n").prefix_reuse);
  EXPECT_THAT(error_of("model: m\ntasks: [t]\nprefix_reuse: sometimes\n"),
              AllOf(HasSubstr("run.yaml:3"), HasSubstr("prefix_reuse"), HasSubstr("sometimes")));
  ConfigOverrides overrides;
  overrides.prefix_reuse = "off";
  RunConfig config = load("model: m\ntasks: [t]\n");
  apply_overrides(config, overrides);
  EXPECT_FALSE(config.prefix_reuse);
  overrides.prefix_reuse = "maybe";
  EXPECT_THAT(overrides_error(overrides), AllOf(HasSubstr("--prefix-reuse"), HasSubstr("'maybe'")));
}

TEST_F(RunConfigTest, GroupContinuationsIsItsOwnSwitchAndOnByDefault) {
  const RunConfig defaults = load("model: m\ntasks: [t]\n");
  EXPECT_TRUE(defaults.group_continuations);
  // Prefix reuse off leaves one context's continuations grouped, as lm-eval's HFLM groups them.
  const RunConfig no_prefix = load("model: m\ntasks: [t]\nprefix_reuse: false\n");
  EXPECT_FALSE(no_prefix.prefix_reuse);
  EXPECT_TRUE(no_prefix.group_continuations);
  const RunConfig off = load("model: m\ntasks: [t]\ngroup_continuations: off\n");
  EXPECT_TRUE(off.prefix_reuse);
  EXPECT_FALSE(off.group_continuations);
  EXPECT_FALSE(off.to_json()["group_continuations"].get<bool>());
  EXPECT_THAT(error_of("model: m\ntasks: [t]\ngroup_continuations: [1]\n"),
              AllOf(HasSubstr("run.yaml:3"), HasSubstr("group_continuations")));
  ConfigOverrides overrides;
  overrides.group_continuations = "off";
  RunConfig config = load("model: m\ntasks: [t]\n");
  apply_overrides(config, overrides);
  EXPECT_FALSE(config.group_continuations);
  EXPECT_TRUE(config.prefix_reuse);
  overrides.group_continuations = "perhaps";
  EXPECT_THAT(overrides_error(overrides), AllOf(HasSubstr("--group-continuations"), HasSubstr("'perhaps'")));
}

TEST(ResolveAddBos, AutoFollowsTheTokenizerAndTheRestForce) {
  EXPECT_TRUE(resolve_add_bos("auto", true));
  EXPECT_FALSE(resolve_add_bos("auto", false));
  EXPECT_TRUE(resolve_add_bos("true", false));
  EXPECT_FALSE(resolve_add_bos("false", true));
  EXPECT_THROW(resolve_add_bos("1", true), Error);
}

}  // namespace
}  // namespace gpueval

namespace gpueval {
namespace {

class RunConfigMemoryTest : public ::testing::Test {
 protected:
  std::string write(const std::string& text) { return tmp_.write("run.yaml", text); }
  std::string at(int line) const { return tmp_.file("run.yaml") + ":" + std::to_string(line) + ": "; }
  testing::TempDir tmp_;
};

TEST_F(RunConfigMemoryTest, MaxMemoryAndCalibrationCacheKeys) {
  const RunConfig c =
      load_run_config(write("model: m\ntasks: [t]\nmax_memory: 6GiB\ncalibration_cache: c/cal.sqlite\n"));
  EXPECT_EQ(c.max_memory, "6GiB");
  EXPECT_EQ(c.calibration_cache, std::filesystem::canonical(tmp_.path()).string() + "/c/cal.sqlite");
  EXPECT_EQ(c.to_json()["max_memory"], "6GiB");
  EXPECT_EQ(load_run_config(write("model: m\ntasks: [t]\nmax_memory: 0.5\n")).max_memory, "0.5");
  EXPECT_EQ(load_run_config(write("model: m\ntasks: [t]\n")).max_memory, "");

  const std::string bad =
      testing::error_of([&] { load_run_config(write("model: m\ntasks: [t]\nmax_memory: lots\n")); });
  EXPECT_THAT(bad, ::testing::HasSubstr(at(3) + "key 'max_memory' must be an amount such as 6GiB"));
  EXPECT_EQ(std::count(bad.begin(), bad.end(), '\n'), 0);
  EXPECT_THAT(testing::error_of([&] { load_run_config(write("model: m\ntasks: [t]\nmax_memory: 6 GB\n")); }),
              ::testing::HasSubstr(at(3) + "key 'max_memory' unknown unit ' GB'"));
  EXPECT_THAT(testing::error_of([&] { load_run_config(write("model: m\ntasks: [t]\nmax_memory: [1]\n")); }),
              ::testing::HasSubstr(at(3) + "key 'max_memory' must be an amount"));

  RunConfig o = c;
  ConfigOverrides flags;
  flags.max_memory = "2x";
  const std::string flag_error = testing::error_of([&] { apply_overrides(o, flags); });
  EXPECT_EQ(flag_error,
            "--max-memory: unknown unit 'x' in '2x' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, or a "
            "share such as 0.5)");
  EXPECT_EQ(o.max_memory, "6GiB");
  flags.max_memory = "512MiB";
  apply_overrides(o, flags);
  EXPECT_EQ(o.max_memory, "512MiB");
}

}  // namespace
}  // namespace gpueval

namespace gpueval {
namespace {

TEST(RunConfigNightly, HistoryAndFailOnRegressionKeysAndFlags) {
  testing::TempDir tmp;
  const RunConfig c = load_run_config(
      tmp.write("run.yaml", "model: runs/step-*\ntasks: [t]\nhistory: h.sqlite\nfail_on_regression: 2\n"));
  EXPECT_EQ(c.models, std::vector<std::string>{std::filesystem::canonical(tmp.path()).string() + "/runs/step-*"});
  EXPECT_EQ(c.history, std::filesystem::canonical(tmp.path()).string() + "/h.sqlite");
  ASSERT_TRUE(c.fail_on_regression);
  EXPECT_DOUBLE_EQ(*c.fail_on_regression, 2.0);
  EXPECT_FALSE(load_run_config(tmp.write("plain.yaml", "model: m\ntasks: [t]\n")).fail_on_regression);
  EXPECT_EQ(load_run_config(tmp.write("plain.yaml", "model: m\ntasks: [t]\n")).tensorboard, "");
  EXPECT_FALSE(load_run_config(tmp.write("plain.yaml", "model: m\ntasks: [t]\n")).to_json().contains("tensorboard"));
  const RunConfig with_tb = load_run_config(tmp.write("tb.yaml", "model: m\ntasks: [t]\ntensorboard: logs/tb\n"));
  EXPECT_EQ(with_tb.tensorboard, std::filesystem::canonical(tmp.path()).string() + "/logs/tb");
  EXPECT_EQ(with_tb.to_json()["tensorboard"], with_tb.tensorboard);
  EXPECT_EQ(run_config_from_json(with_tb.to_json(), "plan.json", "/").tensorboard, with_tb.tensorboard);
  EXPECT_THAT(
      testing::error_of([&] { load_run_config(tmp.write("tb.yaml", "model: m\ntasks: [t]\ntensorboard: [1]\n")); }),
      ::testing::HasSubstr("tb.yaml:3: key 'tensorboard' must be a directory path"));
  EXPECT_THAT(testing::error_of(
                  [&] { load_run_config(tmp.write("bad.yaml", "model: m\ntasks: [t]\nfail_on_regression: -1\n")); }),
              ::testing::HasSubstr("bad.yaml:3: key 'fail_on_regression' must be a number of points >= 0"));

  RunConfig o = c;
  ConfigOverrides flags;
  flags.model = std::vector<std::string>{"a", "b/step-*"};
  flags.history = "other.sqlite";
  flags.fail_on_regression = 0.5;
  flags.tensorboard = "runs/tb";
  apply_overrides(o, flags);
  EXPECT_EQ(o.tensorboard, "runs/tb");
  EXPECT_EQ(o.models, (std::vector<std::string>{"a", "b/step-*"}));
  EXPECT_EQ(o.history, "other.sqlite");
  EXPECT_DOUBLE_EQ(*o.fail_on_regression, 0.5);
  flags.fail_on_regression = -3;
  EXPECT_THAT(testing::error_of([&] { apply_overrides(o, flags); }),
              ::testing::HasSubstr("--fail-on-regression: must be a number of points >= 0"));
}

}  // namespace
}  // namespace gpueval

namespace gpueval {
namespace {

TEST_F(RunConfigTest, CodeExecutionKeysSetTheSandboxLimitsAndFlagsWin) {
  const std::string head = "model: m\ntasks: [t]\n";
  const RunConfig defaults = load(head);
  EXPECT_TRUE(defaults.code_execution.is_default());
  EXPECT_FALSE(defaults.to_json().contains("code_execution"));  // results.json of other runs unchanged
  const RunConfig c = load(head +
                           "code_execution:\n  max_sandboxes: 3\n  cpu_seconds: 1.5\n  wall_seconds: 20\n"
                           "  memory: 512MiB\n  max_subprocesses: 4\n");
  EXPECT_EQ(c.code_execution.max_sandboxes, 3);
  EXPECT_EQ(c.code_execution.cpu_seconds, 1.5);
  EXPECT_EQ(c.code_execution.wall_seconds, 20);
  EXPECT_EQ(c.code_execution.memory, int64_t{512} << 20);
  EXPECT_EQ(c.code_execution.max_subprocesses, 4);
  EXPECT_FALSE(c.code_execution.unsafe_no_sandbox);
  // It round-trips through results.json's config (and a sharded run's plan.json).
  const RunConfig back = run_config_from_json(c.to_json(), "plan.json", dir());
  EXPECT_EQ(back.code_execution.to_json(), c.code_execution.to_json());
  EXPECT_EQ(c.to_json()["code_execution"]["memory"], "512MiB");
  ConfigOverrides o;
  o.max_sandboxes = 1;
  o.unsafe_no_sandbox = true;
  RunConfig flagged = c;
  apply_overrides(flagged, o);
  EXPECT_EQ(flagged.code_execution.max_sandboxes, 1);
  EXPECT_TRUE(flagged.code_execution.unsafe_no_sandbox);
  ConfigOverrides bad;
  bad.max_sandboxes = 0;
  EXPECT_THAT(overrides_error(bad), HasSubstr("--max-sandboxes: must be at least 1, got 0"));
  EXPECT_THAT(error_of(head + "code_execution:\n  cpu_secs: 2\n"),
              HasSubstr(at(4) + "unknown key 'code_execution.cpu_secs' (known: max_sandboxes, cpu_seconds"));
  EXPECT_THAT(error_of(head + "code_execution: 3\n"), HasSubstr(at(3) + "key 'code_execution' must be a mapping"));
  EXPECT_THAT(error_of(head + "code_execution:\n  memory: lots\n"),
              HasSubstr(at(4) + "key 'code_execution.memory' must be an amount such as 2GiB"));
  EXPECT_THAT(error_of(head + "code_execution:\n  memory: 1MiB\n"), HasSubstr("code_execution.memory"));
  EXPECT_THAT(error_of(head + "code_execution:\n  cpu_seconds: 7200\n"),
              HasSubstr(at(4) + "key 'code_execution': CPU seconds must be in (0, 3600], got 7200"));
  EXPECT_THAT(error_of(head + "code_execution:\n  max_subprocesses: 0\n"),
              HasSubstr(at(4) + "key 'code_execution.max_subprocesses'"));
  EXPECT_THAT(error_of(head + "code_execution:\n  unsafe_no_sandbox: maybe\n"),
              HasSubstr(at(4) + "key 'code_execution.unsafe_no_sandbox'"));
  EXPECT_THAT(error_of(head + "extra_metrics: [pass_at_1]\n"), HasSubstr(at(3) + "key 'extra_metrics': pass_at_1"));
}

TEST_F(RunConfigTest, ExtraMetricsAreKnownMetricNames) {
  const std::string head = "model: m\ntasks: [t]\n";
  EXPECT_TRUE(load(head).extra_metrics.empty());
  EXPECT_EQ(load(head + "extra_metrics: [bpb, bpb]\n").extra_metrics, std::vector<std::string>{"bpb"});
  EXPECT_THAT(error_of(head + "extra_metrics: [bpd]\n"),
              HasSubstr(at(3) + "key 'extra_metrics': unknown metric 'bpd'"));
  EXPECT_THAT(error_of(head + "extra_metrics: bpb\n"),
              HasSubstr(at(3) + "key 'extra_metrics' must be a list of metric names (e.g. [bpb]), got 'bpb'"));
}

}  // namespace
}  // namespace gpueval
