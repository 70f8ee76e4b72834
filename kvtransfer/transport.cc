#include "kvtransfer/transport.h"

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "kvtransfer/loopback_transport.h"
#include "kvtransfer/ucx_transport.h"

namespace tandem::kvtransfer {

absl::Status TransportConfig::Validate() const {
  if (kind != "ucx" && kind != "loopback") {
    return absl::InvalidArgumentError(
        absl::StrCat("TransportConfig: unknown kind '", kind, "' (valid: ucx, loopback)"));
  }
  if (mode != "auto" && mode != "put" && mode != "am") {
    return absl::InvalidArgumentError(
        absl::StrCat("TransportConfig: unknown mode '", mode, "' (valid: auto, put, am)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvTransport>> MakeTransport(const TransportConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  if (config.kind == "loopback") {
    return std::unique_ptr<KvTransport>(std::make_unique<LoopbackTransport>());
  }
  ASSIGN_OR_RETURN(std::unique_ptr<UcxTransport> ucx, UcxTransport::Create(config));
  return std::unique_ptr<KvTransport>(std::move(ucx));
}

}  // namespace tandem::kvtransfer
