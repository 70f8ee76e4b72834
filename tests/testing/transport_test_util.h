#pragma once
// Helpers shared by the kvtransfer tests and the UCX peer process: completion
// recorders and waits that fail with a message instead of hanging.

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kvtransfer/transport.h"
#include "tests/testing/peer_protocol.h"

namespace tandem::kvtransfer::testing {

// Records the completions of one write: Callback() hands out its `done`.
class DoneRecorder {
 public:
  DoneRecorder() : state_(std::make_shared<State>()) {}

  absl::AnyInvocable<void(absl::Status) &&> Callback() {
    return [state = state_](absl::Status s) {
      absl::MutexLock lock(&state->mu);
      ++state->calls;
      state->status = std::move(s);
    };
  }

  // Waits until done ran; fails with a message after `timeout`.
  ::testing::AssertionResult Wait(absl::Duration timeout = absl::Seconds(60)) const {
    absl::MutexLock lock(&state_->mu);
    const bool ok = state_->mu.AwaitWithTimeout(
        absl::Condition(+[](int* calls) { return *calls > 0; }, &state_->calls), timeout);
    if (!ok) {
      return ::testing::AssertionFailure()
             << "done did not run within " << absl::FormatDuration(timeout);
    }
    return ::testing::AssertionSuccess();
  }

  int calls() const {
    absl::MutexLock lock(&state_->mu);
    return state_->calls;
  }
  absl::Status status() const {
    absl::MutexLock lock(&state_->mu);
    return state_->status;
  }

 private:
  struct State {
    absl::Mutex mu;
    int calls ABSL_GUARDED_BY(mu) = 0;
    absl::Status status ABSL_GUARDED_BY(mu) = absl::UnknownError("done not run");
  };
  std::shared_ptr<State> state_;
};

// Waits until transport.ReceivedBytes(tag) >= bytes.
inline ::testing::AssertionResult WaitForReceived(const KvTransport& transport, TransferTag tag,
                                                  uint64_t bytes,
                                                  absl::Duration timeout = absl::Seconds(60)) {
  const absl::Time deadline = absl::Now() + timeout;
  uint64_t got = 0;
  while ((got = transport.ReceivedBytes(tag)) < bytes) {
    if (absl::Now() > deadline) {
      return ::testing::AssertionFailure() << "ReceivedBytes(" << tag << ") = " << got << " < "
                                           << bytes << " after " << absl::FormatDuration(timeout);
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return ::testing::AssertionSuccess();
}

// Writes `ops` under `tag` and waits for the completion: fails if Write refuses
// them, done does not run within `timeout`, or done gets an error.
inline ::testing::AssertionResult WriteAndWaitOk(KvTransport& transport,
                                                 const RegionDescriptor& peer, TransferTag tag,
                                                 std::vector<WriteOp> ops,
                                                 absl::Duration timeout = absl::Seconds(60)) {
  DoneRecorder done;
  if (absl::Status s = transport.Write(peer, tag, std::move(ops), done.Callback()); !s.ok()) {
    return ::testing::AssertionFailure() << "Write(" << tag << ") refused: " << s;
  }
  if (::testing::AssertionResult waited = done.Wait(timeout); !waited) {
    return waited;
  }
  if (absl::Status s = done.status(); !s.ok()) {
    return ::testing::AssertionFailure() << "write " << tag << " failed: " << s;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tandem::kvtransfer::testing
