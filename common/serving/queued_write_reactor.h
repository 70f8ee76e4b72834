#pragma once
// QueuedWriteReactor<Msg>: a server-streaming gRPC reactor that any thread can
// feed. Send() queues a message (or merges it into the last queued one) and
// the reactor writes them one at a time; Close() finishes the stream once the
// queue is written. gRPC reactions (OnWriteDone, OnCancel) and the owner's
// calls meet under one mutex, and no gRPC operation is started while it is
// held (a reaction may run inline).
//
// Lifetime: self-deleting, as gRPC reactors are (OnDone). The object lives
// at least until Close() is called: whoever calls Close() must not touch the
// reactor afterwards, and every reactor must eventually be Close()d (also
// after OnCancelled(): the owner learns of it there and closes with
// CANCELLED).

#include <deque>
#include <functional>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem::serving {

template <typename Msg>
class QueuedWriteReactor : public grpc::ServerWriteReactor<Msg> {
 public:
  // Merges `next` into `last` (the newest queued, not yet written message)
  // and returns true, or returns false to queue `next` on its own.
  using MergeFn = std::function<bool(Msg& last, const Msg& next)>;

  explicit QueuedWriteReactor(MergeFn merge = nullptr) : merge_(std::move(merge)) {}

  // Any thread. Ignored after Close() or once the stream broke.
  void Send(Msg msg) {
    bool start = false;
    {
      absl::MutexLock lock(&mu_);
      if (close_requested_ || broken_) {
        return;
      }
      if (!queue_.empty() && merge_ && merge_(queue_.back(), msg)) {
        // merged
      } else {
        queue_.push_back(std::move(msg));
      }
      start = TakeNextLocked();
    }
    if (start) {
      this->StartWrite(&writing_msg_);
    }
  }

  // Any thread, once (later calls are ignored). Finishes with `status` after
  // the queued messages are written (at once if the stream broke).
  void Close(grpc::Status status) {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      if (close_requested_) {
        return;
      }
      close_requested_ = true;
      status_ = std::move(status);
      finish = FinishNowLocked();
    }
    if (finish) {
      this->Finish(status_);
    }
  }

 protected:
  ~QueuedWriteReactor() override = default;

  // gRPC thread: the client cancelled, the deadline passed or the connection
  // dropped. The owner must still Close().
  virtual void OnCancelled() {}
  // gRPC thread: the stream is over; the object is deleted right after.
  virtual void OnStreamDone() {}

 private:
  void OnWriteDone(bool ok) override {
    bool start = false;
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        broken_ = true;
        queue_.clear();
      }
      start = !broken_ && TakeNextLocked();
      if (!start) {
        finish = FinishNowLocked();
      }
    }
    if (start) {
      this->StartWrite(&writing_msg_);
    } else if (finish) {
      this->Finish(status_);
    }
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      queue_.clear();
    }
    OnCancelled();
  }

  void OnDone() override {
    OnStreamDone();
    delete this;
  }

  // Moves the next queued message into writing_msg_ when no write is in flight.
  bool TakeNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_ || queue_.empty()) {
      return false;
    }
    writing_msg_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    return true;
  }

  bool FinishNowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!close_requested_ || finished_ || writing_ || (!broken_ && !queue_.empty())) {
      return false;
    }
    finished_ = true;
    return true;
  }

  const MergeFn merge_;
  absl::Mutex mu_;
  std::deque<Msg> queue_ ABSL_GUARDED_BY(mu_);
  Msg writing_msg_;  // the message of the write in flight (gRPC reads it until OnWriteDone)
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool close_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_;  // written once under mu_ before finished_ is set
};

}  // namespace tandem::serving
