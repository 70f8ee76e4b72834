// ThreadSanitizer builds only (TANDEM_TSAN): tells TSan about the ordering
// Debian's gRPC (not built with TSan) gives between starting a batch of call
// operations and the completion of its tag.
//
// gRPC's C++ headers, compiled into our binaries, fill a tag object on the
// thread that starts an operation (the CallOpSet and, in the callback API,
// the CallbackWithStatusTag holding our std::function), hand it to core with
// grpc_call_start_batch, and read it again on whichever thread takes the
// completion out of grpc_completion_queue_next/_pluck (for the callback API,
// libgrpc++'s own "nexting_thread", which then runs our callback). Core
// orders the two through its uninstrumented completion queue, so TSan saw no
// edge and reported the tag's fields as raced (CommitClientTest under TSan:
// 14 of 450 runs without this file, 0 of 300 with it; project CI on
// 2026-12-07: the std::function moved out of the tag in
// CallbackWithStatusTag::Run against its construction in CallbackUnaryCall).
// Most runs escaped only because gRPC's own absl::Mutex locks, annotated by
// tsan_abseil_sync.cc, happened to order the two threads. Suppressing by
// frame cannot cover it: the racing top frame is whichever std::function
// internal the compiler left un-inlined, and the writer's stack is often
// too old to restore.
//
// Each function below is defined in the executable, so ELF symbol
// interposition makes libgrpc++ (which calls them through its PLT) use it;
// each calls libgrpc's own definition (dlsym(RTLD_NEXT)). The tag is the
// synchronization object: __tsan_release on it before the batch starts,
// __tsan_acquire on it when its completion is returned, the edge an
// instrumented completion queue would give. A tag reused for a later batch
// (streaming ops) only ever gains edges: this can hide a race, never report
// one that is not there.
//
// Not linked into any other build: it redefines gRPC symbols.

#include <grpc/grpc.h>
#include <sanitizer/tsan_interface.h>

#include "tests/testing/tsan_real.h"

#if !defined(__SANITIZE_THREAD__)
#error "tsan_grpc_sync.cc is for -fsanitize=thread builds only"
#endif

namespace {

template <typename Fn>
Fn Real(const char* name) {
  return tandem::testing::RealSymbol<Fn>("gRPC", name);
}

grpc_event Completed(grpc_event ev) {
  if (ev.type == GRPC_OP_COMPLETE && ev.tag != nullptr) {
    __tsan_acquire(ev.tag);
  }
  return ev;
}

}  // namespace

extern "C" {

grpc_call_error grpc_call_start_batch(grpc_call* call, const grpc_op* ops, size_t nops, void* tag,
                                      void* reserved) {
  static const auto real =
      Real<grpc_call_error (*)(grpc_call*, const grpc_op*, size_t, void*, void*)>(
          "grpc_call_start_batch");
  if (tag != nullptr) {
    __tsan_release(tag);
  }
  return real(call, ops, nops, tag, reserved);
}

grpc_event grpc_completion_queue_next(grpc_completion_queue* cq, gpr_timespec deadline,
                                      void* reserved) {
  static const auto real =
      Real<grpc_event (*)(grpc_completion_queue*, gpr_timespec, void*)>(
          "grpc_completion_queue_next");
  return Completed(real(cq, deadline, reserved));
}

grpc_event grpc_completion_queue_pluck(grpc_completion_queue* cq, void* tag,
                                       gpr_timespec deadline, void* reserved) {
  static const auto real =
      Real<grpc_event (*)(grpc_completion_queue*, void*, gpr_timespec, void*)>(
          "grpc_completion_queue_pluck");
  return Completed(real(cq, tag, deadline, reserved));
}

}  // extern "C"
