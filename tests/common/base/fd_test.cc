#include "common/base/fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <utility>

#include "gtest/gtest.h"

namespace tandem::base {
namespace {

// Whether `fd` names an open descriptor in this process.
bool IsOpen(int fd) {
  errno = 0;
  const int flags = fcntl(fd, F_GETFD);
  if (flags == -1) {
    EXPECT_EQ(errno, EBADF) << "fcntl(" << fd << ", F_GETFD)";
    return false;
  }
  return true;
}

int OpenDevNull() {
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  return fd;
}

TEST(UniqueFdTest, DefaultHoldsNothing) {
  UniqueFd fd;
  EXPECT_EQ(fd.get(), -1);
  EXPECT_FALSE(fd.valid());
  EXPECT_FALSE(fd);
}

TEST(UniqueFdTest, ClosesOnDestruction) {
  const int raw = OpenDevNull();
  {
    UniqueFd fd(raw);
    EXPECT_EQ(fd.get(), raw);
    EXPECT_TRUE(fd.valid());
    EXPECT_TRUE(IsOpen(raw));
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFdTest, ResetClosesTheOldAndTakesTheNew) {
  const int first = OpenDevNull();
  const int second = OpenDevNull();
  UniqueFd fd(first);
  fd.reset(second);
  EXPECT_FALSE(IsOpen(first));
  EXPECT_TRUE(IsOpen(second));
  EXPECT_EQ(fd.get(), second);
  fd.reset();
  EXPECT_FALSE(IsOpen(second));
  EXPECT_EQ(fd.get(), -1);
}

TEST(UniqueFdTest, ResetToTheSameFdKeepsItOpen) {
  const int raw = OpenDevNull();
  UniqueFd fd(raw);
  fd.reset(raw);
  EXPECT_TRUE(IsOpen(raw));
  EXPECT_EQ(fd.get(), raw);
}

TEST(UniqueFdTest, MoveConstructionTransfersOwnership) {
  const int raw = OpenDevNull();
  UniqueFd from(raw);
  auto to = std::make_unique<UniqueFd>(std::move(from));
  EXPECT_EQ(from.get(), -1);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(to->get(), raw);
  from.reset();  // holds nothing: must not close `raw`
  EXPECT_TRUE(IsOpen(raw));
  to.reset();  // the new owner dies
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFdTest, MoveAssignmentClosesTheTargetsOldFd) {
  const int kept = OpenDevNull();
  const int replaced = OpenDevNull();
  UniqueFd from(kept);
  UniqueFd to(replaced);
  to = std::move(from);
  EXPECT_FALSE(IsOpen(replaced));
  EXPECT_TRUE(IsOpen(kept));
  EXPECT_EQ(to.get(), kept);
  EXPECT_EQ(from.get(), -1);  // NOLINT(bugprone-use-after-move)
}

TEST(UniqueFdTest, ReleaseDoesNotClose) {
  const int raw = OpenDevNull();
  {
    UniqueFd fd(raw);
    EXPECT_EQ(fd.release(), raw);
    EXPECT_EQ(fd.get(), -1);
  }
  EXPECT_TRUE(IsOpen(raw));
  ASSERT_EQ(close(raw), 0);
}

TEST(UniqueFdTest, ClosingKeepsErrno) {
  UniqueFd fd(OpenDevNull());
  errno = ENOENT;
  fd.reset();
  EXPECT_EQ(errno, ENOENT);
}

}  // namespace
}  // namespace tandem::base
