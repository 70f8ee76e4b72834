// tandem: the command line.
//
//   tandem generate --router HOST:PORT (--prompt TEXT | --prompt-ids 1,2,3) [--model M]
//                   [--max-tokens N --temperature T --top-k K --top-p P --seed S --stop a,b]
//                   [--timeout 120s]
//       streams the answer to stdout over gRPC (Generation/Generate) and a
//       summary line (finish reason, usage, TTFT, route) to stderr. Exit 0 on
//       success, 1 with the status on failure.
//
//   tandem up CONFIG.yaml
//       starts a router and workers on loopback (router/cli/launcher.h has the
//       schema), prints the endpoints once all are healthy, restarts a
//       process that dies (backoff; `restart:` in the YAML), and stops
//       everything on Ctrl-C / SIGTERM.

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/base/flags.h"
#include "router/cli/generate_client.h"
#include "router/cli/launcher.h"

ABSL_FLAG(std::string, router, "127.0.0.1:50051", "generate: the router's gRPC address");
ABSL_FLAG(std::string, prompt, "", "generate: prompt text");
ABSL_FLAG(std::string, prompt_ids, "", "generate: comma-separated prompt token ids instead");
ABSL_FLAG(std::string, model, "", "generate: model name (default: the router's only model)");
ABSL_FLAG(int32_t, max_tokens, 64, "generate: tokens to generate at most");
ABSL_FLAG(double, temperature, 0.0, "generate: sampling temperature (0 = greedy)");
ABSL_FLAG(int32_t, top_k, 0, "generate: top-k (0 = off)");
ABSL_FLAG(double, top_p, 1.0, "generate: top-p (1 = off)");
ABSL_FLAG(int64_t, seed, -1, "generate: sampling seed (-1 = random)");
ABSL_FLAG(std::vector<std::string>, stop, {}, "generate: stop strings (comma-separated)");
ABSL_FLAG(bool, bos, true, "generate: add BOS to the prompt text");
ABSL_FLAG(std::string, api_key, "",
          "generate: the router's API key (clusters with auth keys); default: $TANDEM_API_KEY");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(120), "generate: deadline of the call");

namespace {

constexpr char kUsage[] =
    "tandem generate --router HOST:PORT (--prompt TEXT | --prompt-ids 1,2,3) [flags]\n"
    "tandem up CONFIG.yaml";

int Generate() {
  tandem::router::cli::GenerateOptions o;
  o.router = absl::GetFlag(FLAGS_router);
  o.prompt = absl::GetFlag(FLAGS_prompt);
  if (const std::string ids = absl::GetFlag(FLAGS_prompt_ids); !ids.empty()) {
    for (absl::string_view s : absl::StrSplit(ids, ',', absl::SkipEmpty())) {
      int32_t id;
      if (!absl::SimpleAtoi(s, &id)) {
        std::cerr << "tandem generate: --prompt-ids: '" << s << "' is not a token id\n";
        return 2;
      }
      o.prompt_ids.push_back(id);
    }
  }
  if (o.prompt.empty() && o.prompt_ids.empty()) {
    std::cerr << "tandem generate: --prompt (or --prompt-ids) is required\n";
    return 2;
  }
  o.model = absl::GetFlag(FLAGS_model);
  o.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  o.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  o.top_k = absl::GetFlag(FLAGS_top_k);
  o.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  if (absl::GetFlag(FLAGS_seed) >= 0) {
    o.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  }
  o.stop = absl::GetFlag(FLAGS_stop);
  o.add_special_tokens = absl::GetFlag(FLAGS_bos);
  o.timeout = absl::GetFlag(FLAGS_timeout);
  o.api_key = absl::GetFlag(FLAGS_api_key);
  if (const char* env = std::getenv("TANDEM_API_KEY"); o.api_key.empty() && env != nullptr) {
    o.api_key = env;
  }
  absl::StatusOr<tandem::v1::GenerateResponse> last =
      tandem::router::cli::RunGenerate(o, std::cout);
  std::cout << std::endl;
  if (!last.ok()) {
    std::cerr << "tandem generate: " << last.status() << "\n";
    return 1;
  }
  std::cerr << "[" << tandem::router::cli::SummaryLine(*last) << "]\n";
  return 0;
}

int Up(const std::string& path) {
  // Signals are taken synchronously (sigtimedwait) by the supervising loop.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, nullptr);

  std::ifstream in(path);
  if (!in) {
    std::cerr << "tandem up: cannot read " << path << "\n";
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  const size_t slash = path.find_last_of('/');
  absl::StatusOr<tandem::router::cli::ClusterSpec> spec = tandem::router::cli::ParseClusterYaml(
      text.str(), slash == std::string::npos ? "." : path.substr(0, slash));
  if (!spec.ok()) {
    std::cerr << "tandem up: " << path << ": " << spec.status() << "\n";
    return 2;
  }
  tandem::router::cli::Cluster cluster(*std::move(spec));
  if (absl::Status s = cluster.Start(std::cerr); !s.ok()) {
    std::cerr << "tandem up: " << s << "\n";
    return 1;
  }
  cluster.PrintEndpoints(std::cout);
  int signal_seen = 0;
  auto should_stop = [&] {
    timespec ts{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) {
      signal_seen = sig;
      return true;
    }
    return false;
  };
  const int died = cluster.Supervise(should_stop, std::cerr);
  std::cerr << "tandem up: " << (signal_seen == SIGINT ? "interrupted" : "terminated")
            << "; stopping the cluster\n";
  cluster.Stop(std::cerr);
  std::cerr << "tandem up: stopped" << (died > 0 ? " (some processes had died, see above)" : "")
            << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = tandem::base::ParseFlags(argc, argv, kUsage);
  if (args.size() < 2) {
    std::cerr << "usage:\n" << kUsage << "\n";
    return 2;
  }
  const std::string command = args[1];
  if (command == "generate") {
    return Generate();
  }
  if (command == "up") {
    if (args.size() != 3) {
      std::cerr << "usage: tandem up CONFIG.yaml\n";
      return 2;
    }
    return Up(args[2]);
  }
  std::cerr << "tandem: unknown command '" << command << "'\nusage:\n" << kUsage << "\n";
  return 2;
}
