// CommitClient: the decode address comes from a Prefill request, so a caller
// naming many addresses must not grow its channel cache without bound, and
// an address that is not host:port is refused without dialing.

#include "prefill_worker/commit_client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tandem::prefill_worker {
namespace {

TEST(CommitClientTest, ManyAddressesKeepABoundedChannelCache) {
  CommitClient client(grpc::InsecureChannelCredentials());
  constexpr int kAddresses = 3 * static_cast<int>(CommitClient::kMaxChannels);
  std::atomic<int> done{0};
  absl::Notification all_done;
  for (int i = 0; i < kAddresses; ++i) {
    CommitArgs abort;
    // Nothing listens on these ports: each call fails fast or at its deadline.
    abort.decode_worker = absl::StrCat("127.0.0.1:", 1 + i);
    abort.request_id = absl::StrCat("r", i);
    abort.abort = true;
    abort.deadline = absl::Now() + absl::Seconds(2);
    client.Commit(std::move(abort), [&](absl::Status s) {
      EXPECT_FALSE(s.ok());
      if (done.fetch_add(1) + 1 == kAddresses) {
        all_done.Notify();
      }
    });
    EXPECT_LE(client.cached_channels(), CommitClient::kMaxChannels);
  }
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_LE(client.cached_channels(), CommitClient::kMaxChannels);
}

TEST(CommitClientTest, NonHostPortAddressIsRefusedWithoutDialing) {
  CommitClient client(grpc::InsecureChannelCredentials());
  constexpr absl::string_view kAddresses[] = {"unix:/tmp/x.sock", "dns:///example.com:1",
                                              "127.0.0.1"};
  for (absl::string_view address : kAddresses) {
    CommitArgs abort;
    abort.decode_worker = absl::StrCat(address);
    abort.request_id.push_back('r');  // not = "r": GCC 12 -Wrestrict false positive (PR 105329)
    abort.abort = true;
    absl::Status got = absl::OkStatus();
    client.Commit(std::move(abort), [&](absl::Status s) { got = s; });
    EXPECT_EQ(got.code(), absl::StatusCode::kInvalidArgument) << address << ": " << got;
  }
  EXPECT_EQ(client.cached_channels(), 0u);
}

}  // namespace
}  // namespace tandem::prefill_worker
