// ThreadSanitizer builds only (TANDEM_TSAN): tells TSan about the
// synchronization done by Debian's Abseil, which is not built with TSan.
//
// absl::Mutex, CondVar and Notification live in libabsl_synchronization.so;
// their atomics and futex waits are uninstrumented, so without this file
// TSan sees no happens-before edge through them and reports every access
// guarded by an absl::Mutex as a race. Each function below is defined in
// the executable, so ELF symbol interposition makes every caller use it:
// our code, gRPC (its Mutex is an absl::Mutex) and Abseil itself
// (Notification and BlockingCounter call Mutex through the PLT). Each one
// calls the library's own definition (dlsym(RTLD_NEXT)) and adds
// __tsan_acquire after the mutex is taken and __tsan_release before it is
// let go, the edges an instrumented Abseil would give. Reader locks get the
// same edges as writer locks: that can hide a write made under a reader
// lock, never report a race that is not there.
//
// Not linked into any other build: it redefines Abseil symbols.

#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <string>
#include <type_traits>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "tests/testing/tsan_real.h"

#if !defined(__SANITIZE_THREAD__)
#error "tsan_abseil_sync.cc is for -fsanitize=thread builds only"
#endif

namespace {

#define TANDEM_STR2(x) #x
#define TANDEM_STR(x) TANDEM_STR2(x)

// Itanium mangled name of absl::<body>: "N" or "NK" nested-name prefix,
// `body` is the rest with "@" standing for the substitution of the Abseil
// namespace (absl::<inline namespace>:: is S0_, plain absl:: is S_).
std::string Mangle(const char* prefix, const char* body) {
#if ABSL_OPTION_USE_INLINE_NAMESPACE
  const std::string ns = TANDEM_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  std::string out = std::string("_Z") + prefix + "4absl" + std::to_string(ns.size()) + ns;
  const char* sub = "S0_";
#else
  std::string out = std::string("_Z") + prefix + "4absl";
  const char* sub = "S_";
#endif
  for (const char* p = body; *p != '\0'; ++p) {
    if (*p == '@') {
      out += sub;
    } else {
      out += *p;
    }
  }
  return out;
}

template <typename Fn>
Fn Real(const char* prefix, const char* body) {
  return tandem::testing::RealSymbol<Fn>("Abseil", Mangle(prefix, body).c_str());
}

// The library's definition of each function, looked up once.
#define TANDEM_REAL(type, prefix, body)                 \
  static const auto real = Real<type>(prefix, body)

// A Condition evaluated as a critical section of `mu`: absl evaluates
// conditions on the waiting thread and on whichever thread releases the
// mutex, both while the mutex is held, possibly inside Await after the
// waiter's own release edge; it reads state other threads write under `mu`.
// The object lives on the waiter's stack and reaches the releasing thread
// through Abseil's uninstrumented waiter queue, so the waiter releases on the
// object once it is built and Eval acquires on it before reading it (a
// LockWhen waiter never held `mu`, so `mu` gives no edge for this).
struct AnnotatedCondition {
  const absl::Condition* cond;
  absl::Mutex* mu;
  static bool Eval(void* arg) {
    __tsan_acquire(arg);
    auto* self = static_cast<AnnotatedCondition*>(arg);
    __tsan_acquire(self->mu);
    const bool met = self->cond->Eval();
    __tsan_release(self->mu);
    return met;
  }
};

// Calls the library's LockWhen*/Await* `real` with `cond` annotated; the
// mutex is held on return. `releases`: the call lets the mutex go first.
template <typename R, typename... Args>
R CallWithCondition(R (*real)(absl::Mutex*, const absl::Condition&, Args...), absl::Mutex* mu,
                    const absl::Condition& cond, bool releases, Args... args) {
  AnnotatedCondition annotated{&cond, mu};
  __tsan_release(&annotated);
  const absl::Condition wrapped(&AnnotatedCondition::Eval, &annotated);
  if (releases) {
    __tsan_release(mu);
  }
  if constexpr (std::is_void_v<R>) {
    real(mu, wrapped, args...);
    __tsan_acquire(mu);
  } else {
    const R result = real(mu, wrapped, args...);
    __tsan_acquire(mu);
    return result;
  }
}

// Notification keeps its flag right after its mutex; HasBeenNotified() reads
// it with an (instrumented, inline) acquire load, so Notify() releases on it.
const void* NotifiedFlag(const absl::Notification* n) {
  static_assert(sizeof(absl::Notification) == sizeof(absl::Mutex) + alignof(absl::Mutex),
                "absl::Notification layout changed: update NotifiedFlag");
  return reinterpret_cast<const char*>(n) + sizeof(absl::Mutex);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  TANDEM_REAL(void (*)(Mutex*), "N", "5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  TANDEM_REAL(void (*)(Mutex*), "N", "5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  TANDEM_REAL(bool (*)(Mutex*), "N", "5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) {
    __tsan_acquire(this);
  }
  return locked;
}

bool Mutex::ReaderTryLock() {
  TANDEM_REAL(bool (*)(Mutex*), "N", "5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) {
    __tsan_acquire(this);
  }
  return locked;
}

void Mutex::Unlock() {
  TANDEM_REAL(void (*)(Mutex*), "N", "5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  TANDEM_REAL(void (*)(Mutex*), "N", "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  TANDEM_REAL(void (*)(Mutex*, const Condition&), "N", "5Mutex8LockWhenERKN@9ConditionE");
  CallWithCondition(real, this, cond, /*releases=*/false);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  TANDEM_REAL(void (*)(Mutex*, const Condition&), "N", "5Mutex14ReaderLockWhenERKN@9ConditionE");
  CallWithCondition(real, this, cond, /*releases=*/false);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Duration), "N",
              "5Mutex19LockWhenWithTimeoutERKN@9ConditionEN@8DurationE");
  return CallWithCondition(real, this, cond, /*releases=*/false, timeout);
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Duration), "N",
              "5Mutex25ReaderLockWhenWithTimeoutERKN@9ConditionEN@8DurationE");
  return CallWithCondition(real, this, cond, /*releases=*/false, timeout);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Time), "N",
              "5Mutex20LockWhenWithDeadlineERKN@9ConditionEN@4TimeE");
  return CallWithCondition(real, this, cond, /*releases=*/false, deadline);
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Time), "N",
              "5Mutex26ReaderLockWhenWithDeadlineERKN@9ConditionEN@4TimeE");
  return CallWithCondition(real, this, cond, /*releases=*/false, deadline);
}

