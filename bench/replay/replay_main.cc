// tandem-replay: an open-loop load generator for a Tandem router (or any
// OpenAI-compatible server over --protocol http). docs/replay.md.
//
//   tandem-replay --target 127.0.0.1:50051 --protocol grpc --model NAME
//       --trace AzureLLMInferenceTrace_code.csv --speedup 4 --duration 60
//       --max-requests 200 --slo ttft=2s,tpot=200ms --output out/
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/replay/client.h"
#include "bench/replay/report.h"
#include "bench/replay/runner.h"
#include "bench/replay/stats.h"
#include "bench/replay/workload.h"
#include "common/base/flags.h"
#include "common/engine/format/gguf.h"
#include "common/engine/model_store.h"
#include "common/engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, target, "", "HOST:PORT of the router's gRPC (grpc) or HTTP (http) front");
ABSL_FLAG(std::string, protocol, "grpc", "grpc (tandem.v1.Generation) | http (/v1/completions)");
ABSL_FLAG(bool, allow_remote, false, "allow a --target that is not loopback");
ABSL_FLAG(std::string, api_key, "",
          "API key sent as 'Authorization: Bearer KEY' (default: $TANDEM_API_KEY)");
ABSL_FLAG(std::string, model, "", "model name sent with each request (\"\" = router default)");
ABSL_FLAG(double, temperature, 0,
          "sampling temperature sent with each request (0 = greedy; OpenAI's default is 1, "
          "which clients that send none, e.g. GuideLLM, get)");
ABSL_FLAG(std::string, tokenizer, "",
          "GGUF file or model name (docs/models.md) whose tokenizer sizes the prompts "
          "(default: --model resolved as a model name)");
ABSL_FLAG(std::string, trace, "", "trace file: Azure CSV or Mooncake JSONL");
ABSL_FLAG(std::string, format, "auto", "trace format: auto | azure | mooncake");
ABSL_FLAG(std::string, arrival, "",
          "trace | poisson | gamma (default: trace with --trace, else poisson)");
ABSL_FLAG(double, rate, 0, "poisson / gamma: requests per second");
ABSL_FLAG(double, burstiness, 1.0, "gamma shape (1 = Poisson, < 1 burstier)");
ABSL_FLAG(int32_t, concurrency, 0, "keep this many requests in flight (closed loop) instead");
ABSL_FLAG(double, speedup, 1.0, "divide the trace's inter-arrival times by this");
ABSL_FLAG(double, window_start, 0, "trace seconds to skip before the replayed window");
ABSL_FLAG(double, duration, 0,
          "seconds: the trace window, and no request is sent after this (0 = no limit)");
ABSL_FLAG(double, grace, 10, "seconds after --duration before in-flight requests are cancelled");
ABSL_FLAG(int64_t, max_requests, 0, "send at most this many requests (0 = no limit)");
ABSL_FLAG(std::string, slo, "", "SLOs for goodput, e.g. ttft=2s,tpot=200ms,e2e=30s");
ABSL_FLAG(std::string, output, "", "directory for requests.jsonl, summary.json and the plots");
ABSL_FLAG(std::string, prompts, "", "ShareGPT JSON prompt source (default: built-in text)");
ABSL_FLAG(double, input_scale, 1.0, "multiply trace input lengths");
ABSL_FLAG(double, output_scale, 1.0, "multiply trace output lengths");
ABSL_FLAG(int64_t, max_input_tokens, 0,
          "cap on prompt tokens (0 = the model's context minus --max-output-tokens)");
ABSL_FLAG(int64_t, max_output_tokens, 0, "cap on output tokens (0 = a quarter of the context)");
ABSL_FLAG(int64_t, input_tokens, 0, "synthetic arrivals without --trace: prompt tokens");
ABSL_FLAG(int64_t, output_tokens, 0, "synthetic arrivals without --trace: output tokens");
ABSL_FLAG(int64_t, hash_block_tokens, 512, "tokens per Mooncake hash id");
ABSL_FLAG(double, repeat_fraction, 0, "fraction of requests repeating an earlier prompt");
ABSL_FLAG(double, paraphrase_fraction, 0, "fraction of requests paraphrasing an earlier prompt");
ABSL_FLAG(uint64_t, seed, 0, "seed of every random choice");
ABSL_FLAG(std::string, progress, "auto", "auto | lines | off (progress on stderr)");
ABSL_FLAG(bool, plot, true, "draw latency_cdf.png and throughput.png with gnuplot");

namespace {

namespace replay = ::tandem::replay;
using json = nlohmann::json;

std::atomic<bool> g_interrupt{false};
void OnSigint(int) { g_interrupt.store(true); }

int Fail(const absl::Status& s) {
  std::cerr << "tandem-replay: " << s.message() << "\n";
  return 2;
}

// `value` of --`flag` as one of `choices` (name, value); else
// InvalidArgument listing them.
template <typename T>
absl::StatusOr<T> ParseChoice(absl::string_view flag, const std::string& value,
                              std::initializer_list<std::pair<const char*, T>> choices) {
  std::vector<std::string> names;
  for (const auto& [name, v] : choices) {
    if (value == name) {
      return v;
    }
    names.push_back(name);
  }
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " '", value, "': not one of ",
                                                 absl::StrJoin(names, ", ")));
}

