// libFuzzer harness for the OpenAI request parser: every input is parsed as
// a /v1/completions body and as a /v1/chat/completions body (the bytes come
// straight from an HTTP client). A parsed chat request is rendered with the
// default template, as the router does next; an error must name a parameter.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "router/chat_template.h"
#include "router/openai_request.h"
#include "tests/fuzz/fuzz_util.h"

namespace tandem::router {
namespace {

void ParseAs(OpenAiEndpoint endpoint, absl::string_view body) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(endpoint, body);
  if (!r.ok()) {
    fuzz::Require(r.status().code() == absl::StatusCode::kInvalidArgument,
                  "a bad body is InvalidArgument");
    fuzz::Require(!r.status().message().empty(), "the error says what is wrong");
    return;
  }
  fuzz::Require(r->endpoint == endpoint, "the endpoint is kept");
  if (r->gen.messages.has_value()) {
    (void)ChatTemplate(ChatTemplateFamily::kChatml).Render(*r->gen.messages);
  }
}

}  // namespace
}  // namespace tandem::router

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  tandem::router::ParseAs(tandem::router::OpenAiEndpoint::kCompletions, body);
  tandem::router::ParseAs(tandem::router::OpenAiEndpoint::kChat, body);
  return 0;
}
