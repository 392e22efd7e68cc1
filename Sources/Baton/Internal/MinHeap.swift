/// What a ``MinHeap`` holds: an entry ordered by its key, told where it moves (an entry that is
/// removed from the middle of the heap keeps its own position).
protocol HeapEntry {
    /// The order of the heap: the smallest key is on top.
    var heapKey: UInt64 { get }
    /// The entry is now at `index` of the heap's storage.
    func moved(to index: Int)
}

extension HeapEntry {
    func moved(to index: Int) {}
}

/// A binary min-heap by ``HeapEntry/heapKey``: the top in constant time, an insertion or a removal
/// (of the top, or of any entry by its position) in logarithmic time, built from a list in linear
/// time. The timers' heap (``Deadlines``) and the claim table's timeline (`Timeline`) share it.
struct MinHeap<Entry: HeapEntry> {
    private var entries: ContiguousArray<Entry> = []

    init() {}

    /// A heap of `entries`, built in linear time (Floyd's construction).
    init(_ entries: some Sequence<Entry>) {
        self.entries = ContiguousArray(entries)
        for (index, entry) in self.entries.enumerated() { entry.moved(to: index) }
        for index in stride(from: self.entries.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
    }

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }
    /// The entry with the smallest key.
    var first: Entry? { entries.first }

    mutating func insert(_ entry: Entry) {
        entries.append(entry)
        entry.moved(to: entries.count - 1)
        siftUp(entries.count - 1)
    }

    /// Takes out the entry at `index` of the storage (0: the top).
    @discardableResult
    mutating func remove(at index: Int) -> Entry {
        let removed = entries[index]
        let last = entries.removeLast()
        guard index < entries.count else { return removed }
        entries[index] = last
        last.moved(to: index)
        // The entry moved in from the end may belong below or above its new place.
        if siftDown(index) == index { siftUp(index) }
        return removed
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].heapKey < entries[parent].heapKey else { return }
            swapAt(child, parent)
            child = parent
        }
    }

    /// Sifts the entry at `start` down; returns where it ends.
    @discardableResult
    private mutating func siftDown(_ start: Int) -> Int {
        var parent = start
        while true {
            let left = 2 * parent + 1
            guard left < entries.count else { return parent }
            let right = left + 1
            let child = right < entries.count && entries[right].heapKey < entries[left].heapKey ? right : left
            guard entries[child].heapKey < entries[parent].heapKey else { return parent }
            swapAt(child, parent)
            parent = child
        }
    }

    private mutating func swapAt(_ i: Int, _ j: Int) {
        entries.swapAt(i, j)
        entries[i].moved(to: i)
        entries[j].moved(to: j)
    }
}
