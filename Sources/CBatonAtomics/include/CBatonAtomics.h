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

#endif
