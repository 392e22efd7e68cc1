// The few atomic words Baton's per-operation paths read instead of taking a process-wide lock. C11
// atomics, because Swift's own `Atomic` needs macOS 15 / iOS 18 and Baton supports older systems.
// The words live in CBatonAtomics.c; Swift sees only these functions.
#ifndef C_BATON_ATOMICS_H
#define C_BATON_ATOMICS_H

#include <stdint.h>

/// A number no earlier call returned in this process: 1, 2, 3, … (relaxed: only uniqueness matters).
uint64_t baton_next_serial(void);

/// The published slot of the global flight recorder, or NULL when none is set (acquire).
void *_Nullable baton_global_recorder_slot(void);

/// Publishes `slot` (release): what `baton_global_recorder_slot` returns from now on. Callers
/// serialise their stores under their own lock and never free a slot they published.
void baton_publish_global_recorder_slot(void *_Nullable slot);

/// Whether some queue has a flight recorder attached (acquire).
_Bool baton_queues_record(void);

/// Sets what `baton_queues_record` returns (release), under the caller's own lock.
void baton_set_queues_record(_Bool record);

/// Where Foundation keeps an operation's queue records, packed by Baton, or 0 while it has not been
/// looked for (acquire). A word instead of a Swift `static let`: under ThreadSanitizer, Swift's
/// runtime takes a lock on every read of a lazily initialised global, and this one is read on every
/// `isReady`, which Foundation's queues ask of each waiting operation on every change.
uint64_t baton_foundation_layout(void);

/// Publishes `word` (release): what `baton_foundation_layout` returns from now on. Every thread that
/// looks computes the same word, so two that race both store it.
void baton_publish_foundation_layout(uint64_t word);

/// Where Foundation keeps a queue's dispatch queue, packed by Baton, or 0 while it has not been
/// looked for (acquire): as `baton_foundation_layout`, for `OperationQueue`.
uint64_t baton_foundation_queue_layout(void);

/// Publishes `word` (release), as `baton_publish_foundation_layout`.
void baton_publish_foundation_queue_layout(uint64_t word);

#if defined(__linux__)
/// Baton's lock on Linux: one 32-bit word, 0 (free), 1 (held) or 2 (held, and a thread may sleep on
/// it). The fast paths are inline; a contended lock spins a moment, then sleeps on a futex.
void baton_lock_contended(uint32_t *_Nonnull word);
/// Wakes one thread sleeping on `word`.
void baton_lock_wake(uint32_t *_Nonnull word);

/// Takes the lock in `word` (acquire).
static inline __attribute__((always_inline)) void baton_lock(uint32_t *_Nonnull word) {
    uint32_t expected = 0;
    if (__builtin_expect(
            __atomic_compare_exchange_n(word, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED), 1)) {
        return;
    }
    baton_lock_contended(word);
}

/// The lock's word as it is now (relaxed): for tests that wait until a thread sleeps on it.
static inline uint32_t baton_lock_word(uint32_t *_Nonnull word) {
    return __atomic_load_n(word, __ATOMIC_RELAXED);
}

/// Releases the lock in `word` (release), waking a sleeper if there may be one.
static inline __attribute__((always_inline)) void baton_unlock(uint32_t *_Nonnull word) {
    if (__builtin_expect(__atomic_exchange_n(word, 0, __ATOMIC_RELEASE) == 2, 0)) {
        baton_lock_wake(word);
    }
}
#endif

#endif
