// KV transfer throughput between two processes over UcxTransport, on a
// TinyLlama-shaped pool (22 layers, 4 KV heads of 64, blocks of 16 tokens,
// F16: 8 KiB per block of one layer's K or V).
//
//   BM_KvTransfer_<tls>_<mode>/<blocks>
//     One transfer = the K and V of `blocks` contiguous blocks of every layer:
//     22 * 2 = 44 ops of blocks * 8 KiB (CoalesceRuns), one Write(), timed
//     until its done (put: after the flush; am: all sends complete, then the
//     flush), transfers back to back. bytes_per_second is KV bytes moved.
//   tls: sm (sysv/posix + cma) or tcp (on lo); mode: put or am into a pool
//   the receiver allocated itself (RegisterRegion), or auto_alloc: auto mode
//   into a pool from the receiver's AllocateRegion (UCX shared memory when
//   it can: auto then puts over sm, sends over tcp). The label names the
//   lanes' transports and what auto chose.
//
// The receiver is this binary re-executed with --kvt_receiver (it makes a
// pool for 256 blocks and waits); the sender is the benchmark process.
//   BM_KvTransferMemcpyBaseline/<blocks>: the same copies as one local memcpy
//   loop, the bound for puts into shared memory.
// Compare with ucx_perftest on the same transport (docs/benchmarks.md).

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "common/engine/format/ggml_type.h"
#include "kvtransfer/kv_layout.h"
#include "kvtransfer/transport.h"
#include "kvtransfer/ucx_transport.h"
#include "tests/testing/child_process.h"
#include "tests/testing/peer_protocol.h"

