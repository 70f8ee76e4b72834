#include "common/engine/generation.h"

#include <algorithm>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/engine/tokenizer/tokenizer.h"

namespace tandem::engine {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kContext:
      return "context";
  }
  return "unknown";
}

namespace {

absl::StatusOr<GenerateResult> GenerateOnSequence(Engine& engine, SequenceId seq,
                                                  absl::Span<const int32_t> prompt,
                                                  int32_t cached, const GenerateOptions& options) {
  const ModelConfig& mc = engine.model().config();
  const Tokenizer* tok = engine.model().tokenizer();
  const SamplingParams& sp = options.sampling;
  GenerateResult result;
  result.cached_prompt_tokens = cached;
  if (options.prompt_logits != nullptr) {
    if (cached != 0) {
      return absl::FailedPreconditionError(
          "prompt logits requested but part of the prompt came from the prefix cache");
    }
    options.prompt_logits->assign(prompt.size() * static_cast<size_t>(mc.vocab_size), 0.0f);
  }

  // Chunked prefill.
  absl::Time start = absl::Now();
  std::vector<float> last_logits;
  for (size_t pos = cached; pos < prompt.size(); pos += options.prefill_chunk) {
    size_t n = std::min<size_t>(options.prefill_chunk, prompt.size() - pos);
    BatchEntry entry{seq, prompt.subspan(pos, n),
                     options.prompt_logits ? LogitsMode::kAll : LogitsMode::kLast};
    ASSIGN_OR_RETURN(StepOutput out, engine.Step(absl::MakeConstSpan(&entry, 1)));
    if (options.prompt_logits != nullptr) {
      for (size_t i = 0; i < n; ++i) {
        absl::Span<const float> row = out.logits(0, i);
        std::copy(row.begin(), row.end(),
                  options.prompt_logits->begin() + (pos + i) * mc.vocab_size);
      }
    }
    if (pos + n == prompt.size()) {
      absl::Span<const float> row = out.last_logits(0);
      last_logits.assign(row.begin(), row.end());
    }
  }
  result.prefill_time = absl::Now() - start;

  // Decode.
  start = absl::Now();
  Sampler sampler(sp);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  std::vector<int32_t> stop_ids = sp.stop_token_ids;
  if (tok != nullptr && !sp.ignore_eos) {
    stop_ids.insert(stop_ids.end(), tok->eog_ids().begin(), tok->eog_ids().end());
  }
  std::unique_ptr<Detokenizer> detok;
  if (tok != nullptr) detok = std::make_unique<Detokenizer>(*tok);
  StopStringMatcher stops(sp.stop_strings);
  result.finish = FinishReason::kLength;
  bool stop_string_hit = false;
  for (int32_t i = 0; i < options.max_tokens; ++i) {
    SampleResult s = sampler.Sample(last_logits, history);
    if (std::find(stop_ids.begin(), stop_ids.end(), s.token) != stop_ids.end()) {
      result.finish = FinishReason::kStop;
      break;
    }
    result.tokens.push_back(s.token);
    result.samples.push_back(s);
    history.push_back(s.token);
    if (options.on_token) options.on_token(s);
    if (detok != nullptr) {
      bool stopped = false;
      result.text += stops.Append(detok->Push(s.token), &stopped);
      if (stopped) {
        stop_string_hit = true;
        result.finish = FinishReason::kStop;
        break;
      }
    }
    if (i + 1 == options.max_tokens) break;
    if (static_cast<int32_t>(history.size()) >= mc.context_length) {
      result.finish = FinishReason::kContext;
      break;
    }
    BatchEntry entry{seq, absl::MakeConstSpan(&history.back(), 1), LogitsMode::kLast};
    ASSIGN_OR_RETURN(StepOutput out, engine.Step(absl::MakeConstSpan(&entry, 1)));
    absl::Span<const float> row = out.last_logits(0);
    last_logits.assign(row.begin(), row.end());
  }
  if (detok != nullptr && !stop_string_hit) {
    bool stopped = false;
    result.text += stops.Append(detok->Flush(), &stopped);
    if (!stopped) result.text += stops.Flush();
  }
  result.decode_time = absl::Now() - start;
  return result;
}

}  // namespace

absl::StatusOr<GenerateResult> Generate(Engine& engine, SequenceId seq,
                                        absl::Span<const int32_t> prompt,
                                        const GenerateOptions& options) {
  RETURN_IF_ERROR(options.sampling.Validate());
  if (options.max_tokens < 0 || options.prefill_chunk < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens (", options.max_tokens,
                                                   ") must be >= 0 and prefill_chunk (",
                                                   options.prefill_chunk, ") >= 1"));
  }
  ASSIGN_OR_RETURN(int32_t cached, engine.AddSequence(seq, prompt));
  absl::Cleanup free_seq = [&] { engine.FreeSequence(seq).IgnoreError(); };
  return GenerateOnSequence(engine, seq, prompt, cached, options);
}

}  // namespace tandem::engine
