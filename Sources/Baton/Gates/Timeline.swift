/// The claim table's timed lanes: when each is to be looked at again, and a min-heap of those times,
/// so that the earliest is found, and the due ones taken, in logarithmic time. An earlier version kept
/// only the times, in a dictionary, and every timer scanned all of them: a pace on thousands of
/// categories (one per host) cools thousands of lanes, each at its own time, one timer each, and
/// the scans made that quadratic under the table's lock (16,000 lanes: 13 s in a debug build).
///
/// A lane's time is what ``due`` says. Timing it again, or dropping it, leaves its old heap entry in
/// place: an entry that no longer matches ``due`` is stale, and is skipped when it surfaces. The heap
/// is rebuilt from ``due`` when stale entries outnumber live ones, so it stays linear in the lanes timed.
struct Timeline {
    /// When each timed lane is to be looked at again.
    private(set) var due: [Lane: UInt64] = [:]
    private var heap = MinHeap<Entry>()

    private struct Entry: HeapEntry {
        let time: UInt64
        let lane: Lane
        var heapKey: UInt64 { time }
    }

    /// How many entries the heap holds, stale ones included (a test seam).
    var heapCount: Int { heap.count }

    /// Times `lane` for `time`, replacing any earlier time.
    mutating func set(_ lane: Lane, at time: UInt64) {
        guard due.updateValue(time, forKey: lane) != time else { return }
        heap.insert(Entry(time: time, lane: lane))
        compactIfStale()
    }

    /// Drops `lane`'s time, if it has one.
    mutating func remove(_ lane: Lane) {
        guard due.removeValue(forKey: lane) != nil else { return }
        compactIfStale()
    }

    /// Takes out a lane whose time is `now` or earlier, if there is one.
    mutating func popDue(at now: UInt64) -> Lane? {
        while let top = heap.first, top.time <= now {
            heap.remove(at: 0)
            if due[top.lane] == top.time {
                due[top.lane] = nil
                return top.lane
            }
        }
        return nil
    }

    /// The earliest time of a timed lane.
    mutating func earliest() -> UInt64? {
        while let top = heap.first, due[top.lane] != top.time { heap.remove(at: 0) }
        return heap.first?.time
    }

    private mutating func compactIfStale() {
        guard heap.count > 2 * due.count + 16 else { return }
        heap = MinHeap(due.map { Entry(time: $0.value, lane: $0.key) })
    }
}
