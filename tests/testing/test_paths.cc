#include "tests/testing/test_paths.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "gtest/gtest.h"

namespace tandem::testing {
namespace {

std::string Require(const std::string& dir, const std::string& relative, const char* hint) {
  std::string path = dir + "/" + relative;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "missing test file " << path << ": " << hint;
  }
  return path;
}

}  // namespace

std::string SharedDir() { return TANDEM_SHARED_DIR; }
std::string TestDataDir() { return TANDEM_TEST_DATA_DIR; }
std::string BinaryDir() { return TANDEM_BINARY_DIR; }
std::string SourceDir() { return TANDEM_SOURCE_DIR; }

std::string RequireSharedFile(const std::string& relative) {
  return Require(SharedDir(), relative,
                 "the shared models and traces must be checked out as ../shared next to the "
                 "repository (see README.md)");
}

std::string RequireTestDataFile(const std::string& relative) {
  return Require(TestDataDir(), relative,
                 "generated golden data is committed under tests/data; regenerate it with "
                 "tests/reference/make_golden.py");
}

std::string TempDir() {
  static std::string dir = [] {
    std::string templ = std::filesystem::temp_directory_path().string() + "/tandem_test_XXXXXX";
    char* made = mkdtemp(templ.data());
    std::string d = made ? made : "/tmp";
    static std::string to_remove = d;
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(to_remove, ec); });
    return d;
  }();
  return dir;
}

}  // namespace tandem::testing
