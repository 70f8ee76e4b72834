#include "router/cli/health_client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "proto/grpc_status.h"

namespace tandem::router::cli {

absl::Status CheckHealth(const std::string& address, absl::Duration timeout,
                         const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  auto channel = grpc::CreateChannel(
      address, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::ByteBuffer request;   // HealthCheckRequest{service: ""}: no bytes
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) {
    return proto::FromGrpcStatus(status);
  }
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) {
    return absl::InternalError("health: unreadable response");
  }
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // HealthCheckResponse{status = 1}: tag 0x08, varint 1 (SERVING).
  int serving = 0;
  for (size_t i = 0; i + 1 < bytes.size(); ++i) {
    if (bytes[i] == 0x08) {
      serving = static_cast<unsigned char>(bytes[i + 1]);
      break;
    }
  }
  if (serving != 1) {
    return absl::UnavailableError(absl::StrCat(address, " is not serving (status ", serving, ")"));
  }
  return absl::OkStatus();
}

}  // namespace tandem::router::cli
