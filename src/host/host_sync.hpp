#pragma once

// Cross-process synchronisation of the host backend: signal slots and a per-rank doorbell in
// shared memory (a memfd mapped by every rank of the group).
//
// NOTE [host signal ordering]
// Each rank's mapping of an allocation is  [buffer][signal pad][HostControl].
// Signal pad invariant (as on every backend): uint32_t slots, zero at rest,
// slot index = channel * world_size + src. Only two transitions exist:
//   put_signal(dst, ch) by src:  wait  pad[dst][ch*W+src] == 0   (load, acquire)
//                                then  pad[dst][ch*W+src] = 1    (store, release)
//                                then  ring(dst)
//   wait_signal(src, ch) by dst: wait  pad[dst][ch*W+src] == 1   (load, acquire)
//                                then  pad[dst][ch*W+src] = 0    (store, release)
//                                then  ring(src)
// The release store of 1 publishes every write src made before put_signal (to any rank's
// buffer); dst's acquire load of 1 makes them visible to everything dst does after
// wait_signal. Symmetrically, the release store of 0 orders dst's reads of the data before src's
// next put_signal (whose acquire load waits for that 0), so src may overwrite after its next
// wait for 0 succeeds. barrier(ch) = put_signal to every peer + wait_signal from every peer,
// progressed together: all writes before the barrier on any rank are visible after it on all.
//
// Sleeping (NOTE [doorbell]): a waiter spins briefly, then sleeps on its own rank's doorbell
// word with a SHARED futex (no FUTEX_PRIVATE_FLAG: the word lives in a MAP_SHARED memfd, mapped
// at different addresses in different processes). Whoever changes a slot some rank may wait on
// rings that rank: doorbell.fetch_add(1, seq_cst), then FUTEX_WAKE if sleepers.load(seq_cst) != 0.
// A waiter reads bell = doorbell (acquire), sleepers.fetch_add(1, seq_cst), re-checks its
// condition, and only then FUTEX_WAITs for doorbell != bell. Either the waker's increment is
// ordered before the waiter's read of `bell` (then the slot change is visible to the re-check),
// or after it (then FUTEX_WAIT sees doorbell != bell and returns at once): no lost wake-up.
// Every sleep is bounded (kSleepSlice) so that deadlines and peer liveness are checked even if
// a wake-up were lost.

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

namespace symmem::host {

struct alignas(64) HostControl {
  std::atomic<uint32_t> doorbell;  // futex word; bumped by ring()
  std::atomic<uint32_t> sleepers;  // threads of any process sleeping on doorbell
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(HostControl) == 64);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Shared (not private) futex wait on `word` while it equals `expected`, at most `ns`.
inline void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void futex_wake_all(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Tells the owner of `c` that something it may wait on has changed.
inline void ring(HostControl& c) {
  c.doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (c.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&c.doorbell);
}

}  // namespace symmem::host
