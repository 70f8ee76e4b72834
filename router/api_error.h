#pragma once
// Client-facing errors. Every error the router returns is an absl::Status;
// request errors may carry the offending parameter ("max_tokens") and an
// OpenAI-style code ("context_length_exceeded") as status payloads, so the
// HTTP front can fill the OpenAI error body {"error": {message, type, param,
// code}} and the gRPC front can pass the same message with the same code.
//
// Stateless functions; any thread.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tandem::router {

// InvalidArgument naming `param`; `code` is the OpenAI error code ("" = none).
absl::Status InvalidParam(absl::string_view param, absl::string_view message,
                          absl::string_view code = "");
// Attaches `param` / `code` to any status (no-op on OK or empty values).
absl::Status WithParam(absl::Status s, absl::string_view param);
absl::Status WithErrorCode(absl::Status s, absl::string_view code);
// The attached values, or "" when absent.
std::string ErrorParam(const absl::Status& s);
std::string ErrorCode(const absl::Status& s);

// HTTP status for a status code: InvalidArgument / FailedPrecondition /
// OutOfRange 400, NotFound 404, ResourceExhausted 429, Cancelled 499,
// Unimplemented 501, Unavailable 503, DeadlineExceeded 504, others 500.
int HttpStatusFor(absl::StatusCode code);
// OpenAI error "type": "invalid_request_error" (4xx), "rate_limit_error" (429),
// "server_error" (5xx).
std::string OpenAiErrorType(absl::StatusCode code);
// {"error": {"message", "type", "param", "code"}} as compact JSON. `param` and
// `code` are null when absent; code defaults to the lower-case status code name.
std::string OpenAiErrorJson(const absl::Status& s);

// Retry-After header value (whole seconds rounded up, at least 1, at most
// 86400).
std::string RetryAfterSeconds(absl::Duration d);

// Attaches when the client should retry (admission control computes it per
// refusal: router/admission.h) to a non-OK status; the HTTP front sends it as
// Retry-After, the gRPC front as trailing metadata `retry-after`.
absl::Status WithRetryAfter(absl::Status s, absl::Duration retry_after);
// The attached duration, else `fallback`.
absl::Duration RetryAfter(const absl::Status& s, absl::Duration fallback);

}  // namespace tandem::router
