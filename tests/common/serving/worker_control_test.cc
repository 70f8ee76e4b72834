// WorkerControlService's lifecycle without a gRPC server: Shutdown from many
// threads at once notifies and joins the heartbeat thread exactly once (a
// second Notify is fatal in absl::Notification; a second join throws). And,
// over a loopback gRPC server, block events: a stream's snapshot carries the
// whole set of block names, changes follow as KvBlockEvents.

#include "common/serving/worker_control.h"

#include <atomic>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::serving {
namespace {

TEST(WorkerControlServiceTest, ConcurrentShutdownsEndTheHeartbeatOnce) {
  for (int round = 0; round < 20; ++round) {
    WorkerControlService service(tandem::v1::WorkerSnapshot(), absl::Milliseconds(1));
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
      threads.emplace_back([&] {
        while (!go.load()) {
        }
        service.Shutdown();
      });
    }
    go.store(true);
    for (std::thread& t : threads) {
      t.join();
    }
    service.Shutdown();  // and once more after all of them: a no-op
    EXPECT_EQ(service.num_watchers(), 0);
  }
}

using ::testing::ElementsAre;
using ::testing::IsEmpty;

engine::KvBlockEvents Blocks(bool resync, std::vector<uint64_t> added,
                             std::vector<uint64_t> removed = {}) {
  engine::KvBlockEvents ev;
  ev.resync = resync;
  ev.added = std::move(added);
  ev.removed = std::move(removed);
  return ev;
}

// The first event of a new Watch stream (a snapshot) and its reader.
struct Watch {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<tandem::v1::WorkerEvent>> reader;
  tandem::v1::WorkerEvent first;
};

std::unique_ptr<Watch> StartWatch(tandem::v1::Control::Stub& stub) {
  auto w = std::make_unique<Watch>();
  w->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  w->reader = stub.Watch(&w->ctx, tandem::v1::WatchRequest());
  EXPECT_TRUE(w->reader->Read(&w->first));
  return w;
}

TEST(WorkerControlServiceTest, SnapshotCarriesTheBlockSetAndChangesFollow) {
  WorkerControlService service(tandem::v1::WorkerSnapshot(), absl::Seconds(60));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = tandem::v1::Control::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));

  service.PublishBlocks(Blocks(true, {30, 10, 20}));
  std::unique_ptr<Watch> early = StartWatch(*stub);
  ASSERT_TRUE(early->first.has_snapshot());
  EXPECT_THAT(early->first.snapshot().cached_block_hashes(), ElementsAre(10u, 20u, 30u));

  service.PublishBlocks(Blocks(false, {40}, {10}));
  tandem::v1::WorkerEvent ev;
  ASSERT_TRUE(early->reader->Read(&ev));
  ASSERT_TRUE(ev.has_blocks()) << ev.DebugString();
  EXPECT_FALSE(ev.blocks().resync());
  EXPECT_THAT(ev.blocks().added(), ElementsAre(40u));
  EXPECT_THAT(ev.blocks().removed(), ElementsAre(10u));
  EXPECT_THAT(service.cached_block_hashes(), ElementsAre(20u, 30u, 40u));

  // A watcher that joins later starts from the set as it is now.
  std::unique_ptr<Watch> late = StartWatch(*stub);
  EXPECT_THAT(late->first.snapshot().cached_block_hashes(), ElementsAre(20u, 30u, 40u));
  // A resync replaces the set.
  service.PublishBlocks(Blocks(true, {50}));
  ASSERT_TRUE(late->reader->Read(&ev));
  EXPECT_TRUE(ev.blocks().resync());
  EXPECT_THAT(ev.blocks().added(), ElementsAre(50u));
  EXPECT_THAT(ev.blocks().removed(), IsEmpty());
  EXPECT_THAT(service.cached_block_hashes(), ElementsAre(50u));

  service.Shutdown();  // ends both streams with OK
  while (early->reader->Read(&ev)) {
  }
  while (late->reader->Read(&ev)) {
  }
  EXPECT_TRUE(early->reader->Finish().ok());
  EXPECT_TRUE(late->reader->Finish().ok());
  server->Shutdown();
}

}  // namespace
}  // namespace tandem::serving