absl::StatusOr<replay::Arrival> ParseArrival(const std::string& a, bool have_trace,
                                             int concurrency) {
  if (concurrency > 0) {
    return replay::Arrival::kConcurrency;
  }
  if (a == "trace" || (a.empty() && have_trace)) {
    if (!have_trace) {
      return absl::InvalidArgumentError("--arrival trace needs --trace FILE");
    }
    return replay::Arrival::kTrace;
  }
  if (a == "poisson" || a.empty()) {
    return replay::Arrival::kPoisson;
  }
  if (a == "gamma") {
    return replay::Arrival::kGamma;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--arrival '", a, "': unknown arrival process (trace, poisson, gamma)"));
}

const char* ArrivalName(replay::Arrival a) {
  switch (a) {
    case replay::Arrival::kTrace:
      return "trace";
    case replay::Arrival::kPoisson:
      return "poisson";
    case replay::Arrival::kGamma:
      return "gamma";
    case replay::Arrival::kConcurrency:
      return "concurrency";
  }
  return "";
}

struct TargetModel {
  std::unique_ptr<tandem::engine::Tokenizer> tokenizer;
  int64_t context_length = 0;  // 0 when the file does not say
};

absl::StatusOr<TargetModel> LoadTokenizer(const std::string& name) {
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "the prompts need the target model's tokenizer: give --tokenizer FILE.gguf (or a model "
        "name), or --model as a model name");
  }
  absl::StatusOr<std::string> path = tandem::engine::ResolveModelPath(name);
  if (!path.ok()) {
    return path.status();
  }
  absl::StatusOr<std::unique_ptr<tandem::engine::GgufFile>> file =
      tandem::engine::GgufFile::Open(*path);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("--tokenizer ", *path, ": ", file.status().message()));
  }
  TargetModel m;
  absl::StatusOr<std::unique_ptr<tandem::engine::Tokenizer>> tok =
      tandem::engine::Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat("--tokenizer ", *path, ": ", tok.status().message()));
  }
  m.tokenizer = *std::move(tok);
  if (absl::StatusOr<std::string> arch = (*file)->GetString("general.architecture"); arch.ok()) {
    m.context_length = (*file)->GetInt(absl::StrCat(*arch, ".context_length")).value_or(0);
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  tandem::base::ParseFlags(argc, argv,
                           "tandem-replay --target HOST:PORT [--protocol grpc|http] "
                           "(--trace FILE | --rate R | --concurrency N) --output DIR");
  const std::string target = absl::GetFlag(FLAGS_target);
  const std::string output = absl::GetFlag(FLAGS_output);
  if (target.empty() || output.empty()) {
    return Fail(absl::InvalidArgumentError("--target and --output are required (see --help)"));
  }
  absl::StatusOr<replay::HostPort> host_port = replay::ParseTarget(target);
  if (!host_port.ok()) {
    return Fail(host_port.status());
  }
  if (!replay::IsLoopbackHost(host_port->host) && !absl::GetFlag(FLAGS_allow_remote)) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--target ", target, " is not loopback; pass --allow-remote to load-test ",
                     "another machine")));
  }
  absl::StatusOr<replay::Protocol> protocol = replay::ParseProtocol(absl::GetFlag(FLAGS_protocol));
  absl::StatusOr<replay::Slo> slo = replay::ParseSlo(absl::GetFlag(FLAGS_slo));
  absl::StatusOr<replay::TraceFormat> format = ParseChoice<replay::TraceFormat>(
      "format", absl::GetFlag(FLAGS_format),
      {{"auto", replay::TraceFormat::kAuto},
       {"azure", replay::TraceFormat::kAzure},
       {"mooncake", replay::TraceFormat::kMooncake}});
  absl::StatusOr<replay::Arrival> arrival =
      ParseArrival(absl::GetFlag(FLAGS_arrival), !absl::GetFlag(FLAGS_trace).empty(),
                   absl::GetFlag(FLAGS_concurrency));
  absl::StatusOr<replay::ProgressMode> progress = ParseChoice<replay::ProgressMode>(
      "progress", absl::GetFlag(FLAGS_progress),
      {{"auto", replay::ProgressMode::kAuto},
       {"lines", replay::ProgressMode::kLines},
       {"off", replay::ProgressMode::kOff}});
  for (const absl::Status& s : {protocol.status(), slo.status(), format.status(),
                                arrival.status(), progress.status()}) {
    if (!s.ok()) {
      return Fail(s);
    }
  }
  const std::string model = absl::GetFlag(FLAGS_model);
  const std::string tokenizer_name =
      absl::GetFlag(FLAGS_tokenizer).empty() ? model : absl::GetFlag(FLAGS_tokenizer);
  absl::StatusOr<TargetModel> target_model = LoadTokenizer(tokenizer_name);
  if (!target_model.ok()) {
    return Fail(target_model.status());
  }

  replay::WorkloadOptions w;
  w.arrival = *arrival;
  w.trace_path = absl::GetFlag(FLAGS_trace);
  w.format = *format;
  w.speedup = absl::GetFlag(FLAGS_speedup);
  w.window_start_s = absl::GetFlag(FLAGS_window_start);
  w.duration_s = absl::GetFlag(FLAGS_duration);
  w.rate = absl::GetFlag(FLAGS_rate);
  w.burstiness = absl::GetFlag(FLAGS_burstiness);
  w.concurrency = absl::GetFlag(FLAGS_concurrency);
  w.max_requests = absl::GetFlag(FLAGS_max_requests);
  w.seed = absl::GetFlag(FLAGS_seed);
  w.input_scale = absl::GetFlag(FLAGS_input_scale);
  w.output_scale = absl::GetFlag(FLAGS_output_scale);
  w.max_output_tokens = absl::GetFlag(FLAGS_max_output_tokens);
  w.max_input_tokens = absl::GetFlag(FLAGS_max_input_tokens);
  const int64_t context = target_model->context_length;
  if (w.max_output_tokens == 0 && context > 0) {
    w.max_output_tokens = context / 4;
  }
  if (w.max_input_tokens == 0 && context > 0) {
    w.max_input_tokens = context - w.max_output_tokens - 1;  // the BOS the router adds
  }
  w.fixed_input_tokens = absl::GetFlag(FLAGS_input_tokens);
  w.fixed_output_tokens = absl::GetFlag(FLAGS_output_tokens);
  w.prompt_source = absl::GetFlag(FLAGS_prompts);
  w.hash_block_tokens = absl::GetFlag(FLAGS_hash_block_tokens);
  w.repeat_fraction = absl::GetFlag(FLAGS_repeat_fraction);
  w.paraphrase_fraction = absl::GetFlag(FLAGS_paraphrase_fraction);
  w.model = model;
  absl::StatusOr<replay::Workload> workload =
      replay::BuildWorkload(w, *target_model->tokenizer);
  if (!workload.ok()) {
    return Fail(workload.status());
  }

  const double temperature = absl::GetFlag(FLAGS_temperature);
  if (!(temperature >= 0 && temperature <= 2)) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--temperature ", temperature, ": want 0..2")));
  }
  std::string api_key = absl::GetFlag(FLAGS_api_key);
  if (const char* env = std::getenv("TANDEM_API_KEY"); api_key.empty() && env != nullptr) {
    api_key = env;
  }
  absl::StatusOr<std::unique_ptr<replay::Client>> client =
      replay::MakeClient({*protocol, target, model, api_key, temperature});
  if (!client.ok()) {
    return Fail(client.status());
  }
  replay::RunOptions run;
  // --duration is trace time for trace arrivals (the window), sent in
  // duration / speedup of wall time.
  run.duration_s = absl::GetFlag(FLAGS_duration) /
                   (w.arrival == replay::Arrival::kTrace && w.speedup > 0 ? w.speedup : 1.0);
  run.grace_s = absl::GetFlag(FLAGS_grace);
  run.max_requests = absl::GetFlag(FLAGS_max_requests);
  run.progress = *progress;
  run.interrupt = &g_interrupt;
  signal(SIGINT, OnSigint);
  signal(SIGPIPE, SIG_IGN);
  std::cerr << "tandem-replay: " << workload->requests.size() << " requests to "
            << replay::ProtocolName(*protocol) << "://" << target << "\n";
  const std::vector<replay::RequestRecord> records =
      replay::RunWorkload(*workload, **client, run);
  const replay::Summary summary = replay::Summarize(records, *slo);

  json settings;
  settings["target"] = target;
  settings["protocol"] = replay::ProtocolName(*protocol);
  settings["model"] = model;
  settings["temperature"] = temperature;
  settings["trace"] = w.trace_path;
  settings["arrival"] = ArrivalName(w.arrival);
  settings["rate"] = w.rate;
  settings["concurrency"] = workload->concurrency;
  settings["speedup"] = w.speedup;
  settings["window_start_s"] = w.window_start_s;
  settings["duration_s"] = run.duration_s;
  settings["max_requests"] = run.max_requests;
  settings["requests_planned"] = workload->requests.size();
  settings["seed"] = w.seed;
  if (absl::Status s = replay::WriteReport(output, records, summary, settings); !s.ok()) {
    return Fail(s);
  }
  std::cout << replay::SummaryTable(summary);
  std::cout << "tandem-replay: wrote " << output << "/requests.jsonl and " << output
            << "/summary.json\n";
  if (absl::GetFlag(FLAGS_plot)) {
    if (absl::Status s = replay::WritePlots(output, records); !s.ok()) {
      std::cerr << "tandem-replay: warning: " << s.message() << "\n";
    } else {
      std::cout << "tandem-replay: wrote " << output << "/latency_cdf.png and " << output
                << "/throughput.png\n";
    }
  }
  return 0;
}
