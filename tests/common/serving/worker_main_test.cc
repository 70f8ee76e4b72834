// WorkerConfigFromFlags (common/serving/worker_main.h): the worker binaries' config
// from the default role, the --config file and the key flags, in that order.

#include "common/serving/worker_main.h"

#include <fstream>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gtest/gtest.h"

// As each worker's main.cc does: the keys whose help is the binary's own.
ABSL_FLAG(std::string, role, "", "test: role");
ABSL_FLAG(std::string, max_running, "", "test: max_running");
ABSL_FLAG(std::string, reservation_deadline, "", "test: reservation_deadline");

namespace tandem::serving {
namespace {

// Sets --name=value as the command line would.
void SetFlag(const char* name, const std::string& value) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  ASSERT_NE(flag, nullptr) << name;
  std::string error;
  ASSERT_TRUE(flag->ParseFrom(value, &error)) << error;
}

std::string WriteYaml(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

class WorkerConfigFromFlagsTest : public ::testing::Test {
 private:
  absl::FlagSaver saver_;  // every test starts from unset flags
};

TEST_F(WorkerConfigFromFlagsTest, DefaultRoleAndDefaults) {
  SetFlag("model", "m.gguf");
  const std::optional<WorkerConfig> c = WorkerConfigFromFlags(WorkerRole::kPrefill);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->role, WorkerRole::kPrefill);
  EXPECT_EQ(c->model, "m.gguf");
  const WorkerConfig defaults;
  EXPECT_EQ(c->listen, defaults.listen);
  EXPECT_EQ(c->max_running, defaults.max_running);
  EXPECT_EQ(c->drain_grace, defaults.drain_grace);
}

TEST_F(WorkerConfigFromFlagsTest, FlagsOverrideTheFileWhichOverridesDefaults) {
  SetFlag("config", WriteYaml("worker_main_test_override.yaml",
                              "model: file.gguf\n"
                              "chunk_size: 64\n"
                              "max_queued: 7\n"
                              "role: colocated\n"));
  SetFlag("chunk_size", "128");
  SetFlag("max_running", "3");
  SetFlag("drain_grace", "2s");
  const std::optional<WorkerConfig> c = WorkerConfigFromFlags(WorkerRole::kDecode);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->model, "file.gguf");
  EXPECT_EQ(c->role, WorkerRole::kColocated);
  EXPECT_EQ(c->chunk_size, 128);
  EXPECT_EQ(c->max_queued, 7);
  EXPECT_EQ(c->max_running, 3);
  EXPECT_EQ(c->drain_grace, absl::Seconds(2));
}

TEST_F(WorkerConfigFromFlagsTest, RoleFlagOverridesTheDefaultRole) {
  SetFlag("model", "m.gguf");
  SetFlag("role", "colocated");
  const std::optional<WorkerConfig> c = WorkerConfigFromFlags(WorkerRole::kDecode);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->role, WorkerRole::kColocated);
}

TEST_F(WorkerConfigFromFlagsTest, BadFlagValueFails) {
  SetFlag("model", "m.gguf");
  SetFlag("block_size", "sixteen");
  EXPECT_FALSE(WorkerConfigFromFlags(WorkerRole::kDecode).has_value());
}

TEST_F(WorkerConfigFromFlagsTest, MissingOrBadConfigFileFails) {
  SetFlag("model", "m.gguf");
  SetFlag("config", ::testing::TempDir() + "/worker_main_test_no_such_file.yaml");
  EXPECT_FALSE(WorkerConfigFromFlags(WorkerRole::kDecode).has_value());
  SetFlag("config", WriteYaml("worker_main_test_bad.yaml", "no_such_key: 1\n"));
  EXPECT_FALSE(WorkerConfigFromFlags(WorkerRole::kDecode).has_value());
}

TEST_F(WorkerConfigFromFlagsTest, InvalidConfigFails) {
  // No model: Validate() refuses.
  EXPECT_FALSE(WorkerConfigFromFlags(WorkerRole::kDecode).has_value());
}

}  // namespace
}  // namespace tandem::serving
