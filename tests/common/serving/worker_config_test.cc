// The worker YAML schema (common/serving/worker_config.h) both tandem-decode and
// tandem-prefill load: every key parses, flags (Set) override the file,
// unknown keys and bad values are InvalidArgument naming the key.

#include "common/serving/worker_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace tandem::serving {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

TEST(WorkerConfigTest, DefaultsNeedOnlyAModel) {
  WorkerConfig c;
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model")));
  c.model = "m.gguf";
  EXPECT_OK(c.Validate());
  EXPECT_EQ(c.block_size, 16);
  EXPECT_EQ(c.reservation_deadline, absl::Seconds(30));
  EXPECT_EQ(c.liveness_timeout, absl::Seconds(30));
}

TEST(WorkerConfigTest, YamlSetsEveryKey) {
  WorkerConfig c;
  ASSERT_OK(c.ApplyYaml(R"(
# a decode worker
worker_id: d-1
role: colocated
model: /m/x.gguf
listen: 127.0.0.1:0
advertise: d1.local:7000
metrics_port: 0
metrics_host: 127.0.0.1
tls_ca: /certs/ca.pem
tls_cert: /certs/cluster.pem
tls_key: /certs/cluster.key
allow_insecure_internal: true
threads: 2
kv_cache_bytes: 1048576
kv_blocks: 64
block_size: 32
kv_dtype: f16
prefix_cache: false
chunk_size: 128
token_budget: 256
max_running: 8
max_queued: 10
transport: loopback
transport_mode: am
ucx_tls: tcp
ucx_net_devices: lo
reservation_deadline: 1500ms
drain_grace: 5s
heartbeat_interval: 250ms
liveness_timeout: 45s
)"));
  EXPECT_EQ(c.worker_id, "d-1");
  EXPECT_EQ(c.role, WorkerRole::kColocated);
  EXPECT_EQ(c.model, "/m/x.gguf");
  EXPECT_EQ(c.listen, "127.0.0.1:0");
  EXPECT_EQ(c.AdvertiseAddress(1234), "d1.local:7000");
  EXPECT_EQ(c.metrics_port, 0);
  EXPECT_EQ(c.tls().ca_file, "/certs/ca.pem");
  EXPECT_EQ(c.tls().cert_file, "/certs/cluster.pem");
  EXPECT_EQ(c.tls().key_file, "/certs/cluster.key");
  EXPECT_TRUE(c.allow_insecure_internal);
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.kv_cache_bytes, 1048576);
  EXPECT_EQ(c.kv_blocks, 64);
  EXPECT_EQ(c.block_size, 32);
  EXPECT_EQ(c.kv_dtype, engine::GgmlType::kF16);
  EXPECT_FALSE(c.prefix_cache);
  EXPECT_EQ(c.chunk_size, 128);
  EXPECT_EQ(c.token_budget, 256);
  EXPECT_EQ(c.max_running, 8);
  EXPECT_EQ(c.max_queued, 10);
  EXPECT_EQ(c.transport, "loopback");
  EXPECT_EQ(c.transport_mode, "am");
  EXPECT_EQ(c.ucx_tls, "tcp");
  EXPECT_EQ(c.ucx_net_devices, "lo");
  EXPECT_EQ(c.reservation_deadline, absl::Milliseconds(1500));
  EXPECT_EQ(c.drain_grace, absl::Seconds(5));
  EXPECT_EQ(c.heartbeat_interval, absl::Milliseconds(250));
  EXPECT_EQ(c.liveness_timeout, absl::Seconds(45));
  EXPECT_OK(c.Validate());
  // A flag given on the command line overrides the file.
  ASSERT_OK(c.Set("threads", "1"));
  EXPECT_EQ(c.threads, 1);
  EXPECT_EQ(c.ToEngineConfig().num_threads, 1);
}

// Issue 8: nothing listens beyond loopback by default, and an internal
// listener reachable from elsewhere needs mutual TLS or an explicit opt-out.
TEST(WorkerConfigTest, ListensOnLoopbackByDefault) {
  WorkerConfig c;
  EXPECT_EQ(c.listen, "127.0.0.1:50051");
  EXPECT_EQ(c.metrics_host, "127.0.0.1");
  EXPECT_FALSE(c.tls().enabled());
  EXPECT_FALSE(c.allow_insecure_internal);
}

