// libFuzzer harness for the internal gRPC handlers of the real workers: a
// DecodeWorker and a PrefillWorker (stories260K, LoopbackTransport) start
// once in this process, and each input is one call through the generated
// stubs over 127.0.0.1 with a short deadline.
//
// Input: byte 0 picks the call (value % 7), the rest is the request
// message (skipped if it does not parse):
//   0 Decode.Reserve(ReserveRequest)    reads the first event, then cancels
//   1 Decode.Commit(CommitRequest)
//   2 Decode.Cancel(CancelRequest)
//   3 Decode.Generate(DecodeSubmit)     reads a few responses, then cancels
//   4 Prefill.Prefill(PrefillRequest)
//   5 a real Reserve, then Decode.Commit(CommitRequest) for its request id
//   6 a real Reserve, then Prefill.Prefill(PrefillRequest) whose reservation
//     is the real one with the input's fields merged over it
// A reservation's decode_worker is always the real decode worker: the
// prefill worker dials that address, and the harness dials nothing else.
//
// Every kCheckEvery inputs, and at exit, both workers must go back to idle
// (nothing running, queued or reserved, no KV block in use) within
// kIdleBound: a handler that leaks a block or a request aborts the run.

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/logging.h"
#include "common/serving/worker_config.h"
#include "decode_worker/decode_worker.h"
#include "prefill_worker/prefill_worker.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/fuzz/fuzz_util.h"

namespace tandem {
namespace {

using tandem::v1::CancelRequest;
using tandem::v1::CommitRequest;
using tandem::v1::DecodeEvent;
using tandem::v1::DecodeSubmit;
using tandem::v1::GenerateResponse;
using tandem::v1::KvReservation;
using tandem::v1::PrefillRequest;
using tandem::v1::ReserveRequest;

constexpr int kCheckEvery = 1000;
constexpr auto kCallDeadline = std::chrono::seconds(2);
constexpr int kMaxStreamReads = 8;
// Reservations ended without an abort are fenced until their deadline; the
// idle check waits that out.
constexpr absl::Duration kReservationDeadline = absl::Seconds(1);
constexpr absl::Duration kIdleBound = absl::Seconds(15);

serving::WorkerConfig Config(serving::WorkerRole role) {
  serving::WorkerConfig c;
  c.role = role;
  c.model = fuzz::SharedFile("models/stories260K/stories260K.gguf");
  c.listen = "127.0.0.1:0";
  c.metrics_port = -1;
  c.threads = 1;
  c.kv_blocks = 512;
  c.max_queued = 64;
  c.transport = "loopback";
  c.reservation_deadline = kReservationDeadline;
  return c;
}

class Cluster {
 public:
  Cluster() {
    auto d = decode_worker::DecodeWorker::Create(Config(serving::WorkerRole::kDecode));
    fuzz::Require(d.ok(), "the decode worker starts (is ../shared/models there?)");
    decode_ = std::move(*d);
    auto p = prefill_worker::PrefillWorker::Create(Config(serving::WorkerRole::kPrefill));
    fuzz::Require(p.ok(), "the prefill worker starts");
    prefill_ = std::move(*p);
    decode_address_ = AddressOf(decode_->server().grpc_port());
    decode_stub_ = tandem::v1::Decode::NewStub(
        grpc::CreateChannel(decode_address_, grpc::InsecureChannelCredentials()));
    prefill_stub_ = tandem::v1::Prefill::NewStub(grpc::CreateChannel(
        AddressOf(prefill_->server().grpc_port()), grpc::InsecureChannelCredentials()));
  }

  void Run(int method, const uint8_t* data, size_t size) {
    switch (method) {
      case 0:
        Parsed<ReserveRequest>(data, size, [&](const ReserveRequest& r) { Reserve(r, nullptr); });
        break;
      case 1:
        Parsed<CommitRequest>(data, size, [&](const CommitRequest& r) { Commit(r); });
        break;
      case 2:
        Parsed<CancelRequest>(data, size, [&](const CancelRequest& r) { Cancel(r); });
        break;
      case 3:
        Parsed<DecodeSubmit>(data, size, [&](const DecodeSubmit& r) { Generate(r); });
        break;
      case 4:
        Parsed<PrefillRequest>(data, size, [&](PrefillRequest r) { Prefill(std::move(r)); });
        break;
      case 5:
        Parsed<CommitRequest>(data, size, [&](CommitRequest r) { CommitLive(std::move(r)); });
        break;
      default:
        Parsed<PrefillRequest>(data, size, [&](PrefillRequest r) { PrefillLive(std::move(r)); });
        break;
    }
    if (++inputs_ % kCheckEvery == 0) {
      CheckIdle();
    }
  }

