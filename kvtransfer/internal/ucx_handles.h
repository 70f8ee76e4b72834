#pragma once
// Owning wrappers for what UcxTransport gets from UCX (config, context,
// worker, worker address, memory mappings, rkeys and packed rkeys),
// ucp_mem_map into such a handle, and capture of UCX's FILE*-printed tables.
// File descriptors are base::UniqueFd (common/base/fd.h).
// Each handle's deleter calls the matching UCX release function; the order
// they die in is the owner's business (see UcxTransport::Impl's members).

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ucp/api/ucp.h"

namespace tandem::kvtransfer::internal {

struct ConfigDeleter {
  void operator()(ucp_config_t* c) const { ucp_config_release(c); }
};
struct ContextDeleter {
  void operator()(ucp_context* c) const { ucp_cleanup(c); }
};
struct WorkerDeleter {
  void operator()(ucp_worker* w) const { ucp_worker_destroy(w); }
};
struct AddressDeleter {
  ucp_worker_h worker = nullptr;
  void operator()(ucp_address_t* a) const { ucp_worker_release_address(worker, a); }
};
// ucp_mem_unmap; a failure is logged (nothing else can be done with it).
struct MemDeleter {
  ucp_context_h context = nullptr;
  void operator()(ucp_mem* m) const;
};
struct RkeyDeleter {
  void operator()(ucp_rkey* r) const { ucp_rkey_destroy(r); }
};
struct RkeyBufferDeleter {
  void operator()(void* b) const { ucp_rkey_buffer_release(b); }
};

using ConfigPtr = std::unique_ptr<ucp_config_t, ConfigDeleter>;
using ContextPtr = std::unique_ptr<ucp_context, ContextDeleter>;
using WorkerPtr = std::unique_ptr<ucp_worker, WorkerDeleter>;
using AddressPtr = std::unique_ptr<ucp_address_t, AddressDeleter>;
using MemPtr = std::unique_ptr<ucp_mem, MemDeleter>;
using RkeyPtr = std::unique_ptr<ucp_rkey, RkeyDeleter>;
using RkeyBufferPtr = std::unique_ptr<void, RkeyBufferDeleter>;

// ucp_mem_map of [address, address + bytes), or with `allocate` of `bytes`
// UCX allocates (UCP_MEM_MAP_ALLOCATE; `address` is then nullptr). On
// failure: UcsError(status, "<what>: ucp_mem_map of <bytes> bytes", fallback).
absl::StatusOr<MemPtr> MapMemory(ucp_context_h context, void* address, uint64_t bytes,
                                 bool allocate, absl::string_view what, absl::StatusCode fallback);

// What a UCX print function (ucp_context_print_info, ucp_ep_print_info)
// writes to a FILE*, as a string; "" if no in-memory FILE can be opened.
std::string Capture(absl::FunctionRef<void(FILE*)> print);

}  // namespace tandem::kvtransfer::internal
