#include "router/api_error.h"

#include <algorithm>
#include <cmath>
#include "absl/types/optional.h"

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "nlohmann/json.hpp"

namespace tandem::router {
namespace {

constexpr char kParamUrl[] = "type.googleapis.com/tandem.router.ErrorParam";
constexpr char kCodeUrl[] = "type.googleapis.com/tandem.router.ErrorCode";
constexpr char kRetryAfterUrl[] = "type.googleapis.com/tandem.router.RetryAfter";

std::string Payload(const absl::Status& s, absl::string_view url) {
  absl::optional<absl::Cord> p = s.GetPayload(url);
  return p.has_value() ? std::string(*p) : std::string();
}

}  // namespace

absl::Status InvalidParam(absl::string_view param, absl::string_view message,
                          absl::string_view code) {
  return WithErrorCode(WithParam(absl::InvalidArgumentError(message), param), code);
}

absl::Status WithParam(absl::Status s, absl::string_view param) {
  if (!s.ok() && !param.empty()) {
    s.SetPayload(kParamUrl, absl::Cord(param));
  }
  return s;
}

absl::Status WithErrorCode(absl::Status s, absl::string_view code) {
  if (!s.ok() && !code.empty()) {
    s.SetPayload(kCodeUrl, absl::Cord(code));
  }
  return s;
}

std::string ErrorParam(const absl::Status& s) { return Payload(s, kParamUrl); }
std::string ErrorCode(const absl::Status& s) { return Payload(s, kCodeUrl); }

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string OpenAiErrorType(absl::StatusCode code) {
  int http = HttpStatusFor(code);
  if (http == 429) {
    return "rate_limit_error";
  }
  if (http >= 500) {
    return "server_error";
  }
  if (http == 404) {
    return "not_found_error";
  }
  return "invalid_request_error";
}

std::string OpenAiErrorJson(const absl::Status& s) {
  nlohmann::json err;
  err["message"] = std::string(s.message());
  err["type"] = OpenAiErrorType(s.code());
  std::string param = ErrorParam(s);
  err["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  std::string code = ErrorCode(s);
  if (code.empty()) {
    code = absl::AsciiStrToLower(absl::StatusCodeToString(s.code()));
  }
  err["code"] = code;
  nlohmann::json body;
  body["error"] = std::move(err);
  // Messages may quote client bytes; replace invalid UTF-8 instead of throwing.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string RetryAfterSeconds(absl::Duration d) {
  // Capped at a day: an infinite or absurd wait must still print an integer.
  double s = std::min(std::ceil(absl::ToDoubleSeconds(d)), 86400.0);
  return std::to_string(static_cast<int64_t>(std::max(1.0, s)));
}

absl::Status WithRetryAfter(absl::Status s, absl::Duration retry_after) {
  if (!s.ok()) {
    s.SetPayload(kRetryAfterUrl, absl::Cord(absl::FormatDuration(retry_after)));
  }
  return s;
}

absl::Duration RetryAfter(const absl::Status& s, absl::Duration fallback) {
  absl::Duration d;
  const std::string text = Payload(s, kRetryAfterUrl);
  return !text.empty() && absl::ParseDuration(text, &d) ? d : fallback;
}

}  // namespace tandem::router
