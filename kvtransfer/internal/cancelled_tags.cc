#include "kvtransfer/internal/cancelled_tags.h"

#include <algorithm>

namespace tandem::kvtransfer::internal {

void CancelledTags::Add(TransferTag tag) {
  if (!tags_.insert(tag).second) {
    return;
  }
  order_.push_back(tag);
  while (tags_.size() > capacity_ && !order_.empty()) {
    tags_.erase(order_.front());
    order_.pop_front();
  }
}

void CancelledTags::Remove(TransferTag tag) {
  if (tags_.erase(tag) > 0) {
    order_.erase(std::find(order_.begin(), order_.end(), tag));
  }
}

}  // namespace tandem::kvtransfer::internal
