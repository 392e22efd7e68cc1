/// What an operation or a chain runs when it finishes, in the order it was registered: hooks that stay
/// until the finish, and waits that may leave early (a timeout, a cancelled task).
///
/// Every entry gets an increasing token, so the entries are sorted by token: a wait that leaves finds
/// its entry by binary search and leaves a hole, and the list closes its holes once they are half of
/// it. Leaving costs O(log n) amortised however many waits leave at once, and what a wait held is
/// released when it leaves, not when the owner finishes.
struct WaitList<Callback> {
    private var entries: [(token: UInt64, callback: Callback?)] = []
    private var holes = 0
    private var lastToken: UInt64 = 0

    var isEmpty: Bool { entries.count == holes }

    /// How many entries are in the list (holes not counted).
    var count: Int { entries.count - holes }

    /// How many slots the list keeps, holes included (a test seam: holes are closed as it goes).
    var storage: Int { entries.count }

    /// Adds `callback` with a new token, which lets it leave early.
    mutating func append(_ callback: Callback) -> UInt64 {
        append(callback, token: lastToken + 1)
        return lastToken
    }

    /// Adds `callback` with a token minted elsewhere (the lifecycle machine's); tokens must increase.
    mutating func append(_ callback: Callback, token: UInt64) {
        assert(token > lastToken, "wait tokens must increase")
        lastToken = token
        entries.append((token, callback))
    }

    /// Where the entry of `token` is, if it is still in the list (binary search: tokens increase).
    private func index(of token: UInt64) -> Int? {
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].token < token { low = middle + 1 } else { high = middle }
        }
        guard low < entries.count, entries[low].token == token, entries[low].callback != nil else { return nil }
        return low
    }

    /// Takes out the entry of `token`; `nil` when it has already left or been taken.
    mutating func remove(_ token: UInt64) -> Callback? {
        guard let low = index(of: token), let callback = entries[low].callback else { return nil }
        entries[low].callback = nil
        holes += 1
        if holes * 2 > entries.count {
            entries.removeAll { $0.callback == nil }
            holes = 0
        }
        return callback
    }

    /// Empties the list and hands over what it held (its storage, not a copy: every finish calls it).
    mutating func takeAll() -> WaitList {
        let taken = self
        entries = []
        holes = 0
        return taken
    }

    /// The entries, in order.
    var values: [Callback] { entries.compactMap(\.callback) }

    /// The entries with their tokens, in order.
    var tokened: [(token: UInt64, callback: Callback)] {
        entries.compactMap { entry in entry.callback.map { (entry.token, $0) } }
    }
}

extension WaitList: Sequence {
    /// The entries in order, skipping the holes.
    struct Iterator: IteratorProtocol {
        fileprivate var base: IndexingIterator<[(token: UInt64, callback: Callback?)]>

        mutating func next() -> Callback? {
            while let entry = base.next() {
                if let callback = entry.callback { return callback }
            }
            return nil
        }
    }

    func makeIterator() -> Iterator {
        Iterator(base: entries.makeIterator())
    }
}
