#include "kvtransfer/internal/ucx_handles.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/logging.h"
#include "kvtransfer/internal/ucx_util.h"
#include "ucp/api/ucp.h"

namespace tandem::kvtransfer::internal {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { fclose(f); }
};
struct FreeDeleter {
  void operator()(char* p) const { free(p); }
};

}  // namespace

void MemDeleter::operator()(ucp_mem* m) const {
  const ucs_status_t s = ucp_mem_unmap(context, m);
  if (s != UCS_OK) {
    LOG(WARNING) << "ucp_mem_unmap: " << ucs_status_string(s);
  }
}

absl::StatusOr<MemPtr> MapMemory(ucp_context_h context, void* address, uint64_t bytes,
                                 bool allocate, absl::string_view what, absl::StatusCode fallback) {
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = address;
  mp.length = bytes;
  if (allocate) {
    mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
  }
  ucp_mem_h memh = nullptr;
  const ucs_status_t s = ucp_mem_map(context, &mp, &memh);
  if (s != UCS_OK) {
    return UcsError(s, absl::StrCat(what, ": ucp_mem_map of ", bytes, " bytes"), fallback);
  }
  return MemPtr(memh, MemDeleter{context});
}

std::string Capture(absl::FunctionRef<void(FILE*)> print) {
  char* raw = nullptr;
  size_t len = 0;
  std::unique_ptr<char, FreeDeleter> buf;
  {
    std::unique_ptr<FILE, FileCloser> f(open_memstream(&raw, &len));
    if (f == nullptr) {
      return "";
    }
    print(f.get());
  }  // fclose sets raw/len
  buf.reset(raw);
  return std::string(raw, len);
}

}  // namespace tandem::kvtransfer::internal
