/// Who holds which category, and who waits for it, as a pure value: every decision about a claim
/// (grant now, queue, release, withdraw) is one call on this struct under the gatekeeper's one lock,
/// and returns the requests it granted, which the caller wakes once the lock is released.
///
/// The rules that make it deadlock-free:
/// - **All or none.** A request names every lane it needs and is granted all of them in one step, or
///   none: nobody holds one lane while waiting for another, so no two requests wait for each other.
/// - **One order.** A request that cannot be granted at once joins the waiting line of every lane it
///   needs, in one step. Any two requests are therefore in the same order in every line they share,
///   and the oldest waiting request is at the head of all of its lines: it is granted as soon as
///   capacity frees. FIFO per lane, with no barging: a request behind the head waits even when the
///   lane has room, so a request for several lanes is never starved by a stream of single ones.
///
/// Work is linear: a release looks at the heads of the lines it frees, and a grant pops one entry per
/// lane; nothing scans every waiter.
struct ClaimTable<Waiter> {
    /// One lane's holders and waiting line.
    struct LaneState {
        /// Each holder's waiter (for the live view). A request names a lane once, so an id holds a
        /// lane at most once.
        var holders: [UInt64: Waiter] = [:]
        /// Waiting request ids, oldest first from `head`.
        var line: [UInt64] = []
        var head = 0

        var held: Int { holders.count }
        var waitingCount: Int { line.count - head }
        var first: UInt64? { head < line.count ? line[head] : nil }

        mutating func popFirst() {
            head += 1
            if head == line.count {
                line.removeAll(keepingCapacity: true)
                head = 0
            } else if head > 64 && head * 2 > line.count {
                line.removeFirst(head)
                head = 0
            }
        }
    }

    struct Request {
        let lanes: [Lane]
        let waiter: Waiter
    }

    private(set) var lanes: [Lane: LaneState] = [:]
    private(set) var waiting: [UInt64: Request] = [:]
    /// Requests taken back while waiting, with how many line entries of theirs are still to be dropped
    /// (lazily, when each reaches the head of its line).
    private var withdrawn: [UInt64: Int] = [:]
    private var limits: [Lane.Name: Int] = [:]

    /// How many may hold `name` at once (1 unless set).
    func limit(of name: Lane.Name) -> Int { limits[name] ?? 1 }

    /// Changes a limit; requests that now fit are granted.
    mutating func setLimit(_ limit: Int, of name: Lane.Name) -> [(UInt64, Waiter)] {
        limits[name] = limit
        var granted: [(UInt64, Waiter)] = []
        for lane in lanes.keys where lane.name == name { grantFromHead(of: lane, into: &granted) }
        return granted
    }

    /// Asks for every lane of `lanes` (each named once) at once. `true`: granted now, and `waiter` is
    /// kept as the lanes' holder. `false`: the request waits in every lane's line until ``release(_:by:)`` or another call grants
    /// it, or ``withdraw(_:)`` takes it back.
    mutating func request(_ id: UInt64, lanes wanted: [Lane], waiter: Waiter) -> Bool {
        if wanted.allSatisfy({ lane in
            let state = lanes[lane]
            return (state?.waitingCount ?? 0) == 0 && (state?.held ?? 0) < limit(of: lane.name)
        }) {
            for lane in wanted { take(lane, for: id, waiter) }
            return true
        }
        waiting[id] = Request(lanes: wanted, waiter: waiter)
        for lane in wanted { lanes[lane, default: LaneState()].line.append(id) }
        return false
    }

    /// Gives back every lane `id` held; returns the requests this lets through.
    mutating func release(_ held: [Lane], by id: UInt64) -> [(UInt64, Waiter)] {
        var granted: [(UInt64, Waiter)] = []
        for lane in held {
            guard var state = lanes[lane], state.holders.removeValue(forKey: id) != nil else { continue }
            lanes[lane] = state
        }
        for lane in held { grantFromHead(of: lane, into: &granted) }
        return granted
    }

    /// Takes a waiting request back. `nil` when it is not waiting (granted already, or never queued);
    /// otherwise the requests its departure lets through (it may have blocked the head of a line).
    mutating func withdraw(_ id: UInt64) -> [(UInt64, Waiter)]? {
        guard let request = waiting.removeValue(forKey: id) else { return nil }
        withdrawn[id] = request.lanes.count
        var granted: [(UInt64, Waiter)] = []
        for lane in request.lanes { grantFromHead(of: lane, into: &granted) }
        return granted
    }

    /// Who holds `lane` now, oldest id first, for the live view.
    func holders(of lane: Lane) -> [(id: UInt64, waiter: Waiter)] {
        guard let holders = lanes[lane]?.holders else { return [] }
        return holders.map { (id: $0.key, waiter: $0.value) }.sorted { $0.id < $1.id }
    }

    /// Whether the table holds nothing and nobody waits: what a test checks once everything finished.
    var isIdle: Bool {
        waiting.isEmpty && lanes.values.allSatisfy { $0.held == 0 && $0.waitingCount == 0 }
    }

    private mutating func take(_ lane: Lane, for id: UInt64, _ waiter: Waiter) {
        lanes[lane, default: LaneState()].holders[id] = waiter
    }

    /// Drops withdrawn ids from the head of `lane`'s line.
    private mutating func skipWithdrawn(in lane: Lane) {
        guard var state = lanes[lane] else { return }
        while let first = state.first, let left = withdrawn[first] {
            state.popFirst()
            withdrawn[first] = left > 1 ? left - 1 : nil
        }
        lanes[lane] = state
    }

    /// Grants the head of `lane`'s line while it fits, cascading to the lanes each grant pops.
    private mutating func grantFromHead(of start: Lane, into granted: inout [(UInt64, Waiter)]) {
        var pending = [start]
        while let lane = pending.popLast() {
            skipWithdrawn(in: lane)
            if let state = lanes[lane], state.held == 0, state.waitingCount == 0 {
                // Nobody holds or wants it: forget it (lanes under a composite come and go with it).
                lanes[lane] = nil
                continue
            }
            guard let state = lanes[lane], let id = state.first, state.held < limit(of: lane.name),
                let request = waiting[id]
            else { continue }
            // Granted only when it heads every line it waits in and every lane has room.
            for other in request.lanes where other != lane { skipWithdrawn(in: other) }
            let fits = request.lanes.allSatisfy { other in
                guard let otherState = lanes[other] else { return false }
                return otherState.first == id && otherState.held < limit(of: other.name)
            }
            guard fits else { continue }
            waiting[id] = nil
            for other in request.lanes {
                lanes[other]?.popFirst()
                take(other, for: id, request.waiter)
            }
            granted.append((id, request.waiter))
            // The lines it left may now let their next request through.
            pending.append(contentsOf: request.lanes)
        }
    }
}

/// One line of exclusion: a category, in a scope, at one level of the composite tree. A child whose
/// ancestor holds the category claims it under that ancestor (`under` is the ancestor's serial number),
/// so it contends with its siblings, never with the ancestor; top-level claims have `under == 0`.
struct Lane: Hashable, Sendable {
    struct Name: Hashable, Sendable {
        let scope: ObjectIdentifier
        let category: String
    }
    let name: Name
    let under: UInt64
}
