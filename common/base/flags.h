#pragma once
// The command line of every Tandem binary: flags are spelled with dashes in
// docs and usage lines (`--prompt-ids`), and Abseil only knows the underscore
// form (`--prompt_ids`, the C++ identifier), so both must be accepted.
//
//   int main(int argc, char** argv) {
//     std::vector<char*> args = tandem::base::ParseFlags(
//         argc, argv, "tandem-generate --model FILE (--prompt TEXT | --prompt-ids 1,2,3)");
//     ...
//   }
//
// Main thread, before any other thread starts (flags are process-global).

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tandem::base {

// Rewrites, in place, every `-name` / `--name[=value]` argument of argv[1..argc)
// whose name contains '-' to the underscore spelling Abseil registers; only the
// name (before '=') changes, so the length stays the same. Leaves alone argv[0],
// positional arguments, everything after a bare `--`, and the argument after a
// known non-bool flag given without `=` (its value: `--prompt -x-y`).
void NormalizeFlagNames(int argc, char** argv);

// "prompt_ids" -> "prompt-ids": a flag name as docs and messages spell it.
std::string DashedFlagName(absl::string_view name);

// `usage`, then every flag the program defined (Abseil's own flags left out),
// sorted, spelled with dashes, with its help and default value.
std::string FlagsHelp(absl::string_view usage);

// NormalizeFlagNames, then sets `usage` as the program usage message. On
// `--help`, `-h`, `-help` or `--helpfull` prints FlagsHelp(usage) to stdout and
// exits 0. Otherwise returns absl::ParseCommandLine(argc, argv): argv[0] and the
// positional arguments; an unknown flag or a bad value prints Abseil's error
// and exits 1.
std::vector<char*> ParseFlags(int argc, char** argv, absl::string_view usage);

}  // namespace tandem::base