// Await* let the mutex go while waiting and hold it again on return.
void Mutex::Await(const Condition& cond) {
  TANDEM_REAL(void (*)(Mutex*, const Condition&), "N", "5Mutex5AwaitERKN@9ConditionE");
  CallWithCondition(real, this, cond, /*releases=*/true);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Duration), "N",
              "5Mutex16AwaitWithTimeoutERKN@9ConditionEN@8DurationE");
  return CallWithCondition(real, this, cond, /*releases=*/true, timeout);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Time), "N",
              "5Mutex17AwaitWithDeadlineERKN@9ConditionEN@4TimeE");
  return CallWithCondition(real, this, cond, /*releases=*/true, deadline);
}

// CondVar waits let `mu` go and hold it again on return; Signal needs no edge
// of its own (the signalled state is written under `mu`).
void CondVar::Wait(Mutex* mu) {
  TANDEM_REAL(void (*)(CondVar*, Mutex*), "N", "7CondVar4WaitEPN@5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  TANDEM_REAL(bool (*)(CondVar*, Mutex*, Duration), "N",
              "7CondVar15WaitWithTimeoutEPN@5MutexEN@8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  TANDEM_REAL(bool (*)(CondVar*, Mutex*, Time), "N",
              "7CondVar16WaitWithDeadlineEPN@5MutexEN@4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

// Notify's own Lock/Unlock come through Mutex above; the waits may return on
// the uninstrumented fast path without locking, and HasBeenNotified() reads
// the flag inline, so both get an edge from Notify() directly.
void Notification::Notify() {
  TANDEM_REAL(void (*)(Notification*), "N", "12Notification6NotifyEv");
  __tsan_release(this);
  __tsan_release(const_cast<void*>(NotifiedFlag(this)));
  real(this);
}

void Notification::WaitForNotification() const {
  TANDEM_REAL(void (*)(const Notification*), "NK", "12Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  TANDEM_REAL(bool (*)(const Notification*, Duration), "NK",
              "12Notification30WaitForNotificationWithTimeoutEN@8DurationE");
  const bool notified = real(this, timeout);
  if (notified) {
    __tsan_acquire(const_cast<Notification*>(this));
  }
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  TANDEM_REAL(bool (*)(const Notification*, Time), "NK",
              "12Notification31WaitForNotificationWithDeadlineEN@4TimeE");
  const bool notified = real(this, deadline);
  if (notified) {
    __tsan_acquire(const_cast<Notification*>(this));
  }
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
