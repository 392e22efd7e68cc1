/// The claim table's lanes: an open-addressing hash table (linear probing) from ``Lane`` to a record
/// that holds the lane's state.
///
/// Why not a `Dictionary<Lane, State>`: a claim on a category nobody else uses inserts a lane and its
/// release removes it, so a burst of claims on distinct categories (a crawl claiming one category per
/// host, a group whose children each claim their own) keeps tens of thousands of lanes live, and the
/// table grows and shrinks under the gatekeeper's lock. A `Dictionary` moves every key and state when
/// it grows, hashing each key again through `Hasher`, and those moves touch memory that has long left
/// the cache; profiled with 100,000 distinct lanes, growing was most of a claim's cost. Here a slot is
/// 16 bytes (the lane's hash, worked out once, and a reference to its record), so growing and
/// shrinking stream through one dense array and never touch a record, and a lookup compares a lane
/// only where the hash matches.
struct LaneMap<State> {
    /// A lane and its state. Its identity is the handle callers keep between lookups (a record stays
    /// valid until it is removed, whatever else is inserted or removed).
    final class Record {
        let lane: Lane
        /// Read and written only under the claim table's lock, one step at a time: not checked for
        /// overlapping access at run time (about 110 instructions per step, several per claim).
        @exclusivity(unchecked) var state: State

        init(lane: Lane, state: consuming State) {
            self.lane = lane
            self.state = state
        }
    }

    /// A free slot has no record.
    private struct Slot {
        var hash: Int
        var record: Record?
    }

    /// A power of two long, or empty.
    private var slots: ContiguousArray<Slot> = []
    private(set) var count = 0

    private var mask: Int { slots.count - 1 }

    /// How many slots the table has (a power of two, or 0): what it keeps in memory.
    var capacity: Int { slots.count }

    /// The record of `lane`, if it is in the table.
    func record(for lane: Lane) -> Record? {
        slotIndex(of: lane).map { slots[$0].record! }
    }

    /// The state of `lane`, if it is in the table.
    subscript(lane: Lane) -> State? {
        record(for: lane)?.state
    }

    /// Adds `lane`, which must not be in the table, and returns its record.
    mutating func insert(_ lane: Lane, _ state: consuming State) -> Record {
        if (count + 1) * 4 > slots.count * 3 { resize(to: Swift.max(16, slots.count * 2)) }
        count += 1
        let record = Record(lane: lane, state: state)
        place(lane.mixedHash, record)
        return record
    }

    /// Removes `record`'s lane, shifting back the slots after it that probed past it.
    mutating func remove(_ record: Record) {
        guard var hole = slotIndex(of: record.lane), slots[hole].record === record else { return }
        var next = (hole + 1) & mask
        while slots[next].record != nil {
            // The slot may fill the hole when the hole lies between its home and where it sits.
            if (next - (slots[next].hash & mask)) & mask >= (next - hole) & mask {
                slots.swapAt(hole, next)
                hole = next
            }
            next = (next + 1) & mask
        }
        slots[hole] = Slot(hash: 0, record: nil)
        count -= 1
    }

    /// Gives memory back after a burst: a table less than a sixteenth full is cut, in one step, to the
    /// size that leaves it a quarter full at most. Halving at an eighth (as before) resized twice as
    /// often while a burst drained, and each large allocation or release lets glibc consolidate its
    /// free lists (about 1.3 million instructions a resize, callgrind).
    mutating func shrinkIfSparse() {
        guard slots.count > 16, count * 16 < slots.count else { return }
        var capacity = 16
        while capacity <= count * 4 { capacity *= 2 }
        resize(to: capacity)
    }

    /// Every record in the table, in no order.
    var records: [Record] { slots.compactMap(\.record) }

    private func slotIndex(of lane: Lane) -> Int? {
        guard count > 0 else { return nil }
        let hash = lane.mixedHash
        var index = hash & mask
        while let record = slots[index].record {
            if slots[index].hash == hash && record.lane == lane { return index }
            index = (index + 1) & mask
        }
        return nil
    }

    private mutating func place(_ hash: Int, _ record: consuming Record) {
        var index = hash & mask
        while slots[index].record != nil { index = (index + 1) & mask }
        slots[index] = Slot(hash: hash, record: record)
    }

    /// Moves every slot into a table of `capacity` slots.
    private mutating func resize(to capacity: Int) {
        var old = ContiguousArray(repeating: Slot(hash: 0, record: nil), count: capacity)
        swap(&old, &slots)
        for index in old.indices where old[index].record != nil {
            place(old[index].hash, old[index].record.take()!)
        }
    }
}

extension Lane {
    /// The lane's hash for ``LaneMap``: its name's (seeded per process, worked out once) mixed with the
    /// level, without a `Hasher`.
    var mixedHash: Int {
        var x = UInt64(bitPattern: Int64(name.hashCode)) ^ (under &* 0x9E37_79B9_7F4A_7C15)
        x ^= x >> 31
        x &*= 0xBF58_476D_1CE4_E5B9
        x ^= x >> 29
        return Int(truncatingIfNeeded: x)
    }
}
