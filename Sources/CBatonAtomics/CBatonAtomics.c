#include "CBatonAtomics.h"

#include <stdatomic.h>

static _Atomic(uint64_t) last_serial = 0;
static _Atomic(void *) global_recorder_slot = NULL;
static _Atomic(_Bool) queues_record = 0;
static _Atomic(uint64_t) foundation_layout = 0;
static _Atomic(uint64_t) foundation_queue_layout = 0;

uint64_t baton_next_serial(void) {
    return atomic_fetch_add_explicit(&last_serial, 1, memory_order_relaxed) + 1;
}

void *baton_global_recorder_slot(void) {
    return atomic_load_explicit(&global_recorder_slot, memory_order_acquire);
}

void baton_publish_global_recorder_slot(void *slot) {
    atomic_store_explicit(&global_recorder_slot, slot, memory_order_release);
}

_Bool baton_queues_record(void) {
    return atomic_load_explicit(&queues_record, memory_order_acquire);
}

void baton_set_queues_record(_Bool record) {
    atomic_store_explicit(&queues_record, record, memory_order_release);
}

uint64_t baton_foundation_layout(void) {
    return atomic_load_explicit(&foundation_layout, memory_order_acquire);
}

void baton_publish_foundation_layout(uint64_t word) {
    atomic_store_explicit(&foundation_layout, word, memory_order_release);
}

uint64_t baton_foundation_queue_layout(void) {
    return atomic_load_explicit(&foundation_queue_layout, memory_order_acquire);
}

void baton_publish_foundation_queue_layout(uint64_t word) {
    atomic_store_explicit(&foundation_queue_layout, word, memory_order_release);
}

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/// A moment's spin before sleeping: Baton's critical sections are a few dozen instructions, so the
/// holder is nearly always gone before a sleep and a wake-up would have begun (as glibc's adaptive
/// mutex does).
static const int spins = 100;

static inline void pause_briefly(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

void baton_lock_contended(uint32_t *word) {
    for (int spin = 0; spin < spins; spin++) {
        if (__atomic_load_n(word, __ATOMIC_RELAXED) == 0) {
            uint32_t expected = 0;
            if (__atomic_compare_exchange_n(word, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
                return;
            }
        }
        pause_briefly();
    }
    // Mark the word "held, maybe sleepers" and sleep until a release finds it so (Drepper's
    // "Futexes Are Tricky", mutex 3): whoever takes the lock here keeps the mark, so its release wakes
    // the next sleeper.
    while (__atomic_exchange_n(word, 2, __ATOMIC_ACQUIRE) != 0) {
        syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    }
}

void baton_lock_wake(uint32_t *word) {
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
#endif
