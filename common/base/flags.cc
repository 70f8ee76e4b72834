#include "common/base/flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace tandem::base {
namespace {

// Normalizes argv as NormalizeFlagNames documents; returns whether a help
// flag (--help, -h, -help, --helpfull, --helpshort) was among the flags.
bool NormalizeAndFindHelp(int argc, char** argv) {
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    char* arg = argv[i];
    if (arg[0] != '-') {
      continue;  // positional
    }
    if (std::strcmp(arg, "--") == 0) {
      break;  // the rest is positional, as Abseil reads it
    }
    char* name = arg + (arg[1] == '-' ? 2 : 1);
    // "-", "-5", "---x": not a flag name; Abseil decides what they are.
    if (!absl::ascii_isalpha(static_cast<unsigned char>(*name)) && *name != '_') {
      continue;
    }
    char* equals = std::strchr(name, '=');
    char* end = equals != nullptr ? equals : name + std::strlen(name);
    std::replace(name, end, '-', '_');
    const absl::string_view flag_name(name, end - name);
    if (equals != nullptr) {
      continue;
    }
    if (flag_name == "h" || flag_name == "help" || flag_name == "helpfull" ||
        flag_name == "helpshort") {
      help = true;
      continue;
    }
    // "--prompt -x-y": the next argument is the value, whatever it looks like.
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(flag_name);
    if (flag != nullptr && !flag->IsOfType<bool>()) {
      ++i;
    }
  }
  return help;
}

}  // namespace

void NormalizeFlagNames(int argc, char** argv) { NormalizeAndFindHelp(argc, argv); }

std::string DashedFlagName(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"_", "-"}});
}

std::string FlagsHelp(absl::string_view usage) {
  std::vector<std::pair<std::string, const absl::CommandLineFlag*>> own;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    // Abseil's own (--flagfile, --helpfull, --undefok, ...) are not the program's.
    if (absl::StrContains(flag->Filename(), "absl/")) {
      continue;
    }
    own.emplace_back(DashedFlagName(name), flag);
  }
  std::sort(own.begin(), own.end());
  std::string out = absl::StrCat(absl::StripTrailingAsciiWhitespace(usage), "\n");
  if (own.empty()) {
    return out;
  }
  absl::StrAppend(&out, "\nFlags (--flag-name or --flag_name; --flag=VALUE or --flag VALUE):\n");
  for (const auto& [name, flag] : own) {
    const std::string default_value = flag->DefaultValue();
    absl::StrAppend(&out, "  --", name,
                    " (default: ", default_value.empty() ? "\"\"" : default_value, ")\n      ",
                    flag->Help(), "\n");
  }
  return out;
}

std::vector<char*> ParseFlags(int argc, char** argv, absl::string_view usage) {
  const bool help = NormalizeAndFindHelp(argc, argv);
  // Abseil dies on a second SetProgramUsageMessage (tests parse more than once).
  static bool usage_set = false;
  if (!usage_set) {
    absl::SetProgramUsageMessage(usage);
    usage_set = true;
  }
  if (help) {
    std::fputs(FlagsHelp(usage).c_str(), stdout);
    std::exit(0);
  }
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace tandem::base