namespace tandem::kvtransfer {
namespace {

constexpr int32_t kPoolBlocks = 256;

KvLayout TinyLlamaLayout() {
  KvLayout l;
  l.num_layers = 22;
  l.num_kv_heads = 4;
  l.head_dim = 64;
  l.block_size = 16;
  l.dtype = engine::GgmlType::kF16;
  return l;
}

PoolGeometry Pool() {
  PoolGeometry g;
  g.layout = TinyLlamaLayout();
  g.num_blocks = kPoolBlocks;
  return g;
}

TransportConfig Config(const std::string& tls, const std::string& mode) {
  TransportConfig c;
  c.kind = "ucx";
  c.mode = mode;
  c.ucx_tls = tls;
  c.ucx_net_devices = tls == "tcp" ? "lo" : "";
  return c;
}

// The receiving process: registers a pool and waits for end of input.
int ReceiverMain(const std::string& tls, bool allocate) {
  auto transport = UcxTransport::Create(Config(tls, "auto"));
  if (!transport.ok()) {
    std::cerr << "receiver: " << transport.status() << "\n";
    return 1;
  }
  std::vector<uint8_t> pool;
  absl::StatusOr<RegionDescriptor> desc;
  if (allocate) {
    absl::StatusOr<AllocatedRegion> region = (*transport)->AllocateRegion(Pool().pool_bytes());
    desc = region.ok() ? absl::StatusOr<RegionDescriptor>(region->descriptor) : region.status();
  } else {
    pool.assign(Pool().pool_bytes(), 0);
    desc = (*transport)->RegisterRegion(pool.data(), pool.size());
  }
  if (!desc.ok()) {
    std::cerr << "receiver: " << desc.status() << "\n";
    return 1;
  }
  std::cout << testing::DescriptorLine(*desc) << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

// One receiver process per (tls, pool kind), one sender transport per mode,
// kept for the whole run.
struct Setup {
  std::unique_ptr<tandem::testing::ChildProcess> receiver;
  RegionDescriptor peer;
  std::map<std::string, std::unique_ptr<UcxTransport>> senders;  // by mode
  std::vector<uint8_t> source;
};

std::string& SelfPath() {
  static std::string* path = new std::string;
  return *path;
}

Setup* GetSetup(const std::string& tls, bool allocate, std::string* error) {
  static auto* setups = new std::map<std::string, std::unique_ptr<Setup>>;
  const std::string key = absl::StrCat(tls, allocate ? "/alloc" : "/register");
  auto it = setups->find(key);
  if (it != setups->end()) {
    return it->second.get();
  }
  auto setup = std::make_unique<Setup>();
  tandem::testing::ChildOptions options;
  options.argv = {SelfPath(), "--kvt_receiver", tls, allocate ? "alloc" : "register"};
  options.stdin_pipe = true;  // the receiver runs until its stdin closes
  auto p = tandem::testing::ChildProcess::Start(std::move(options));
  if (!p.ok()) {
    *error = p.status().ToString();
    return nullptr;
  }
  setup->receiver = std::move(*p);
  auto line = setup->receiver->ReadLine();
  if (!line.ok() || !testing::ParseDescriptorLine(*line, &setup->peer)) {
    *error = absl::StrCat("receiver: ", line.ok() ? *line : line.status().ToString());
    return nullptr;
  }
  setup->source.resize(Pool().pool_bytes());
  testing::FillPattern(setup->source.data(), setup->source.size(), 1);
  Setup* raw = setup.get();
  (*setups)[key] = std::move(setup);
  return raw;
}

void BM_KvTransfer(benchmark::State& state, const std::string& tls, const std::string& mode,
                   bool allocate) {
  std::string error;
  Setup* setup = GetSetup(tls, allocate, &error);
  if (setup == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  std::unique_ptr<UcxTransport>& sender = setup->senders[mode];
  if (sender == nullptr) {
    auto t = UcxTransport::Create(Config(tls, mode));
    if (!t.ok()) {
      state.SkipWithError(t.status().ToString().c_str());
      return;
    }
    sender = std::move(*t);
    if (absl::Status s = sender->RegisterSource(setup->source.data(), setup->source.size());
        !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
  }
  const int32_t blocks = static_cast<int32_t>(state.range(0));
  std::vector<int32_t> ids(blocks);
  for (int32_t i = 0; i < blocks; ++i) {
    ids[i] = i;
  }
  std::vector<WriteOp> ops;
  const PoolGeometry pool = Pool();
  for (int32_t layer = 0; layer < pool.layout.num_layers; ++layer) {
    for (int kv = 0; kv < 2; ++kv) {
      auto run = CoalesceRuns(pool, setup->source.data(), pool, layer, kv, ids, ids);
      if (!run.ok()) {
        state.SkipWithError(run.status().ToString().c_str());
        return;
      }
      ops.insert(ops.end(), run->begin(), run->end());
    }
  }
  uint64_t bytes = 0;
  for (const WriteOp& op : ops) {
    bytes += op.bytes;
  }
  TransferTag tag = 0;
  for (auto _ : state) {
    absl::Notification done;
    absl::Status result;
    const absl::Status s = sender->Write(setup->peer, ++tag, ops, [&](absl::Status st) {
      result = std::move(st);
      done.Notify();
    });
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
    done.WaitForNotification();
    if (!result.ok()) {
      state.SkipWithError(result.ToString().c_str());
      return;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["ops"] = static_cast<double>(ops.size());
  state.counters["op_bytes"] = static_cast<double>(ops.empty() ? 0 : ops[0].bytes);
  const Capabilities caps = sender->capabilities();
  state.SetLabel(absl::StrCat(caps.transports, caps.native_put ? " put" : " am"));
}

// The same 44 copies as a local memcpy: what the memory system allows for a
// transfer of this footprint (the bound for puts into mapped shared memory).
void BM_KvTransferMemcpyBaseline(benchmark::State& state) {
  const PoolGeometry pool = Pool();
  static std::vector<uint8_t>* src = new std::vector<uint8_t>(pool.pool_bytes(), 1);
  static std::vector<uint8_t>* dst = new std::vector<uint8_t>(pool.pool_bytes(), 0);
  const int32_t blocks = static_cast<int32_t>(state.range(0));
  std::vector<int32_t> ids(blocks);
  for (int32_t i = 0; i < blocks; ++i) {
    ids[i] = i;
  }
  std::vector<WriteOp> ops;
  for (int32_t layer = 0; layer < pool.layout.num_layers; ++layer) {
    for (int kv = 0; kv < 2; ++kv) {
      auto run = CoalesceRuns(pool, src->data(), pool, layer, kv, ids, ids);
      ops.insert(ops.end(), run->begin(), run->end());
    }
  }
  uint64_t bytes = 0;
  for (auto _ : state) {
    bytes = 0;
    for (const WriteOp& op : ops) {
      std::memcpy(dst->data() + op.remote_offset, op.src, op.bytes);
      bytes += op.bytes;
    }
    benchmark::DoNotOptimize(dst->data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}
BENCHMARK(BM_KvTransferMemcpyBaseline)->Arg(1)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond);

void RegisterAll() {
  for (const std::string tls : {"sm", "tcp"}) {
    for (const std::string mode : {"put", "am", "auto_alloc"}) {
      const bool allocate = mode == "auto_alloc";
      const std::string transport_mode = allocate ? "auto" : mode;
      benchmark::RegisterBenchmark(absl::StrCat("BM_KvTransfer_", tls, "_", mode).c_str(),
                                   [tls, transport_mode, allocate](benchmark::State& st) {
                                     BM_KvTransfer(st, tls, transport_mode, allocate);
                                   })
          ->Arg(1)
          ->Arg(16)
          ->Arg(256)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace
}  // namespace tandem::kvtransfer

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--kvt_receiver") {
    return tandem::kvtransfer::ReceiverMain(argv[2], std::string(argv[3]) == "alloc");
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  tandem::kvtransfer::SelfPath() = n > 0 ? std::string(self, n) : std::string(argv[0]);
  tandem::kvtransfer::RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