  // Both workers idle: no request, reservation or KV block left behind.
  void CheckIdle() {
    const absl::Time until = absl::Now() + kIdleBound;
    while (true) {
      const decode_worker::LoadInfo d = decode_->load();
      const prefill_worker::PrefillLoad p = prefill_->load();
      const bool idle = d.running == 0 && d.waiting == 0 && d.reserved == 0 && d.fenced == 0 &&
                        d.used_blocks == 0 && p.running == 0 && p.waiting == 0 &&
                        p.used_blocks == 0;
      if (idle) {
        return;
      }
      if (absl::Now() > until) {
        std::fprintf(stderr,
                     "workers not idle after %s: decode running %d waiting %d reserved %d "
                     "fenced %d used_blocks %d; prefill running %d waiting %d used_blocks %d\n",
                     absl::FormatDuration(kIdleBound).c_str(), d.running, d.waiting, d.reserved,
                     d.fenced, d.used_blocks, p.running, p.waiting, p.used_blocks);
        std::abort();
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

 private:
  static std::string AddressOf(int port) { return "127.0.0.1:" + std::to_string(port); }

  template <typename Msg, typename Fn>
  static void Parsed(const uint8_t* data, size_t size, Fn fn) {
    Msg msg;
    if (msg.ParseFromArray(data, static_cast<int>(size))) {
      fn(std::move(msg));
    }
  }

  static void SetDeadline(grpc::ClientContext& ctx) {
    ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  }

  // Reads the first event (the reservation, when the request is admitted)
  // into `*out`, then cancels the stream unless `out` keeps it open:
  // returns the context so the caller cancels it after using the reservation.
  std::unique_ptr<grpc::ClientContext> Reserve(const ReserveRequest& request, KvReservation* out) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    SetDeadline(*ctx);
    auto reader = decode_stub_->Reserve(ctx.get(), request);
    DecodeEvent ev;
    if (reader->Read(&ev) && ev.has_reservation() && out != nullptr) {
      *out = ev.reservation();
      reader_ = std::move(reader);
      return ctx;
    }
    ctx->TryCancel();
    while (reader->Read(&ev)) {
    }
    (void)reader->Finish();
    return nullptr;
  }

  // Ends a stream Reserve kept open: reads what is left, cancelled.
  void EndReserve(std::unique_ptr<grpc::ClientContext> ctx) {
    ctx->TryCancel();
    DecodeEvent ev;
    while (reader_->Read(&ev)) {
    }
    (void)reader_->Finish();
    reader_.reset();
  }

  void Commit(const CommitRequest& request) {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    tandem::v1::CommitResponse response;
    (void)decode_stub_->Commit(&ctx, request, &response);
  }

  void Cancel(const CancelRequest& request) {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    tandem::v1::CancelResponse response;
    (void)decode_stub_->Cancel(&ctx, request, &response);
  }

  void Generate(const DecodeSubmit& request) {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    auto reader = decode_stub_->Generate(&ctx, request);
    GenerateResponse r;
    for (int i = 0; i < kMaxStreamReads && reader->Read(&r); ++i) {
    }
    ctx.TryCancel();
    while (reader->Read(&r)) {
    }
    (void)reader->Finish();
  }

  void Prefill(PrefillRequest request) {
    if (request.has_reservation()) {
      request.mutable_reservation()->set_decode_worker(decode_address_);
    }
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    tandem::v1::PrefillResponse response;
    (void)prefill_stub_->Prefill(&ctx, request, &response);
  }

  // A valid reservation to aim at: a 20-token prompt.
  std::unique_ptr<grpc::ClientContext> LiveReservation(KvReservation* out) {
    ReserveRequest r;
    r.mutable_request()->set_max_tokens(4);
    for (int i = 0; i < 20; ++i) r.mutable_request()->add_prompt_ids(1 + i * 7);
    auto ctx = Reserve(r, out);
    fuzz::Require(ctx != nullptr, "a valid Reserve gets a reservation");
    live_request_ = r.request();
    live_request_.set_request_id(out->request_id());
    return ctx;
  }

  void CommitLive(CommitRequest request) {
    KvReservation reservation;
    auto ctx = LiveReservation(&reservation);
    request.set_request_id(reservation.request_id());
    Commit(request);
    EndReserve(std::move(ctx));
  }

  void PrefillLive(PrefillRequest request) {
    KvReservation reservation;
    auto ctx = LiveReservation(&reservation);
    reservation.MergeFrom(request.reservation());
    *request.mutable_reservation() = std::move(reservation);
    if (!request.has_request()) {
      *request.mutable_request() = live_request_;
    }
    Prefill(std::move(request));
    EndReserve(std::move(ctx));
  }

  std::unique_ptr<decode_worker::DecodeWorker> decode_;
  std::unique_ptr<prefill_worker::PrefillWorker> prefill_;
  std::string decode_address_;
  std::unique_ptr<tandem::v1::Decode::Stub> decode_stub_;
  std::unique_ptr<tandem::v1::Prefill::Stub> prefill_stub_;
  std::unique_ptr<grpc::ClientReader<DecodeEvent>> reader_;  // the live Reserve stream
  DecodeSubmit live_request_;
  int64_t inputs_ = 0;
};

// Never destroyed: libFuzzer exits from its own thread without unwinding.
Cluster* TheCluster() {
  static Cluster* c = new Cluster();
  return c;
}

}  // namespace
}  // namespace tandem

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FLAGS_minloglevel = google::GLOG_WARNING;  // no line per request: they would drown the fuzzer's
  tandem::TheCluster();
  std::atexit([] { tandem::TheCluster()->CheckIdle(); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  tandem::TheCluster()->Run(data[0] % 7, data + 1, size - 1);
  return 0;
}
