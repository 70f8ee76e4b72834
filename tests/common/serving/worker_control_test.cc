// WorkerControlService's lifecycle without a gRPC server: Shutdown from many
// threads at once notifies and joins the heartbeat thread exactly once (a
// second Notify is fatal in absl::Notification; a second join throws).

#include "common/serving/worker_control.h"

#include <atomic>
#include <thread>
#include <vector>

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

}  // namespace
}  // namespace tandem::serving
