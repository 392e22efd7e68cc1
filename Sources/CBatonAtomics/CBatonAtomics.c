#include "CBatonAtomics.h"

#include <stdatomic.h>

static _Atomic(uint64_t) last_serial = 0;
static _Atomic(void *) global_recorder_slot = NULL;
static _Atomic(_Bool) queues_record = 0;

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