TEST(WorkerConfigTest, NonLoopbackListenNeedsTlsOrAllowInsecure) {
  WorkerConfig c;
  c.model = "m.gguf";
  for (const char* listen : {"0.0.0.0:50051", "[::]:50051", "10.1.2.3:7001", ":7001"}) {
    c.listen = listen;
    EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       ::testing::AllOf(HasSubstr(listen),
                                                        HasSubstr("allow_insecure_internal"))))
        << listen;
  }
  c.listen = "0.0.0.0:50051";
  ASSERT_OK(c.Set("allow_insecure_internal", "true"));
  EXPECT_OK(c.Validate());
  ASSERT_OK(c.Set("allow_insecure_internal", "false"));
  ASSERT_OK(c.ApplyYaml("tls_ca: ca.pem\ntls_cert: c.pem\ntls_key: c.key\n"));
  EXPECT_OK(c.Validate());  // the files are loaded (and checked) when the server starts
}

TEST(WorkerConfigTest, TlsNeedsAllThreeFiles) {
  WorkerConfig c;
  c.model = "m.gguf";
  ASSERT_OK(c.ApplyYaml("tls_ca: ca.pem\ntls_cert: c.pem\n"));
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tls_key")));
}

TEST(WorkerConfigTest, EveryKeyIsSettable) {
  for (const std::string& key : WorkerConfig::Keys()) {
    WorkerConfig c;
    const absl::Status s = c.Set(key, "zzz-not-a-value");
    // Strings accept anything; typed keys name themselves in the error.
    if (!s.ok()) {
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(key)));
    }
  }
}

TEST(WorkerConfigTest, RejectsUnknownKeysAndBadValues) {
  WorkerConfig c;
  EXPECT_THAT(c.ApplyYaml("modle: x\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown config key 'modle'")));
  EXPECT_THAT(c.ApplyYaml("block_size: big\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("block_size")));
  EXPECT_THAT(c.ApplyYaml("reservation_deadline: 30\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reservation_deadline")));
  EXPECT_THAT(c.ApplyYaml("role: router\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("role")));
  EXPECT_THAT(c.ApplyYaml("threads: [1, 2]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("threads")));
  EXPECT_THAT(c.ApplyYaml("a: [\n"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("YAML")));
  EXPECT_THAT(c.ApplyYaml("- a\n- b\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mapping")));
  EXPECT_THAT(c.ApplyYamlFile("/nonexistent/x.yaml"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("x.yaml")));
}

TEST(WorkerConfigTest, ValidateNamesTheField) {
  WorkerConfig c;
  c.model = "m.gguf";
  c.chunk_size = 0;
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("chunk_size")));
  c.chunk_size = 8;
  c.transport = "rdma";
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("transport")));
  c.transport = "ucx";
  c.reservation_deadline = absl::ZeroDuration();
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reservation_deadline")));
  c.reservation_deadline = absl::Seconds(1);
  c.metrics_port = 70000;
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("metrics_port")));
  c.metrics_port = 0;
  c.liveness_timeout = absl::ZeroDuration();
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("liveness_timeout")));
}

TEST(WorkerConfigTest, AdvertiseAddressUsesTheBoundPort) {
  WorkerConfig c;
  c.listen = "127.0.0.1:0";
  EXPECT_EQ(c.AdvertiseAddress(4321), "127.0.0.1:4321");
  c.role = WorkerRole::kPrefill;
  EXPECT_EQ(c.WorkerId(4321), "prefill@127.0.0.1:4321");
  c.listen = "0.0.0.0:50051";
  EXPECT_THAT(c.AdvertiseAddress(50051), ::testing::EndsWith(":50051"));
  EXPECT_THAT(c.AdvertiseAddress(50051), ::testing::Not(HasSubstr("0.0.0.0")));
}

}  // namespace
}  // namespace tandem::serving
