// ParseFlags (common/base/flags.h): every binary takes --flag-name and
// --flag_name alike, and only flag names are rewritten, never values.

#include "common/base/flags.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, prompt, "", "test: prompt text");
ABSL_FLAG(std::string, prompt_ids, "", "test: comma-separated token ids");
ABSL_FLAG(std::vector<std::string>, stop, {}, "test: stop strings");
ABSL_FLAG(int32_t, n, 64, "test: tokens");
ABSL_FLAG(int32_t, kv_heads, 4, "test: key/value heads");
ABSL_FLAG(bool, ignore_eos, false, "test: keep going past EOS");

namespace tandem::base {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A writable argv, as main() gets it.
class Argv {
 public:
  Argv(std::initializer_list<const char*> args) {
    for (const char* a : args) {
      storage_.emplace_back(a);
    }
    for (std::string& s : storage_) {
      argv_.push_back(s.data());
    }
  }
  int argc() const { return static_cast<int>(argv_.size()); }
  char** argv() { return argv_.data(); }
  std::vector<std::string> Strings() const { return {argv_.begin(), argv_.end()}; }

 private:
  std::vector<std::string> storage_;
  std::vector<char*> argv_;
};

std::vector<std::string> Strings(const std::vector<char*>& args) {
  return {args.begin(), args.end()};
}

class ParseFlagsTest : public ::testing::Test {
 private:
  absl::FlagSaver saver_;  // every test starts from the defaults
};

TEST_F(ParseFlagsTest, DashedAndUnderscoredNamesBothParse) {
  Argv a{"prog", "--prompt-ids=1,2", "--kv_heads", "2", "-n", "60", "--ignore-eos"};
  EXPECT_THAT(Strings(ParseFlags(a.argc(), a.argv(), "usage")), ElementsAre("prog"));
  EXPECT_EQ(absl::GetFlag(FLAGS_prompt_ids), "1,2");
  EXPECT_EQ(absl::GetFlag(FLAGS_kv_heads), 2);
  EXPECT_EQ(absl::GetFlag(FLAGS_n), 60);
  EXPECT_TRUE(absl::GetFlag(FLAGS_ignore_eos));

  Argv b{"prog", "--prompt_ids=3", "--kv-heads", "8", "-ignore_eos=false"};
  ParseFlags(b.argc(), b.argv(), "usage");
  EXPECT_EQ(absl::GetFlag(FLAGS_prompt_ids), "3");
  EXPECT_EQ(absl::GetFlag(FLAGS_kv_heads), 8);
  EXPECT_FALSE(absl::GetFlag(FLAGS_ignore_eos));
}

TEST_F(ParseFlagsTest, ValuesWithDashesAreUntouched) {
  Argv a{"prog", "--stop=a-b,c-d", "--prompt", "-x-y", "--prompt-ids", "--k-v"};
  NormalizeFlagNames(a.argc(), a.argv());
  EXPECT_THAT(a.Strings(),
              ElementsAre("prog", "--stop=a-b,c-d", "--prompt", "-x-y", "--prompt_ids", "--k-v"));

  Argv b{"prog", "--stop=a-b,c-d", "--prompt", "-x-y", "--n=-1"};
  ParseFlags(b.argc(), b.argv(), "usage");
  EXPECT_THAT(absl::GetFlag(FLAGS_stop), ElementsAre("a-b", "c-d"));
  EXPECT_EQ(absl::GetFlag(FLAGS_prompt), "-x-y");
  EXPECT_EQ(absl::GetFlag(FLAGS_n), -1);
}

TEST_F(ParseFlagsTest, BoolFlagsTakeNoNextArgument) {
  Argv a{"prog", "--ignore-eos", "--kv-heads=3"};
  ParseFlags(a.argc(), a.argv(), "usage");
  EXPECT_TRUE(absl::GetFlag(FLAGS_ignore_eos));
  EXPECT_EQ(absl::GetFlag(FLAGS_kv_heads), 3);
}

TEST_F(ParseFlagsTest, PositionalArgumentsAndEverythingAfterDoubleDashAreKept) {
  Argv a{"prog", "up", "deploy/local-x.yaml", "--kv-heads=5", "-", "--", "--not-a-flag", "-x-y"};
  EXPECT_THAT(Strings(ParseFlags(a.argc(), a.argv(), "usage")),
              ElementsAre("prog", "up", "deploy/local-x.yaml", "-", "--not-a-flag", "-x-y"));
  EXPECT_EQ(absl::GetFlag(FLAGS_kv_heads), 5);
}

TEST_F(ParseFlagsTest, UnknownFlagsStillFail) {
  Argv a{"prog", "--no-such-flag=1"};
  EXPECT_EXIT(ParseFlags(a.argc(), a.argv(), "usage"), ::testing::ExitedWithCode(1),
              "Unknown command line flag 'no_such_flag'");
  Argv b{"prog", "--kv-heads=many"};
  EXPECT_EXIT(ParseFlags(b.argc(), b.argv(), "usage"), ::testing::ExitedWithCode(1), "kv_heads");
}

TEST_F(ParseFlagsTest, HelpExitsZero) {
  for (const char* help : {"--help", "-h", "-help", "--helpfull"}) {
    Argv a{"prog", "--kv-heads=5", help};
    EXPECT_EXIT(ParseFlags(a.argc(), a.argv(), "usage"), ::testing::ExitedWithCode(0), "") << help;
  }
}

TEST(FlagsHelpTest, DashedFlagName) {
  EXPECT_EQ(DashedFlagName("prompt_ids"), "prompt-ids");
  EXPECT_EQ(DashedFlagName("n"), "n");
}

TEST(FlagsHelpTest, ListsTheProgramsOwnFlagsWithDashes) {
  const std::string help = FlagsHelp("prog --prompt-ids 1,2,3");
  EXPECT_THAT(help, testing::StartsWith("prog --prompt-ids 1,2,3\n"));
  EXPECT_THAT(help,
              HasSubstr("  --prompt-ids (default: \"\")\n      test: comma-separated token ids\n"));
  EXPECT_THAT(help, HasSubstr("  --kv-heads (default: 4)\n"));
  EXPECT_THAT(help, HasSubstr("  --ignore-eos (default: false)\n"));
  EXPECT_THAT(help, Not(HasSubstr("prompt_ids")));
  // Abseil's own flags are not the program's.
  EXPECT_THAT(help, Not(HasSubstr("flagfile")));
  EXPECT_THAT(help, Not(HasSubstr("--helpfull")));
  // Sorted by name.
  EXPECT_LT(help.find("  --ignore-eos ("), help.find("  --kv-heads ("));
  EXPECT_LT(help.find("  --kv-heads ("), help.find("  --prompt-ids ("));
}

}  // namespace
}  // namespace tandem::base
