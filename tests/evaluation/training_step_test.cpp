// The training step of a checkpoint (evaluation/training_step.h): from trainer_state.json's
// global_step, else from the names training frameworks give their checkpoint folders.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "evaluation/training_step.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;

TEST(TrainingStep, NamesTrainingFrameworksGiveTheirCheckpoints) {
  const std::vector<std::pair<std::string, std::optional<int64_t>>> cases = {
      {"step-1000", 1000},
      {"step_1000", 1000},
      {"step1000", 1000},
      {"global_step1000", 1000},
      {"iter_0001000", 1000},
      {"checkpoint-500", 500},
      {"Step-20", 20},
      {"run7-step-1000", 1000},
      {"exp.step_3", 3},
      {"step-0", 0},
      {"model", std::nullopt},
      {"step-1000-hf", std::nullopt},
      {"laststep5", std::nullopt},
      {"v2", std::nullopt},
      {"1000", std::nullopt},
      {"step-", std::nullopt},
      {"step-1234567890123456789", std::nullopt}};
  for (const auto& [name, step] : cases) EXPECT_EQ(step_in_name(name), step) << name;
}

TEST(TrainingStep, TrainerStateWinsOverTheName) {
  testing::TempDir dir;
  const std::string ckpt = dir.path() + "/checkpoint-500";
  std::filesystem::create_directories(ckpt);
  testing::write_text(ckpt + "/config.json", "{}");
  EXPECT_EQ(training_step(ckpt), 500);
  EXPECT_EQ(training_step(ckpt + "/"), 500);
  testing::write_text(ckpt + "/trainer_state.json", R"({"epoch": 1.0, "global_step": 512, "log_history": []})");
  EXPECT_EQ(training_step(ckpt), 512);
  // No global_step (or null): the name decides.
  testing::write_text(ckpt + "/trainer_state.json", R"({"epoch": 1.0, "global_step": null})");
  EXPECT_EQ(training_step(ckpt), 500);
  const std::string plain = dir.path() + "/final";
  std::filesystem::create_directories(plain);
  testing::write_text(plain + "/config.json", "{}");
  EXPECT_EQ(training_step(plain), std::nullopt);
}

TEST(TrainingStep, ABadTrainerStateIsOneLineNamingIt) {
  testing::TempDir dir;
  const std::string ckpt = dir.path() + "/checkpoint-500";
  std::filesystem::create_directories(ckpt);
  for (const std::string& text : {std::string("{not json"), std::string(R"({"global_step": -3})"),
                                  std::string(R"({"global_step": "500"})"), std::string(R"({"global_step": 1.5})")}) {
    testing::write_text(ckpt + "/trainer_state.json", text);
    const std::string e = testing::error_of([&] { training_step(ckpt); });
    EXPECT_THAT(e, HasSubstr(ckpt + "/trainer_state.json")) << text;
    EXPECT_EQ(e.find('\n'), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace gpueval
