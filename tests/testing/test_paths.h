#pragma once
// Where tests find data. Paths are fixed at configure time (no environment).

#include <string>

namespace tandem::testing {

// ../shared next to the repository (models, traces). Tests that need a file
// from it call RequireSharedFile, which fails the test with a message saying
// where the file is expected when it is missing.
std::string SharedDir();
std::string TestDataDir();   // tests/data (generated golden models and logits)
std::string BinaryDir();     // the CMake build directory (tools live in common/)
std::string SourceDir();     // the repository (scripts/)
// Full path of `relative` under SharedDir(); ADD_FAILURE with a clear message if absent.
std::string RequireSharedFile(const std::string& relative);
std::string RequireTestDataFile(const std::string& relative);
// A fresh temporary directory, removed at process exit.
std::string TempDir();

}  // namespace tandem::testing
