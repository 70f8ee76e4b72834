#include "router/cli/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "common/base/status_macros.h"
#include "common/engine/model_store.h"
#include "nlohmann/json.hpp"
#include "router/cli/health_client.h"
#include "router/internal/yaml_util.h"

namespace tandem::router::cli {
namespace {

namespace fs = std::filesystem;
using internal::CheckKeys;

std::string Resolve(const std::string& path, absl::string_view base_dir) {
  if (path.empty() || fs::path(path).is_absolute() || base_dir.empty()) {
    return path;
  }
  return (fs::path(std::string(base_dir)) / path).lexically_normal().string();
}

absl::Status ParseRole(const YAML::Node& root, const std::string& key, RoleSpec* out) {
  if (!root[key]) {
    return absl::OkStatus();
  }
  YAML::Node n = root[key];
  RETURN_IF_ERROR(CheckKeys(n, key, {"replicas", "config"}));
  RETURN_IF_ERROR(internal::ReadInt32(n, "replicas", key, &out->replicas));
  if (n["config"]) {
    if (!n["config"].IsMap() && !n["config"].IsNull()) {
      return absl::InvalidArgumentError(absl::StrCat(key, ".config: want a map of worker keys"));
    }
    out->config = YAML::Clone(n["config"]);
  }
  return absl::OkStatus();
}

std::string ExeDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

std::string Tail(const std::string& path, size_t max_bytes = 2000) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > max_bytes ? s.substr(s.size() - max_bytes) : s;
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

std::string Describe(int status) {
  if (WIFEXITED(status)) {
    return absl::StrCat("exited with status ", WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("ended (wait status ", status, ")");
}

// The key=value fields of the line "READY key=value ..." that tandem-router
// and the workers print on stdout (their log) once they serve; nullopt while
// the log has none. Only a whole line counts: the child may be mid-write.
std::optional<std::map<std::string, std::string>> ReadyFields(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line;
  while (std::getline(in, line) && !in.eof()) {
    if (!absl::StartsWith(line, "READY ")) {
      continue;
    }
    std::map<std::string, std::string> fields;
    for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      const std::pair<std::string, std::string> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
      fields[kv.first] = kv.second;
    }
    return fields;
  }
  return std::nullopt;
}

}  // namespace

namespace {

absl::Status ParsePools(const YAML::Node& root, absl::string_view base_dir, ClusterSpec* spec) {
  if (!root || !root.IsMap() || !root["pools"]) {
    return absl::OkStatus();
  }
  for (const char* single : {"model", "prefill", "decode", "colocated"}) {
    if (root[single]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pools: give either pools or the top-level ", single, " (a pool names its model and "
          "workers)"));
    }
  }
  const YAML::Node pools = root["pools"];
  if (!pools.IsSequence()) {
    return absl::InvalidArgumentError(
        "pools: want a list of {name, model, prefill, decode, colocated}");
  }
  for (size_t i = 0; i < pools.size(); ++i) {
    const std::string at = absl::StrCat("pools[", i, "]");
    const YAML::Node n = pools[i];
    RETURN_IF_ERROR(CheckKeys(n, at, {"name", "model", "prefill", "decode", "colocated"}));
    ModelPoolSpec p;
    RETURN_IF_ERROR(internal::ReadString(n, "name", at, &p.name));
    RETURN_IF_ERROR(internal::ReadString(n, "model", at, &p.model));
    if (engine::FindKnownModel(p.model) == nullptr) {  // a model name stays a name
      p.model = Resolve(p.model, base_dir);
    }
    RETURN_IF_ERROR(ParseRole(n, "prefill", &p.prefill));
    RETURN_IF_ERROR(ParseRole(n, "decode", &p.decode));
    RETURN_IF_ERROR(ParseRole(n, "colocated", &p.colocated));
    spec->pools.push_back(std::move(p));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<ModelPoolSpec> ClusterSpec::EffectivePools() const {
  if (!pools.empty()) {
    return pools;
  }
  return {ModelPoolSpec{"", model, prefill, decode, colocated}};
}

namespace {

// `at`: "" for the top-level model, "pools[i]." for a pool.
absl::Status ValidatePool(const ModelPoolSpec& p, const std::string& at) {
  if (p.model.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(at, "model: the GGUF model path is required"));
  }
  for (const auto& [name, r] : {std::pair<const char*, const RoleSpec*>{"prefill", &p.prefill},
                                {"decode", &p.decode},
                                {"colocated", &p.colocated}}) {
    if (r->replicas < 0) {
      return absl::InvalidArgumentError(absl::StrCat(at, name, ".replicas must be >= 0"));
    }
  }
  if ((p.prefill.replicas > 0) != (p.decode.replicas > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        at, "prefill.replicas and ", at,
        "decode.replicas must both be > 0 (disaggregated) or both 0"));
  }
  if (p.prefill.replicas + p.decode.replicas + p.colocated.replicas == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        at, "no workers: set prefill + decode replicas, or colocated replicas"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ClusterSpec::Validate() const {
  const std::vector<ModelPoolSpec> all = EffectivePools();
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string at = pools.empty() ? "" : absl::StrCat("pools[", i, "].");
    RETURN_IF_ERROR(ValidatePool(all[i], at));
    if (!pools.empty() && all[i].name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(at, "name is empty"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (!pools.empty() && all[j].name == all[i].name) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, "name '", all[i].name, "' is used twice"));
      }
    }
  }
  if (restart.max_failures < 0) {
    return absl::InvalidArgumentError("restart.max_failures must be >= 0");
  }
  if (restart.backoff <= absl::ZeroDuration() || restart.max_backoff < restart.backoff) {
    return absl::InvalidArgumentError(
        "restart.backoff must be > 0 and restart.max_backoff >= restart.backoff");
  }
  if (grpc_port < 0 || grpc_port > 65535 || http_port < 0 || http_port > 65535) {
    return absl::InvalidArgumentError("router.grpc_port / router.http_port out of range");
  }
  if (internal_tls == InternalTls::kFiles) {
    RETURN_IF_ERROR(tls_files.Validate("internal_tls.ca", "internal_tls.cert", "internal_tls.key"));
  }
  if (internal_tls == InternalTls::kOff) {
    RETURN_IF_ERROR(proto::CheckInternalAddress("host", absl::StrCat(host, ":0"), false, false));
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterSpec> ParseClusterYaml(absl::string_view yaml, absl::string_view base_dir) {
  ASSIGN_OR_RETURN(YAML::Node root, internal::LoadYaml(yaml));
  RETURN_IF_ERROR(CheckKeys(root, "",
                            {"model", "host", "bin_dir", "log_dir", "health_timeout", "grace",
                             "internal_tls", "restart", "router", "prefill", "decode",
                             "colocated", "pools"}));
  ClusterSpec spec;
  RETURN_IF_ERROR(internal::ReadString(root, "model", "", &spec.model));
  RETURN_IF_ERROR(internal::ReadString(root, "host", "", &spec.host));
  RETURN_IF_ERROR(internal::ReadString(root, "bin_dir", "", &spec.bin_dir));
  RETURN_IF_ERROR(internal::ReadString(root, "log_dir", "", &spec.log_dir));
  RETURN_IF_ERROR(internal::ReadDuration(root, "health_timeout", "", &spec.health_timeout));
  RETURN_IF_ERROR(internal::ReadDuration(root, "grace", "", &spec.grace));
  if (root && root.IsMap() && root["internal_tls"]) {
    const YAML::Node t = root["internal_tls"];
    if (t.IsMap()) {
      RETURN_IF_ERROR(internal::ReadTlsFiles(t, "internal_tls", base_dir, &spec.tls_files));
      spec.internal_tls = InternalTls::kFiles;
    } else {
      std::string mode;
      RETURN_IF_ERROR(internal::ReadString(root, "internal_tls", "", &mode));
      if (mode == "dev") {
        spec.internal_tls = InternalTls::kDev;
      } else if (mode == "off") {
        spec.internal_tls = InternalTls::kOff;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "internal_tls: '", mode, "' (want dev, off or a map {ca, cert, key})"));
      }
    }
  }
  if (root && root.IsMap() && root["restart"]) {
    const YAML::Node r = root["restart"];
    RETURN_IF_ERROR(
        CheckKeys(r, "restart", {"max_failures", "backoff", "max_backoff", "reset_after"}));
    RETURN_IF_ERROR(internal::ReadInt32(r, "max_failures", "restart", &spec.restart.max_failures));
    RETURN_IF_ERROR(internal::ReadDuration(r, "backoff", "restart", &spec.restart.backoff));
    RETURN_IF_ERROR(internal::ReadDuration(r, "max_backoff", "restart", &spec.restart.max_backoff));
    RETURN_IF_ERROR(internal::ReadDuration(r, "reset_after", "restart", &spec.restart.reset_after));
  }
  if (engine::FindKnownModel(spec.model) == nullptr) {  // a model name stays a name
    spec.model = Resolve(spec.model, base_dir);
  }
  spec.bin_dir = Resolve(spec.bin_dir, base_dir);
  spec.log_dir = Resolve(spec.log_dir, base_dir);
  if (root && root.IsMap() && root["router"]) {
    if (!root["router"].IsMap()) {
      return absl::InvalidArgumentError("router: want a map of router config keys");
    }
    spec.router = YAML::Clone(root["router"]);
    RETURN_IF_ERROR(internal::ReadInt32(spec.router, "grpc_port", "router", &spec.grpc_port));
    RETURN_IF_ERROR(internal::ReadInt32(spec.router, "http_port", "router", &spec.http_port));
    spec.router.remove("grpc_port");
    spec.router.remove("http_port");
    for (const char* filled : {"grpc_address", "http_address"}) {
      if (spec.router[filled]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "router.", filled, ": tandem up picks addresses; set router.grpc_port / http_port"));
      }
    }
    if (spec.router["internal_tls"]) {
      return absl::InvalidArgumentError(
          "router.internal_tls: tandem up sets it; use the top-level internal_tls");
    }
    // The router reads its config from the run directory: a relative key
    // file is relative to this file instead, and made absolute.
    std::string keys_file;
    RETURN_IF_ERROR(
        internal::ReadString(spec.router["auth"], "keys_file", "router.auth", &keys_file));
    if (!keys_file.empty()) {
      spec.router["auth"]["keys_file"] = fs::absolute(Resolve(keys_file, base_dir)).string();
    }
  }
  RETURN_IF_ERROR(ParseRole(root, "prefill", &spec.prefill));
  RETURN_IF_ERROR(ParseRole(root, "decode", &spec.decode));
  RETURN_IF_ERROR(ParseRole(root, "colocated", &spec.colocated));
  RETURN_IF_ERROR(ParsePools(root, base_dir, &spec));
  return spec;
}

