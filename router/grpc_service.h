#pragma once
// The public gRPC front: tandem.v1.Generation on the callback API. Generate
// validates and starts the request on the Router, then streams
// GenerateResponse messages (route first, text/token deltas, a last message
// with finish reason, usage, timings and route); errors end the stream with
// the request's status code (INVALID_ARGUMENT, RESOURCE_EXHAUSTED,
// UNAVAILABLE, DEADLINE_EXCEEDED, ...). The client's deadline is propagated
// to the workers; a client that cancels cancels the workers' calls.
//
// Never blocks in a callback: Generate's preparation (tokenizing, embedding,
// Router::Start) runs on the service's own threads (limits.prepare_threads),
// at most limits.max_inflight calls waiting for them (more are refused
// RESOURCE_EXHAUSTED with `retry-after`). Thread-safe; owned by main next to
// the server, which must be shut down before the service is destroyed.

#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/string_view.h"
#include "common/base/executor.h"
#include "common/engine/tokenizer/tokenizer.h"
#include "router/auth.h"
#include "router/router.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::router {

class GenerationService final : public tandem::v1::Generation::CallbackService {
 public:
  // `api_keys` must outlive the service. With keys configured every method
  // wants the metadata "authorization: Bearer <key>" (else UNAUTHENTICATED);
  // Generate runs under the key's tenant (GenerateRequest.tenant is then
  // ignored). With expose_route_workers off, RouteInfo names no worker.
  GenerationService(Router& router, const ApiKeys& api_keys)
      : router_(router),
        api_keys_(api_keys),
        prepare_(router.config().limits.prepare_threads,
                 static_cast<size_t>(router.config().limits.max_inflight)) {}

  grpc::ServerWriteReactor<tandem::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const tandem::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const tandem::v1::ListModelsRequest* request,
                                       tandem::v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const tandem::v1::TokenizeRequest* request,
                                     tandem::v1::TokenizeResponse* response) override;

 private:
  Router& router_;
  const ApiKeys& api_keys_;
  base::Executor prepare_;  // last: joined first, while the rest still lives
};

// Converts the public request to the router's (the edge conversion; proto3
// zeros mean "unset": max_tokens 0 = default, top_p 0 = off, repetition
// penalty 0 = off).
GenerationRequest FromProto(const tandem::v1::GenerateRequest& request);

}  // namespace tandem::router
