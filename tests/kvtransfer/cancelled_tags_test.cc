#include "kvtransfer/internal/cancelled_tags.h"

#include <initializer_list>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/transport.h"

namespace tandem::kvtransfer::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Which of `candidates` `tags` holds, in the order given.
std::vector<TransferTag> Held(const CancelledTags& tags,
                              std::initializer_list<TransferTag> candidates) {
  std::vector<TransferTag> held;
  for (TransferTag t : candidates) {
    if (tags.Contains(t)) {
      held.push_back(t);
    }
  }
  return held;
}

TEST(CancelledTagsTest, AddContainsRemove) {
  CancelledTags tags;
  EXPECT_THAT(Held(tags, {7, 8}), IsEmpty());
  tags.Add(7);
  tags.Add(7);  // a second Add is a no-op
  EXPECT_THAT(Held(tags, {7, 8}), ElementsAre(7));
  tags.Remove(7);
  EXPECT_THAT(Held(tags, {7, 8}), IsEmpty());
  tags.Remove(7);  // removing an absent tag is a no-op
  EXPECT_THAT(Held(tags, {7, 8}), IsEmpty());
}

TEST(CancelledTagsTest, EvictsTheOldestBeyondCapacity) {
  CancelledTags tags(/*capacity=*/3);
  for (TransferTag t : {1, 2, 3, 2}) {  // the second 2 neither refreshes nor counts twice
    tags.Add(t);
  }
  tags.Add(4);
  EXPECT_THAT(Held(tags, {1, 2, 3, 4, 5}), ElementsAre(2, 3, 4));
  tags.Add(5);
  EXPECT_THAT(Held(tags, {1, 2, 3, 4, 5}), ElementsAre(3, 4, 5));
}

TEST(CancelledTagsTest, RemovedTagsFreeTheirSlot) {
  CancelledTags tags(/*capacity=*/2);
  tags.Add(1);
  tags.Add(2);
  tags.Remove(1);
  tags.Add(3);  // fits: 1 no longer counts
  EXPECT_THAT(Held(tags, {1, 2, 3, 4}), ElementsAre(2, 3));
  tags.Add(4);  // evicts 2, the oldest left
  EXPECT_THAT(Held(tags, {1, 2, 3, 4}), ElementsAre(3, 4));
}

}  // namespace
}  // namespace tandem::kvtransfer::internal
