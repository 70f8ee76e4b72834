// ThreadSanitizer builds only: the library's own definition of a function
// this executable interposes (tsan_abseil_sync.cc, tsan_grpc_sync.cc).

#ifndef TANDEM_TESTS_TESTING_TSAN_REAL_H_
#define TANDEM_TESTS_TESTING_TSAN_REAL_H_

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace tandem::testing {

// The next definition of `symbol` after this executable's (dlsym(RTLD_NEXT));
// aborts naming `library` when there is none.
template <typename Fn>
Fn RealSymbol(const char* library, const char* symbol) {
  void* sym = dlsym(RTLD_NEXT, symbol);
  if (sym == nullptr) {
    std::fprintf(stderr, "tsan: %s not found in %s: %s\n", symbol, library, dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(sym);
}

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_TESTING_TSAN_REAL_H_