Cluster::~Cluster() {
  std::ostringstream sink;
  Stop(sink);
}

absl::Status Cluster::Launch(Process& p) {
  std::vector<std::string> argv = {p.binary};
  argv.insert(argv.end(), p.args.begin(), p.args.end());
  std::vector<char*> cargs;
  for (std::string& a : argv) {
    cargs.push_back(a.data());
  }
  cargs.push_back(nullptr);
  const int log_fd = open(p.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::InternalError(absl::StrCat("cannot open ", p.log_path, ": ", strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {  // child: async-signal-safe calls only until exec
    setpgid(0, 0);  // Ctrl-C reaches `tandem` only; it stops the cluster in order
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // and if `tandem` dies, so do we
    if (getppid() != parent) {
      _exit(1);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    execv(cargs[0], cargs.data());
    _exit(127);
  }
  close(log_fd);
  p.pid = pid;
  p.running = true;
  p.ready = false;
  p.started = absl::Now();
  return absl::OkStatus();
}

absl::StatusOr<bool> Cluster::CheckReady(Process& p) {
  std::optional<std::map<std::string, std::string>> ready = ReadyFields(p.log_path);
  if (!ready.has_value()) {
    return false;
  }
  // The router reports grpc_port and http_port, a worker grpc_port and metrics_port.
  const bool is_router = p.name == "router";
  std::string* addresses[] = {&p.grpc_address, is_router ? &p.http_address : &p.metrics_address};
  const char* keys[] = {"grpc_port", is_router ? "http_port" : "metrics_port"};
  for (int i = 0; i < 2; ++i) {
    int port = 0;
    if (!absl::SimpleAtoi((*ready)[keys[i]], &port) || port <= 0 || port > 65535) {
      return absl::InternalError(
          absl::StrCat(p.name, ": no valid ", keys[i], " on its READY line; see ", p.log_path));
    }
    *addresses[i] = absl::StrCat(spec_.host, ":", port);
  }
  p.ready = true;
  return true;
}

absl::Status Cluster::AwaitReady(Process& p, absl::Time give_up, std::ostream& log) {
  while (true) {
    ASSIGN_OR_RETURN(const bool ready, CheckReady(p));
    if (ready) {
      return absl::OkStatus();
    }
    Reap(log);
    if (!p.running) {
      return ExitedError(p, "before printing its READY line");
    }
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat(p.name, " printed no READY line within ",
                                                      absl::FormatDuration(spec_.health_timeout),
                                                      "; see ", p.log_path));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::Status Cluster::ExitedError(const Process& p, absl::string_view when) const {
  return absl::UnavailableError(absl::StrCat(p.name, " ", Describe(p.exit_status), " ", when,
                                             "; its log (", p.log_path, ") ends with:\n",
                                             Tail(p.log_path)));
}

absl::Status Cluster::Start(std::ostream& log) {
  absl::Status s = StartProcesses(log);
  if (!s.ok()) {
    Stop(log);
  }
  return s;
}

absl::Status Cluster::StartProcesses(std::ostream& log) {
  RETURN_IF_ERROR(spec_.Validate());
  const std::vector<ModelPoolSpec> pools = spec_.EffectivePools();
  std::vector<std::string> model_paths;  // per pool, absolute
  for (const ModelPoolSpec& pool : pools) {
    // A model name (smollm2-135m-instruct) is its file in the model cache.
    ASSIGN_OR_RETURN(const std::string model_path, engine::ResolveModelPath(pool.model));
    if (!fs::exists(model_path)) {
      return absl::NotFoundError(absl::StrCat("model ", model_path, " does not exist"));
    }
    model_paths.push_back(fs::absolute(model_path).lexically_normal().string());
  }
  const std::string bin_dir = spec_.bin_dir.empty() ? ExeDir() : spec_.bin_dir;
  std::string run_dir = spec_.log_dir;
  if (run_dir.empty()) {
    std::string templ = (fs::temp_directory_path() / "tandem-up-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("mkdtemp: ", strerror(errno)));
    }
    run_dir = templ;
  } else {
    std::error_code ec;
    fs::create_directories(run_dir, ec);
  }
  RETURN_IF_ERROR(SetUpInternalTls(run_dir, log));

  // Every process listens on port 0 (unless the spec fixes the router's) and
  // reports the ports it bound on its READY line: a port picked here and
  // released before the child binds it can be taken in between (UCX
  // listeners, parallel tests).
  int want_prefill = 0;
  int want_decode = 0;
  int want_colocated = 0;
  for (const ModelPoolSpec& pool : pools) {
    want_prefill += pool.prefill.replicas;
    want_decode += pool.decode.replicas;
    want_colocated += pool.colocated.replicas;
  }
  const int workers = want_prefill + want_decode + want_colocated;
  auto add_workers = [&](const RoleSpec& role, const char* role_name, const char* binary,
                         const std::string& model, const std::string& prefix) {
    for (int i = 0; i < role.replicas; ++i) {
      Process p;
      p.name = absl::StrCat(prefix, role_name, "-", i);
      p.binary = (fs::path(bin_dir) / binary).string();
      YAML::Node c = role.config ? YAML::Clone(role.config) : YAML::Node(YAML::NodeType::Map);
      c["model"] = model;
      c["role"] = role_name;
      c["listen"] = absl::StrCat(spec_.host, ":0");
      c["metrics_host"] = spec_.host;
      c["metrics_port"] = 0;
      c["worker_id"] = p.name;
      if (spec_.tls_files.enabled()) {
        c["tls_ca"] = spec_.tls_files.ca_file;
        c["tls_cert"] = spec_.tls_files.cert_file;
        c["tls_key"] = spec_.tls_files.key_file;
      }
      // UCX's TCP transport listens on every interface UCX_NET_DEVICES
      // allows: on a loopback cluster, only on loopback.
      if (!c["ucx_net_devices"] && proto::IsLoopbackAddress(absl::StrCat(spec_.host, ":0"))) {
        c["ucx_net_devices"] = "lo";
      }
      p.config_path = (fs::path(run_dir) / (p.name + ".yaml")).string();
      p.log_path = (fs::path(run_dir) / (p.name + ".log")).string();
      YAML::Emitter e;
      e << c;
      absl::Status s = WriteFile(p.config_path, std::string(e.c_str()) + "\n");
      if (!s.ok()) {
        return s;
      }
      p.args = {absl::StrCat("--config=", p.config_path)};
      procs_.push_back(std::move(p));
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < pools.size(); ++i) {
    const std::string prefix = pools[i].name.empty() ? "" : absl::StrCat(pools[i].name, "-");
    RETURN_IF_ERROR(
        add_workers(pools[i].prefill, "prefill", "tandem-prefill", model_paths[i], prefix));
    RETURN_IF_ERROR(
        add_workers(pools[i].decode, "decode", "tandem-decode", model_paths[i], prefix));
    RETURN_IF_ERROR(
        add_workers(pools[i].colocated, "colocated", "tandem-decode", model_paths[i], prefix));
  }

  Process router;
  router.name = "router";
  router.binary = (fs::path(bin_dir) / "tandem-router").string();
  router.config_path = (fs::path(run_dir) / "router.yaml").string();
  router.log_path = (fs::path(run_dir) / "router.log").string();
  router.args = {absl::StrCat("--config=", router.config_path)};

  procs_.push_back(std::move(router));  // last, as router() expects; started last
  for (const Process& p : procs_) {
    if (!fs::exists(p.binary)) {
      return absl::NotFoundError(absl::StrCat(p.binary, " does not exist (set bin_dir)"));
    }
  }
  Process& r = procs_.back();
  log << "tandem up: starting " << workers << " worker(s) and a router; logs in " << run_dir
      << "\n";
  const absl::Time give_up = absl::Now() + spec_.health_timeout;
  const auto worker_procs = absl::MakeSpan(procs_).subspan(0, procs_.size() - 1);
  for (Process& p : worker_procs) {
    RETURN_IF_ERROR(base::Annotate(Launch(p), p.name));
  }
  // The router's config needs the workers' addresses: wait for their READY lines.
  std::vector<std::string> worker_addresses;
  for (Process& p : worker_procs) {
    RETURN_IF_ERROR(AwaitReady(p, give_up, log));
    worker_addresses.push_back(p.grpc_address);
  }

  YAML::Node rc = spec_.router ? YAML::Clone(spec_.router) : YAML::Node(YAML::NodeType::Map);
  rc["grpc_address"] = absl::StrCat(spec_.host, ":", spec_.grpc_port);
  rc["http_address"] = absl::StrCat(spec_.host, ":", spec_.http_port);
  if (!rc["models"]) {
    for (size_t i = 0; i < pools.size(); ++i) {
      YAML::Node m;
      m["path"] = model_paths[i];
      if (engine::FindKnownModel(pools[i].model) != nullptr) {
        m["name"] = pools[i].model;  // clients ask for the model by the name the spec gave
      }
      rc["models"].push_back(m);
    }
  }
  for (const std::string& a : worker_addresses) {
    rc["workers"]["static"].push_back(a);
  }
  if (spec_.tls_files.enabled()) {
    rc["internal_tls"]["ca"] = spec_.tls_files.ca_file;
    rc["internal_tls"]["cert"] = spec_.tls_files.cert_file;
    rc["internal_tls"]["key"] = spec_.tls_files.key_file;
  }
  {
    YAML::Emitter e;
    e << rc;
    RETURN_IF_ERROR(WriteFile(r.config_path, std::string(e.c_str()) + "\n"));
  }
  RETURN_IF_ERROR(base::Annotate(Launch(r), r.name));
  RETURN_IF_ERROR(AwaitReady(r, give_up, log));

  // Health: every process answers grpc.health.v1 SERVING.
  for (Process& p : procs_) {
    while (true) {
      Reap(log);
      if (!p.running) {
        return ExitedError(p, "before becoming healthy");
      }
      // The router's gRPC front is public (plaintext); workers speak mTLS.
      const bool is_router = &p == &r;
      if (CheckHealth(p.grpc_address, absl::Seconds(1),
                      is_router ? nullptr : worker_credentials_)
              .ok()) {
        break;
      }
      if (absl::Now() > give_up) {
        return absl::DeadlineExceededError(absl::StrCat(
            p.name, " did not become healthy within ", absl::FormatDuration(spec_.health_timeout),
            "; see ", p.log_path));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  // The router sees every worker.
  httplib::Client http(absl::StrCat("http://", r.http_address));
  http.set_connection_timeout(1);
  while (true) {
    auto res = http.Get("/health");
    if (res && res->status == 200) {
      nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
      if (!j.is_discarded() && j.contains("workers")) {
        const auto& w = j["workers"];
        if (w.value("prefill", 0) == want_prefill && w.value("decode", 0) == want_decode &&
            w.value("colocated", 0) == want_colocated) {
          break;
        }
      }
    }
    Reap(log);
    if (absl::Now() > give_up || !r.running) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the router did not see all ", workers, " workers within ",
          absl::FormatDuration(spec_.health_timeout), "; see ", r.log_path));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::OkStatus();
}

absl::Status Cluster::SetUpInternalTls(const std::string& run_dir, std::ostream& log) {
  if (spec_.internal_tls == InternalTls::kDev) {
    const char* env = std::getenv("TANDEM_SCRIPTS");
    const std::string script =
        env != nullptr && env[0] != 0
            ? (fs::path(env) / "make_dev_ca.sh").string()
            : (fs::path(ExeDir()) / ".." / ".." / "scripts" / "make_dev_ca.sh")
                  .lexically_normal()
                  .string();
    if (!fs::exists(script)) {
      return absl::NotFoundError(absl::StrCat(
          "internal_tls: dev needs ", script,
          " (set TANDEM_SCRIPTS to the folder holding make_dev_ca.sh, or give internal_tls "
          "{ca, cert, key})"));
    }
    const std::string certs = (fs::path(run_dir) / "certs").string();
    const std::string script_log = (fs::path(run_dir) / "make_dev_ca.log").string();
    // SANs: the addresses the router and the prefill workers dial.
    Process p;
    p.name = "make_dev_ca.sh";
    p.binary = "/bin/bash";
    p.args = {script, certs, "127.0.0.1", "::1", "localhost"};
    if (spec_.host != "127.0.0.1" && spec_.host != "::1" && spec_.host != "localhost") {
      p.args.push_back(spec_.host);
    }
    p.log_path = script_log;
    RETURN_IF_ERROR(Launch(p));
    int status = 0;
    waitpid(p.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return absl::InternalError(absl::StrCat(script, " ", Describe(status), "; its output:\n",
                                              Tail(script_log)));
    }
    spec_.tls_files = {(fs::path(certs) / "ca.pem").string(),
                       (fs::path(certs) / "cluster.pem").string(),
                       (fs::path(certs) / "cluster.key").string()};
    log << "tandem up: internal mTLS with a development CA in " << certs << "\n";
  } else if (spec_.internal_tls == InternalTls::kOff) {
    log << "tandem up: internal TLS off (internal_tls: off): workers accept any local caller\n";
  }
  ASSIGN_OR_RETURN(worker_credentials_, proto::MakeChannelCredentials(spec_.tls_files));
  return absl::OkStatus();
}

void Cluster::PrintEndpoints(std::ostream& out) const {
  const Process& r = router();
  out << "tandem up: cluster ready\n"
      << "  router      gRPC " << r.grpc_address << "   HTTP http://" << r.http_address
      << "  (OpenAI base_url http://" << r.http_address << "/v1, metrics http://"
      << r.http_address << "/metrics)  pid " << r.pid << "\n";
  for (const Process& p : procs_) {
    if (p.name == "router") {
      continue;
    }
    out << "  " << p.name << std::string(p.name.size() < 12 ? 12 - p.name.size() : 1, ' ')
        << "gRPC " << p.grpc_address << "   metrics http://" << p.metrics_address
        << "/metrics  pid " << p.pid << "  log " << p.log_path << "\n";
  }
  out << "  try: tandem generate --router " << r.grpc_address
      << (spec_.router["auth"] ? " --api-key <a key from router.auth>" : "")
      << " --prompt \"Once upon a time\"\n"
      << "Ctrl-C stops the cluster.\n";
  out.flush();
}

int Cluster::Reap(std::ostream& log) {
  int died = 0;
  for (Process& p : procs_) {
    if (!p.running) {
      continue;
    }
    int status = 0;
    const pid_t r = waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid) {
      p.running = false;
      p.exit_status = status;
      ++died;
      if (stopped_) {
        continue;
      }
      log << "tandem up: " << p.name << " (pid " << p.pid << ") " << Describe(status)
          << "; see " << p.log_path << "\n";
      if (supervising_) {
        ScheduleRestart(p, log);
      }
      log.flush();
    }
  }
  return died;
}

void Cluster::ScheduleRestart(Process& p, std::ostream& log) {
  const RestartPolicy& policy = spec_.restart;
  const absl::Time now = absl::Now();
  if (p.ready && now - p.started >= policy.reset_after) {
    p.failures = 0;  // it had been up a while: a fresh run of failures
  }
  if (p.failures == 0) {
    p.backoff = policy.backoff;
  }
  ++p.failures;
  if (p.failures > policy.max_failures) {
    p.gave_up = true;
    log << "tandem up: giving up on " << p.name << " after " << policy.max_failures
        << " restart(s) (restart.max_failures): it died each time within "
        << absl::FormatDuration(policy.reset_after) << " of starting; it stays down; see "
        << p.log_path << "\n";
    return;
  }
  p.restart_at = now + p.backoff;
  log << "tandem up: restarting " << p.name << " in " << absl::FormatDuration(p.backoff)
      << " (attempt " << p.failures << " of " << policy.max_failures << ")\n";
  p.backoff = std::min(p.backoff * 2, policy.max_backoff);
}

absl::Status Cluster::PinPorts(const Process& p) const {
  YAML::Node c;
  try {
    c = YAML::LoadFile(p.config_path);
  } catch (const YAML::Exception& e) {
    return absl::InternalError(absl::StrCat("cannot read ", p.config_path, ": ", e.what()));
  }
  if (p.name == "router") {
    c["grpc_address"] = p.grpc_address;
    c["http_address"] = p.http_address;
  } else {
    // The router's static worker list holds this address.
    c["listen"] = p.grpc_address;
    const size_t colon = p.metrics_address.rfind(':');
    int port = 0;
    if (colon != std::string::npos &&
        absl::SimpleAtoi(p.metrics_address.substr(colon + 1), &port)) {
      c["metrics_port"] = port;
    }
  }
  YAML::Emitter e;
  e << c;
  return WriteFile(p.config_path, std::string(e.c_str()) + "\n");
}

void Cluster::Restart(std::ostream& log) {
  const absl::Time now = absl::Now();
  for (Process& p : procs_) {
    if (p.running && !p.ready) {  // restarted, not READY yet
      absl::StatusOr<bool> ready = CheckReady(p);
      if (ready.ok() && *ready) {
        p.ready_by = absl::InfiniteFuture();
        log << "tandem up: " << p.name << " restarted (attempt " << p.failures << "): pid " << p.pid
            << ", gRPC " << p.grpc_address << "\n";
        log.flush();
      } else if (!ready.ok() || now > p.ready_by) {
        log << "tandem up: " << p.name << " (pid " << p.pid << ") "
            << (ready.ok() ? absl::StrCat("printed no READY line within ",
                                          absl::FormatDuration(spec_.health_timeout))
                           : std::string(ready.status().message()))
            << "; killing it\n";
        kill(p.pid, SIGKILL);  // reaped, and counted as a failure, by Reap()
      }
      continue;
    }
    if (p.running || p.gave_up || now < p.restart_at) {
      continue;
    }
    p.restart_at = absl::InfiniteFuture();
    ++p.restarts;
    // Keep the dead process's log beside the new one.
    const std::string kept = absl::StrCat(p.log_path, ".", p.restarts);
    std::error_code ec;
    fs::rename(p.log_path, kept, ec);
    absl::Status s = PinPorts(p);
    if (s.ok()) {
      s = Launch(p);
    }
    if (!s.ok()) {
      log << "tandem up: cannot restart " << p.name << ": " << s << "\n";
      ScheduleRestart(p, log);
      continue;
    }
    p.ready_by = now + spec_.health_timeout;
    log << "tandem up: started " << p.name << " again (pid " << p.pid << "), previous log in "
        << kept << "\n";
    log.flush();
  }
}

int Cluster::Supervise(const std::function<bool()>& should_stop, std::ostream& log) {
  int died = 0;
  supervising_ = true;
  while (!should_stop()) {
    died += Reap(log);
    Restart(log);
  }
  died += Reap(log);
  supervising_ = false;
  return died;
}

void Cluster::Stop(std::ostream& log) {
  if (stopped_) {
    return;
  }
  stopped_ = true;
  auto term_and_wait = [&](bool router) {
    for (Process& p : procs_) {
      if (p.running && (p.name == "router") == router) {
        kill(p.pid, SIGTERM);
      }
    }
    const absl::Time give_up = absl::Now() + spec_.grace;
    while (absl::Now() < give_up) {
      bool any = false;
      for (Process& p : procs_) {
        if (p.running && (p.name == "router") == router) {
          int status = 0;
          if (waitpid(p.pid, &status, WNOHANG) == p.pid) {
            p.running = false;
            p.exit_status = status;
            log << "tandem up: " << p.name << " stopped (" << Describe(status) << ")\n";
          } else {
            any = true;
          }
        }
      }
      if (!any) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    for (Process& p : procs_) {
      if (p.running && (p.name == "router") == router) {
        log << "tandem up: " << p.name << " did not stop within "
            << absl::FormatDuration(spec_.grace) << "; killing it\n";
        kill(p.pid, SIGKILL);
        int status = 0;
        waitpid(p.pid, &status, 0);
        p.running = false;
        p.exit_status = status;
      }
    }
  };
  term_and_wait(/*router=*/true);   // stop admitting first
  term_and_wait(/*router=*/false);
  log.flush();
}

}  // namespace tandem::router::cli
