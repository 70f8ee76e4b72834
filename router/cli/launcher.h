#pragma once
// `tandem up CONFIG`: a whole cluster on one machine. Starts N prefill and M
// decode (or K colocated) workers and a router on loopback from one YAML
// file, each listening on port 0 and reporting the ports it bound on its
// READY line (the workers first: the router's config lists their addresses),
// waits until every process answers grpc.health.v1 and the router sees every
// worker, prints the endpoints, restarts a process that dies (on the ports it
// had, so the router's static worker list, and clients, still reach it; with
// exponential backoff; giving up after `restart.max_failures` rapid failures
// in a row), and on SIGINT / SIGTERM stops everything without restarts
// (router first, then workers; SIGKILL after the grace period).
//
// Cluster YAML (paths relative to the file):
//
//   model: ../../../shared/models/stories260K/stories260K.gguf   # required: a GGUF path, or a
//                                                                #   model name (docs/models.md)
//   host: 127.0.0.1                 # where everything listens
//   bin_dir: ""                     # tandem-router / -prefill / -decode; "" = next to `tandem`
//   log_dir: ""                     # per-process logs; "" = a fresh temp dir
//   health_timeout: 120s            # for the whole cluster to come up
//   grace: 15s                      # shutdown: SIGTERM -> SIGKILL
//   internal_tls: dev               # mutual TLS between router and workers (docs/security.md):
//                                   #   dev: a development CA and cluster certificate made
//                                   #   in <log dir>/certs by scripts/make_dev_ca.sh (found
//                                   #   as $TANDEM_SCRIPTS/make_dev_ca.sh, else
//                                   #   <tandem binary>/../../scripts/make_dev_ca.sh);
//                                   #   {ca: , cert: , key: }: these PEM files;
//                                   #   off: plaintext (allowed on a loopback host only)
//   restart:                        # a process that dies is started again
//     max_failures: 5               #   rapid failures in a row, then give up (0 = never restart)
//     backoff: 500ms                #   before the first restart, doubling each time ...
//     max_backoff: 30s              #   ... up to this
//     reset_after: 60s              #   up this long: the next failure counts as the first
//   router:                         # router/config.h keys; tandem up fills in
//     grpc_port: 0                  #   grpc_address / http_address (0 = any free port),
//     http_port: 0                  #   models (from `model`) and workers.static
//     mode: auto
//     limits: {max_inflight: 64}
//     auth: {keys_file: keys.yaml}  #   relative to this file (router/auth.h)
//   prefill:   {replicas: 1, config: {...}}   # config: worker keys (common/serving/worker_config.h)
//   decode:    {replicas: 1, config: {...}}   #   passed through; tandem up sets model, role,
//   colocated: {replicas: 0, config: {...}}   #   listen, metrics_port, worker_id and
//                                             #   tls_*; ucx_net_devices defaults to "lo"
//                                             #   on a loopback host (UCX's TCP listens
//                                             #   on loopback only)
//   pools:                          # instead of model + prefill/decode/colocated: several
//     - name: small                 #   models, each with its own workers (worker names
//       model: qwen2.5-coder-0.5b-instruct   # small-prefill-0, ...); the router serves
//       prefill: {replicas: 1, config: {...}} # every pool's model (complexity routing
//       decode: {replicas: 1, config: {...}}  # between them: router.routing, router/config.h)
//
// Library code for the `tandem` binary (tests drive it as a subprocess).
// Not thread-safe: one thread runs Start / Supervise / Stop.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/tls_credentials.h"
#include "yaml-cpp/yaml.h"

namespace tandem::router::cli {

struct RoleSpec {
  int32_t replicas = 0;
  YAML::Node config;   // worker config keys, passed through
};

struct RestartPolicy {
  int32_t max_failures = 5;
  absl::Duration backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(30);
  absl::Duration reset_after = absl::Seconds(60);
};

enum class InternalTls { kDev, kFiles, kOff };

// One model and its workers (`pools:`).
struct ModelPoolSpec {
  std::string name;             // prefixes its workers' names; required
  std::string model;            // as ClusterSpec::model
  RoleSpec prefill;
  RoleSpec decode;
  RoleSpec colocated;
};

struct ClusterSpec {
  std::string model;            // a model name, or a path (absolute or relative to the cwd)
  std::string host = "127.0.0.1";
  InternalTls internal_tls = InternalTls::kDev;
  proto::TlsFiles tls_files;    // kFiles: as given; kDev: filled in by Start()
  std::string bin_dir;
  std::string log_dir;
  absl::Duration health_timeout = absl::Seconds(120);
  absl::Duration grace = absl::Seconds(15);
  RestartPolicy restart;
  int grpc_port = 0;
  int http_port = 0;
  YAML::Node router;            // router config keys, passed through
  RoleSpec prefill;
  RoleSpec decode;
  RoleSpec colocated;
  // Several models (`pools:`); empty: the one `model` with the roles above.
  std::vector<ModelPoolSpec> pools;

  // The pools to start: `pools`, or one unnamed pool of `model` and the roles.
  std::vector<ModelPoolSpec> EffectivePools() const;

  // InvalidArgument naming the field: no model, no workers, prefill without
  // decode (or the reverse), negative replicas, a bad restart policy;
  // FailedPrecondition for internal_tls off on a non-loopback host.
  absl::Status Validate() const;
};

// Parses the YAML above; relative paths are resolved against `base_dir`.
absl::StatusOr<ClusterSpec> ParseClusterYaml(absl::string_view yaml, absl::string_view base_dir);

class Cluster {
 public:
  struct Process {
    std::string name;           // "router", "prefill-0", "decode-1", ...
    std::string binary;
    std::vector<std::string> args;
    std::string grpc_address;   // host:port
    std::string http_address;   // router only
    std::string metrics_address;
    std::string config_path;
    std::string log_path;
    pid_t pid = -1;
    bool running = false;
    int exit_status = 0;
    // Supervision.
    bool ready = false;          // printed its READY line since it was (re)started
    absl::Time started = absl::InfinitePast();
    absl::Time ready_by = absl::InfiniteFuture();     // restarted: killed if not READY by then
    absl::Time restart_at = absl::InfiniteFuture();   // dead: started again at this time
    absl::Duration backoff;      // the wait before the next restart
    int failures = 0;            // rapid failures in a row
    int restarts = 0;            // restarts so far
    bool gave_up = false;        // too many rapid failures: left dead
  };

  explicit Cluster(ClusterSpec spec) : spec_(std::move(spec)) {}
  ~Cluster();  // Stop()s

  // Writes the configs, starts every process and waits (spec.health_timeout
  // in all) until all are healthy and the router sees all workers. A process
  // that exits first is an Unavailable error naming it and quoting its log.
  // On error the processes started are stopped.
  absl::Status Start(std::ostream& log);
  // The endpoints, one process per line.
  void PrintEndpoints(std::ostream& out) const;
  // Runs until `should_stop()` returns true (call it often: it is the loop's
  // wait); reports processes that exit and restarts them (spec.restart).
  // Returns how many processes died on their own.
  int Supervise(const std::function<bool()>& should_stop, std::ostream& log);
  // SIGTERM to the router, then workers; SIGKILL after spec.grace. Idempotent.
  void Stop(std::ostream& log);

  const std::vector<Process>& processes() const { return procs_; }
  const Process& router() const { return procs_.back(); }

 private:
  absl::Status StartProcesses(std::ostream& log);  // Start() less the Stop() on error
  // Starts `p`: stdout and stderr to its log file.
  absl::Status Launch(Process& p);
  // Waits until `p`'s log holds its READY line and sets its addresses from the
  // ports there (grpc_port; the router's http_port, a worker's metrics_port).
  // Read from the log file rather than a stdout pipe: no thread has to drain
  // a pipe after READY, and the log keeps stdout and stderr in order.
  absl::Status AwaitReady(Process& p, absl::Time give_up, std::ostream& log);
  // Unavailable: `p` exited (`when`), with the end of its log.
  absl::Status ExitedError(const Process& p, absl::string_view when) const;
  // Reaps exited children; reports each once. While supervising, schedules
  // the restart of each (or gives up on it).
  int Reap(std::ostream& log);
  // Whether `p` has printed its READY line; if so sets its addresses from it.
  absl::StatusOr<bool> CheckReady(Process& p);
  // `p` died on its own: schedules its restart with backoff, or gives up.
  void ScheduleRestart(Process& p, std::ostream& log);
  // Starts the processes whose restart is due, on their previous ports, and
  // reports the restarted ones that became ready (or kills those too late).
  void Restart(std::ostream& log);
  // Rewrites `p`'s config to listen on the ports it had bound.
  absl::Status PinPorts(const Process& p) const;
  // Sets spec_.tls_files (kDev: runs scripts/make_dev_ca.sh into
  // `run_dir`/certs) and worker_credentials_.
  absl::Status SetUpInternalTls(const std::string& run_dir, std::ostream& log);

  ClusterSpec spec_;
  // Health checks of the workers (mutual TLS unless internal_tls is off).
  std::shared_ptr<grpc::ChannelCredentials> worker_credentials_;
  std::vector<Process> procs_;   // workers first, the router last
  bool stopped_ = false;
  bool supervising_ = false;
};

}  // namespace tandem::router::cli
