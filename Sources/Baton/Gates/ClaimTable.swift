import Dispatch

/// Who holds which category, and who waits for it: every decision about a claim (grant now, queue,
/// release, withdraw) is one call on this struct under the gatekeeper's one lock, and returns the
/// requests it granted, which the caller wakes once the lock is released. It calls nothing and waits
/// for nothing, so tests drive it directly. Its lanes' states live in records it owns (see
/// ``LaneMap``): a copy would share them, so it is never copied (the gatekeeper keeps one behind its
/// lock; a test keeps one in a variable).
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
    ///
    /// A lane of limit 1 without a pace, outside composites (nearly every lane), needs only its limit,
    /// its holder and its line: what other lanes need besides (more holders, a pace and its recent
    /// grants, a lender's hold to give back) lives in ``Uncommon``, made when first needed. A record
    /// is made for every lane in use, and a burst of claims on distinct categories keeps one per claim
    /// alive: with those fields inline a record took 240 bytes of the heap, now 120, which glibc keeps
    /// in its fast bins (freeing a larger block beside much free memory merges them and makes it
    /// sweep every fast bin: 590 instructions per claim in a burst).
    struct LaneState {
        /// How many may hold it at once, and where the line starts: 32 bits each, which no count of
        /// live operations reaches (a limit above it is clamped, and means no limit all the same).
        private var limitAndHead: (limit: Int32, head: Int32)
        /// The first holder, kept inline: a lane of limit 1 (exclusivity, the common case) never
        /// allocates for its holders.
        var holder: (id: UInt64, waiter: Waiter)?
        /// Waiting request ids, oldest first from `head`.
        var line: [UInt64] = []
        /// The fields few lanes need, out of line. Its own copy for each state that changes it (made
        /// anew when shared), so a `LaneState` stays a value.
        private var uncommon: Uncommon?

        /// What a lane needs beyond one holder and a line.
        final class Uncommon {
            /// The holders beyond the first, for limits above 1. A request names a lane once, so an id
            /// holds a lane at most once.
            var otherHolders: [WaiterKey: Waiter] = [:]
            /// How fast grants may follow each other, if the category has a pace.
            var pace: Pace?
            /// The times of the last `pace.count` grants, a ring: once full, `recent[nextRecent]` is
            /// the oldest. Kept only under a pace.
            var recent: [UInt64] = []
            var nextRecent = 0
            /// For a lane under a composite: the lane that composite holds, when it gave it back while
            /// this one was still in use (see ``ClaimTable/release(_:by:)``). Given back for it once
            /// this one is unused.
            var lenderRelease: Lane?

            init() {}

            init(copying other: Uncommon) {
                otherHolders = other.otherHolders
                pace = other.pace
                recent = other.recent
                nextRecent = other.nextRecent
                lenderRelease = other.lenderRelease
            }
        }

        /// How many may hold it at once.
        var limit: Int {
            get { Int(limitAndHead.limit) }
            set { limitAndHead.limit = Int32(clamping: newValue) }
        }

        /// Where the waiting line starts in `line`.
        var head: Int {
            get { Int(limitAndHead.head) }
            set { limitAndHead.head = Int32(truncatingIfNeeded: newValue) }
        }

        init(limit: Int, pace: Pace? = nil) {
            limitAndHead = (Int32(clamping: limit), 0)
            if let pace { madeUncommon().pace = pace }
        }

        /// The uncommon fields, made on first use, and copied first when another state shares them.
        private mutating func madeUncommon() -> Uncommon {
            if uncommon == nil {
                uncommon = Uncommon()
            } else if !isKnownUniquelyReferenced(&uncommon!) {
                uncommon = Uncommon(copying: uncommon!)
            }
            return uncommon!
        }

        /// Whether the uncommon fields were made (for tests: a lane that needs none must not pay for them).
        var hasUncommon: Bool { uncommon != nil }
        /// Which out-of-line part the state keeps, if any: a test seam that tells a copy from the part kept.
        var uncommonIdentity: ObjectIdentifier? { uncommon.map(ObjectIdentifier.init) }

        /// The holders beyond the first.
        var otherHolders: [WaiterKey: Waiter] { uncommon?.otherHolders ?? [:] }
        /// How fast grants may follow each other, if the category has a pace.
        var pace: Pace? { uncommon?.pace }
        /// The lane to give back for its lender once this one is unused (see ``Uncommon``).
        var lenderRelease: Lane? {
            get { uncommon?.lenderRelease }
            set { if newValue != nil || uncommon != nil { madeUncommon().lenderRelease = newValue } }
        }

        var held: Int { (holder == nil ? 0 : 1) + (uncommon?.otherHolders.count ?? 0) }
        func isHeld(by id: UInt64) -> Bool { holder?.id == id || uncommon?.otherHolders[WaiterKey(id)] != nil }
        var hasRoom: Bool { held < limit }
        var waitingCount: Int { line.count - head }
        var first: UInt64? { head < line.count ? line[head] : nil }
        /// Nobody holds or wants it (a lane under a pace may still remember grants: see `paceCools`).
        var isUnused: Bool { holder == nil && head == line.count && uncommon?.otherHolders.isEmpty != false }

        /// `nil` when the pace lets a grant through at `now` (or there is none); otherwise when it will:
        /// the oldest of the last `count` grants leaves the window.
        func paceDue(at now: UInt64) -> UInt64? {
            guard let uncommon, let pace = uncommon.pace, uncommon.recent.count == pace.count else { return nil }
            let due = uncommon.recent[uncommon.nextRecent] &+ pace.interval
            return due <= now ? nil : due
        }

        /// When its newest grant leaves the window: until then the lane is kept, even unused, or a new
        /// record would forget the grants and let too many through.
        var paceCools: UInt64 {
            guard let uncommon, let pace = uncommon.pace, !uncommon.recent.isEmpty else { return 0 }
            let recent = uncommon.recent
            let newest =
                recent.count < pace.count
                ? recent[recent.count - 1] : recent[(uncommon.nextRecent + pace.count - 1) % pace.count]
            return newest &+ pace.interval
        }

        mutating func noteGrant(at now: UInt64) {
            guard let pace else { return }
            let uncommon = madeUncommon()
            if uncommon.recent.count < pace.count {
                uncommon.recent.append(now)
            } else {
                uncommon.recent[uncommon.nextRecent] = now
                uncommon.nextRecent = (uncommon.nextRecent + 1) % pace.count
            }
        }

        /// A new pace keeps the newest grants that fit it.
        mutating func setPace(_ new: Pace?) {
            guard new != nil || uncommon != nil else { return }
            let uncommon = madeUncommon()
            let recent = uncommon.recent
            let ordered =
                recent.count < (uncommon.pace?.count ?? 0)
                ? recent : Array(recent[uncommon.nextRecent...] + recent[..<uncommon.nextRecent])
            uncommon.pace = new
            uncommon.recent = new.map { Array(ordered.suffix($0.count)) } ?? []
            uncommon.nextRecent = 0
        }

        mutating func addHolder(_ id: UInt64, _ waiter: Waiter) {
            assert(!isHeld(by: id), "an operation holds a lane at most once")
            if holder == nil { holder = (id, waiter) } else { madeUncommon().otherHolders[WaiterKey(id)] = waiter }
        }

        /// `false` when `id` did not hold it.
        mutating func removeHolder(_ id: UInt64) -> Bool {
            takeHolder(id) != nil
        }

        /// Removes `id`'s hold and returns its waiter (`nil` when it held none).
        mutating func takeHolder(_ id: UInt64) -> Waiter? {
            if let first = holder, first.id == id {
                holder = nil
                return first.waiter
            }
            guard uncommon?.otherHolders[WaiterKey(id)] != nil else { return nil }
            return madeUncommon().otherHolders.removeValue(forKey: WaiterKey(id))
        }

        /// Gives back the holders' table a burst grew, as a removed record would.
        mutating func shrinkHolders() {
            // Not bound first: a binding is a second reference, and madeUncommon() would copy the part.
            if (uncommon?.otherHolders.capacity ?? 0) > 16 { madeUncommon().otherHolders = [:] }
        }

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
        /// Its operation holds a worker of its queue while it waits: it is put first in its lines.
        var holdsWorker = false
    }

    /// The lanes in use (held, or waited for); a lane nobody holds or wants is dropped. A lane is
    /// looked up once per step, and changed in place through its record.
    private(set) var lanes = LaneMap<LaneState>()
    private(set) var waiting: [WaiterKey: Request] = [:]
    /// Requests taken back while waiting, with how many line entries of theirs are still to be dropped
    /// (lazily, when each reaches the head of its line).
    private var withdrawn: [WaiterKey: Int] = [:]
    private var limits: [Lane.Name: Int] = [:]
    /// How many lanes under a composite are in use: while none is, a release has no lent lane to look
    /// for (one lookup less per release on the usual path).
    private var lentLanes = 0
    /// The record of the lane that fell unused last, kept in the map for the next claim of that lane:
    /// a category claimed by one operation after another (the steps of a sequence, say) finds its lane
    /// instead of inserting and removing a record each time (about 1,300 instructions per claim,
    /// callgrind). At most one, holding no operation; only a top-level lane, and only while no category
    /// has a rate (a paced lane is kept while its grants cool, by its own rule).
    private var idle: LaneMap<LaneState>.Record?
    /// Waiters the table let go of in a step for an operation other than the one it serves: a
    /// composite's kept hold, given back once what it lent is unused. A waiter holds its operation,
    /// whose last reference this may be: it must not be freed under the table's lock (its deinit, or a
    /// scope's, may call the table), so the gatekeeper takes them after each step (``takeLetGo()``).
    private(set) var letGo: [Waiter] = []

    /// Takes what ``letGo`` holds.
    mutating func takeLetGo() -> [Waiter] {
        defer { letGo = [] }
        return letGo
    }

    /// Paces by name. While it is empty no lane has a pace, and every pace check is skipped without
    /// reading the lane's record (on the hot path, a record is usually cold in the cache).
    private var paces: [Lane.Name: Pace] = [:]
    /// Lanes to look at again at a time: a line whose head only its pace holds back (when it lets the
    /// head through), or an unused lane that still remembers recent grants (when it may be forgotten).
    private(set) var timed = Timeline()
    /// The deadline the gatekeeper last armed a timer for, until that timer's call to ``advance()``.
    private var armed: UInt64?
    /// The earliest time a lane was timed for since a deadline was last taken, when it comes before
    /// the armed one.
    private var sooner: UInt64?
    /// The clock paces are read on, in nanoseconds (read only where a lane has a pace); tests set theirs.
    var clock: @Sendable () -> UInt64 = { DispatchTime.now().uptimeNanoseconds }

    /// How many may hold `name` at once (1 unless set).
    func limit(of name: Lane.Name) -> Int { limits.isEmpty ? 1 : limits[name] ?? 1 }

    /// How fast grants of `name` may follow each other (`nil`: as fast as holders finish).
    func pace(of name: Lane.Name) -> Pace? { paces.isEmpty ? nil : paces[name] }

    /// Changes a pace (`nil` removes it); requests it now lets through are granted.
    mutating func setPace(_ pace: Pace?, of name: Lane.Name) -> [(UInt64, Waiter)] {
        paces[name] = pace
        var granted: [(UInt64, Waiter)] = []
        for record in lanes.records where record.lane.name == name {
            record.state.setPace(pace)
            grantFromHead(of: record, into: &granted)
        }
        lanes.shrinkIfSparse()
        return granted
    }

    /// A timer armed by the gatekeeper fired: grants what the paces of the lanes now due let through,
    /// and forgets the unused lanes whose grants have left their window. It takes only the lanes due,
    /// earliest first, from the timeline's heap.
    mutating func advance() -> [(UInt64, Waiter)] {
        let now = clock()
        // The timer armed last has fired (or is due, and will find nothing): another may be armed.
        if let armed, armed <= now { self.armed = nil }
        var granted: [(UInt64, Waiter)] = []
        // A lane timed again while this runs is timed later than `now` (a pace holds only a grant
        // that is not due yet), so the loop ends.
        while let lane = timed.popDue(at: now) {
            guard let record = lanes.record(for: lane) else { continue }
            grantFromHead(of: record, into: &granted)
        }
        lanes.shrinkIfSparse()
        // What is left is looked at again at its earliest time, unless a timer is armed already: every
        // entry timed since that timer was armed is later than it, or it was armed for that entry.
        if armed == nil, let earliest = timed.earliest(), earliest < sooner ?? .max { sooner = earliest }
        return granted
    }

    /// The deadline to arm a timer for, when a lane was timed before any armed: taken by the
    /// gatekeeper after each change, under the same lock.
    mutating func deadlineToArm() -> UInt64? {
        guard let sooner else { return nil }
        self.sooner = nil
        armed = sooner
        return sooner
    }

    /// Times `lane` to be looked at again at `due`, worked out from its state now, so it replaces an
    /// earlier time (a pace may have changed). A time before the armed timer's is kept for
    /// ``deadlineToArm()``: no step scans the timed lanes to find it.
    private mutating func time(_ lane: Lane, at due: UInt64) {
        timed.set(lane, at: due)
        if due < armed ?? .max, due < sooner ?? .max { sooner = due }
    }

    /// Whether `record`'s pace holds back a grant now; if so the lane is timed for when it will not.
    private mutating func paceHolds(_ record: LaneMap<LaneState>.Record) -> Bool {
        guard !paces.isEmpty, record.state.pace != nil, let due = record.state.paceDue(at: clock()) else {
            return false
        }
        time(record.lane, at: due)
        return true
    }

    /// Counts a grant of `record`'s lane against its pace, if it has one.
    private func noteGrant(of record: LaneMap<LaneState>.Record) {
        if !paces.isEmpty, record.state.pace != nil { record.state.noteGrant(at: clock()) }
    }

    /// Forgets the limits set in a scope that is gone. Its lanes are gone already (an operation that
    /// claims a category keeps its scope alive), but a limit is kept by the scope's identity, which a
    /// scope made later may take over.
    mutating func forgetLimits(of scope: ObjectIdentifier) {
        // A scope made later at the same address must not find the kept lane (or its limit).
        if let kept = idle, kept.lane.name.scope == scope {
            idle = nil
            if kept.state.isUnused { remove(kept) }
        }
        if !limits.isEmpty { limits = limits.filter { $0.key.scope != scope } }
        guard paces.keys.contains(where: { $0.scope == scope }) else { return }
        paces = paces.filter { $0.key.scope != scope }
        // Its paced lanes still cooling go too: a scope made later at the same address must not find
        // their grants.
        for record in lanes.records where record.lane.name.scope == scope && record.state.isUnused {
            timed.remove(record.lane)
            remove(record)
        }
        lanes.shrinkIfSparse()
    }

    /// Changes a limit; requests that now fit are granted.
    mutating func setLimit(_ limit: Int, of name: Lane.Name) -> [(UInt64, Waiter)] {
        limits[name] = limit
        var granted: [(UInt64, Waiter)] = []
        for record in lanes.records where record.lane.name == name {
            record.state.limit = limit
            grantFromHead(of: record, into: &granted)
        }
        lanes.shrinkIfSparse()
        return granted
    }

    /// Asks for every lane of `lanes` (each named once) at once. `true`: granted now, and `waiter` is
    /// kept as the lanes' holder. `false`: the request waits in every lane's line until
    /// ``release(_:by:)`` or another call grants it, or ``withdraw(_:)`` takes it back.
    mutating func request(_ id: UInt64, lanes wanted: [Lane], waiter: Waiter) -> Bool {
        if wanted.count == 1 {
            // One lane, one lookup: take it when it is free and nobody waits, or join its line.
            let lane = wanted[0]
            guard let record = lanes.record(for: lane) else {
                // Made in its record, not copied into it (a copy and a destroy of the state cost about
                // 450 instructions per uncontended claim, callgrind).
                let record = lanes.insert(lane, LaneState(limit: limit(of: lane.name), pace: pace(of: lane.name)))
                if lane.under != 0 { lentLanes += 1 }
                record.state.holder = (id, waiter)
                noteGrant(of: record)
                return true
            }
            guard record.state.waitingCount == 0, record.state.hasRoom, !paceHolds(record) else {
                record.state.line.append(id)
                waiting[WaiterKey(id)] = Request(lanes: wanted, waiter: waiter)
                return false
            }
            record.state.addHolder(id, waiter)
            noteGrant(of: record)
            return true
        }
        var records = wanted.map { lanes.record(for: $0) }
        var free = true
        for record in records {
            guard let record else { continue }
            if record.state.waitingCount != 0 || !record.state.hasRoom || paceHolds(record) {
                free = false
                break
            }
        }
        if !free { waiting[WaiterKey(id)] = Request(lanes: wanted, waiter: waiter) }
        for (index, lane) in wanted.enumerated() {
            let record = records[index] ?? insert(lane)
            records[index] = record
            if free {
                record.state.addHolder(id, waiter)
                noteGrant(of: record)
            } else {
                record.state.line.append(id)
            }
        }
        // Heading a line that only a pace holds back, it must be timed, or nothing would grant it.
        if !free && !paces.isEmpty {
            for case let record? in records where record.state.first == id && record.state.hasRoom {
                _ = paceHolds(record)
            }
        }
        return free
    }

    /// Asks for `lanes` for a request whose operation holds a worker of its queue while it waits (see
    /// ``Admission/holdsWorker``): granted when every lane has room, whoever waits, or put first in
    /// every line. `nil`: granted now. Otherwise the holders of the lanes without room, which the
    /// caller asks to give them back if they have not started (``AsyncOperation/yieldLanes()``).
    ///
    /// Requests put first are still in one order in every line they share (the later one first), so
    /// the table stays deadlock-free; they go ahead of the others because their operations cannot
    /// give back what they hold (a worker) while they wait, and those behind them can.
    mutating func requestFirst(_ id: UInt64, lanes wanted: [Lane], waiter: Waiter) -> [Waiter]? {
        let records = wanted.map { lanes.record(for: $0) ?? insert($0) }
        var fits = true
        for record in records where !record.state.hasRoom || paceHolds(record) {
            fits = false
            break
        }
        guard !fits else {
            for record in records {
                record.state.addHolder(id, waiter)
                noteGrant(of: record)
            }
            return nil
        }
        waiting[WaiterKey(id)] = Request(lanes: wanted, waiter: waiter, holdsWorker: true)
        for record in records { Self.putFirst(id, in: &record.state) }
        // Heading a line that only a pace holds back, it must be timed, or nothing would grant it.
        if !paces.isEmpty {
            for record in records where record.state.hasRoom { _ = paceHolds(record) }
        }
        return Self.holders(of: records.filter { !$0.state.hasRoom })
    }

    /// Puts waiting request `id` first in every line it waits in: its operation now holds a worker of
    /// its queue (see ``requestFirst(_:lanes:waiter:)``). Returns the requests this lets through (it
    /// may now be granted), and the holders of its lanes without room. Nothing when it is not waiting.
    mutating func putFirst(_ id: UInt64) -> (granted: [(UInt64, Waiter)], holders: [Waiter]) {
        guard let request = waiting[WaiterKey(id)] else { return ([], []) }
        waiting[WaiterKey(id)]?.holdsWorker = true
        let records = request.lanes.compactMap { lanes.record(for: $0) }
        for record in records {
            if !withdrawn.isEmpty { Self.skip(&withdrawn, in: &record.state) }
            let line = record.state.line
            if let index = line[record.state.head...].firstIndex(of: id) { record.state.line.remove(at: index) }
            Self.putFirst(id, in: &record.state)
        }
        var granted: [(UInt64, Waiter)] = []
        for record in records { grantFromHead(of: record, into: &granted) }
        lanes.shrinkIfSparse()
        guard waiting[WaiterKey(id)] != nil else { return (granted, []) }
        return (granted, Self.holders(of: records.filter { !$0.state.hasRoom }))
    }

    /// The holders of `name`'s lanes that have no room while a request whose operation holds a worker
    /// heads their line (such requests go first, so the head is one if any waits): a limit lowered
    /// under it took the room it was waiting for.
    mutating func holdersKeepingWorkerHolders(of name: Lane.Name) -> [Waiter] {
        var blocked: [LaneMap<LaneState>.Record] = []
        for record in lanes.records where record.lane.name == name && !record.state.hasRoom {
            if !withdrawn.isEmpty { Self.skip(&withdrawn, in: &record.state) }
            guard let first = record.state.first, waiting[WaiterKey(first)]?.holdsWorker == true else { continue }
            blocked.append(record)
        }
        return Self.holders(of: blocked)
    }

    private static func putFirst(_ id: UInt64, in state: inout LaneState) {
        if state.head > 0 {
            state.head -= 1
            state.line[state.head] = id
        } else {
            state.line.insert(id, at: 0)
        }
    }

    /// The holders of `records`' lanes, each once.
    private static func holders(of records: [LaneMap<LaneState>.Record]) -> [Waiter] {
        var seen = Set<UInt64>()
        var holders: [Waiter] = []
        for record in records {
            if let first = record.state.holder, seen.insert(first.id).inserted { holders.append(first.waiter) }
            for (key, waiter) in record.state.otherHolders where seen.insert(key.id).inserted { holders.append(waiter) }
        }
        return holders
    }

    private mutating func insert(_ lane: Lane) -> LaneMap<LaneState>.Record {
        if lane.under != 0 { lentLanes += 1 }
        return lanes.insert(lane, LaneState(limit: limit(of: lane.name), pace: pace(of: lane.name)))
    }

    /// `record`'s lane fell unused: it is kept as the idle lane (the one kept before, if still unused,
    /// is removed), or removed.
    private mutating func retire(_ record: LaneMap<LaneState>.Record) {
        guard paces.isEmpty, record.lane.under == 0 else { return remove(record) }
        if let kept = idle, kept !== record, kept.state.isUnused { remove(kept) }
        // What a burst left in it (its line's buffer, its holders' table) is given back, as a removed
        // record would give it.
        if record.state.line.capacity > 16 { record.state.line = [] }
        record.state.shrinkHolders()
        idle = record
    }

    private mutating func remove(_ record: LaneMap<LaneState>.Record) {
        if record.lane.under != 0 { lentLanes -= 1 }
        lanes.remove(record)
    }

    /// Whether every lane of `wanted` under a composite is still lent: the composite holds the lane it
    /// lends from (``Lane/lender``). A composite gives its categories back as it finishes (unless
    /// a lane it lends is in use: see ``release(_:by:)``), and a claim that found its lanes just before
    /// must then be made where it now belongs, or it would be granted in a lane nobody lends.
    func lendersHold(_ wanted: [Lane]) -> Bool {
        for lane in wanted where lane.under != 0 {
            guard let lender = lane.lender else { continue }
            guard let held = lanes.record(for: Lane(name: lane.name, under: lender)), held.state.isHeld(by: lane.under) else {
                return false
            }
        }
        return true
    }

    /// Gives back every lane `id` held; returns the requests this lets through.
    ///
    /// A lane that `id` lends (its lane of the same category under `id`, where its descendants claim
    /// it) and that is still in use keeps `id`'s hold: `id` is a composite that finished while
    /// something it lent the category to (a condition's produced operation launched on its queue)
    /// still holds it or waits for it. The hold is given back once that lane is unused, so the
    /// category never has more holders executing than its limit.
    mutating func release(_ held: [Lane], by id: UInt64) -> [(UInt64, Waiter)] {
        var granted: [(UInt64, Waiter)] = []
        for lane in held {
            if lentLanes > 0, let lent = lanes.record(for: Lane(name: lane.name, under: id)) {
                if !withdrawn.isEmpty { Self.skip(&withdrawn, in: &lent.state) }
                if !lent.state.isUnused {
                    lent.state.lenderRelease = lane
                    continue
                }
            }
            guard let record = lanes.record(for: lane), record.state.removeHolder(id) else { continue }
            grantFromHead(of: record, into: &granted)
        }
        lanes.shrinkIfSparse()
        return granted
    }

    /// Takes a waiting request back. `nil` when it is not waiting (granted already, or never queued);
    /// otherwise the requests its departure lets through (it may have blocked the head of a line).
    mutating func withdraw(_ id: UInt64) -> [(UInt64, Waiter)]? {
        guard let request = waiting.removeValue(forKey: WaiterKey(id)) else { return nil }
        withdrawn[WaiterKey(id)] = request.lanes.count
        var granted: [(UInt64, Waiter)] = []
        for lane in request.lanes {
            guard let record = lanes.record(for: lane) else { continue }
            grantFromHead(of: record, into: &granted)
        }
        lanes.shrinkIfSparse()
        return granted
    }

    /// Who holds `lane` now, oldest id first, for the live view.
    func holders(of lane: Lane) -> [(id: UInt64, waiter: Waiter)] {
        guard let state = lanes[lane] else { return [] }
        var holders = state.otherHolders.map { (id: $0.key.id, waiter: $0.value) }
        if let first = state.holder { holders.append(first) }
        return holders.sorted { $0.id < $1.id }
    }

    /// Whether the table holds nothing and nobody waits: what a test checks once everything finished.
    var isIdle: Bool {
        waiting.isEmpty && lanes.records.allSatisfy { $0.state.held == 0 && $0.state.waitingCount == 0 }
    }

    /// Drops withdrawn ids from the head of a line.
    private static func skip(_ withdrawn: inout [WaiterKey: Int], in state: inout LaneState) {
        while let first = state.first, let left = withdrawn[WaiterKey(first)] {
            state.popFirst()
            withdrawn[WaiterKey(first)] = left > 1 ? left - 1 : nil
        }
    }

    /// Grants the head of a lane's line while it fits, cascading to the lanes each grant pops.
    private mutating func grantFromHead(of start: LaneMap<LaneState>.Record, into granted: inout [(UInt64, Waiter)]) {
        // The lane released first needs no list: most releases look at one lane and grant nobody.
        var next: LaneMap<LaneState>.Record? = start
        var pending: [LaneMap<LaneState>.Record] = []
        while let record = next ?? pending.popLast() {
            next = nil
            if !withdrawn.isEmpty { Self.skip(&withdrawn, in: &record.state) }
            if record.state.isUnused {
                // A lent lane's lender finished while it was in use: its hold is given back now.
                if let lender = record.state.lenderRelease {
                    record.state.lenderRelease = nil
                    if let held = lanes.record(for: lender), let waiter = held.state.takeHolder(record.lane.under) {
                        letGo.append(waiter)
                        pending.append(held)
                    }
                }
                // Nobody holds or wants it: forget it (lanes under a composite come and go with it),
                // unless its pace still counts recent grants: then once they have left the window.
                if !paces.isEmpty, record.state.pace != nil, case let cools = record.state.paceCools, cools > clock() {
                    time(record.lane, at: cools)
                    continue
                }
                retire(record)
                continue
            }
            guard record.state.hasRoom, let id = record.state.first, let index = waiting.index(forKey: WaiterKey(id)) else {
                continue
            }
            if paceHolds(record) { continue }
            let request = waiting.values[index]
            if request.lanes.count == 1 {
                // It waits in this line alone, and heads it: granted, and the line looked at again.
                waiting.remove(at: index)
                record.state.popFirst()
                record.state.addHolder(id, request.waiter)
                noteGrant(of: record)
                granted.append((id, request.waiter))
                next = record
                continue
            }
            // Granted only when it heads every line it waits in and every lane has room.
            var others: [LaneMap<LaneState>.Record] = []
            others.reserveCapacity(request.lanes.count)
            for lane in request.lanes {
                guard let other = lanes.record(for: lane) else { break }
                if !withdrawn.isEmpty { Self.skip(&withdrawn, in: &other.state) }
                guard other.state.first == id && other.state.hasRoom && !paceHolds(other) else { break }
                others.append(other)
            }
            guard others.count == request.lanes.count else { continue }
            waiting.remove(at: index)
            for other in others {
                other.state.popFirst()
                other.state.addHolder(id, request.waiter)
                noteGrant(of: other)
            }
            granted.append((id, request.waiter))
            // The lines it left may now let their next request through.
            pending.append(contentsOf: others)
        }
    }
}

/// A waiting request's key in the table's dictionaries: its operation's serial number, hashed by
/// mixing its bits with the dictionary's seed instead of through `Hasher` (SipHash, about 100
/// instructions a lookup, four lookups per contended claim, callgrind). Serial numbers are drawn by
/// Baton, never chosen by a caller, so a cheap mix loses nothing.
struct WaiterKey: Hashable {
    let id: UInt64

    init(_ id: UInt64) { self.id = id }

    func hash(into hasher: inout Hasher) { hasher.combine(id) }

    // swift-format-ignore: AlwaysUseLowerCamelCase
    func _rawHashValue(seed: Int) -> Int {
        var x = id ^ UInt64(bitPattern: Int64(seed))
        x = (x ^ (x >> 30)) &* 0xBF58_476D_1CE4_E5B9
        x = (x ^ (x >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int(truncatingIfNeeded: x ^ (x >> 31))
    }
}

/// A pace: at most `count` grants of a lane in any window of `interval` nanoseconds.
struct Pace: Hashable, Sendable {
    let count: Int
    let interval: UInt64

    /// The window, as users give it.
    var window: Duration { .nanoseconds(Int64(clamping: interval)) }
}

/// One line of exclusion: a category, in a scope, at one level of the composite tree. A child whose
/// ancestor holds the category claims it under that ancestor (`under` is the ancestor's serial number),
/// so it contends with its siblings, never with the ancestor; top-level claims have `under == 0`.
struct Lane: Hashable, Sendable {
    /// A category in a scope, with its hash worked out once: tables hash lanes on every step, and a
    /// category's name is a string.
    struct Name: Hashable, Sendable {
        let scope: ObjectIdentifier
        let category: String
        /// The name's hash, worked out once (seeded per process, as every `Hasher` is).
        let hashCode: Int

        init(scope: ObjectIdentifier, category: String) {
            self.scope = scope
            self.category = category
            var hasher = Hasher()
            hasher.combine(scope)
            hasher.combine(category)
            hashCode = hasher.finalize()
        }

        static func == (lhs: Name, rhs: Name) -> Bool {
            lhs.hashCode == rhs.hashCode && lhs.scope == rhs.scope && lhs.category == rhs.category
        }

        func hash(into hasher: inout Hasher) { hasher.combine(hashCode) }
    }
    let name: Name
    let under: UInt64
    /// For a lane under a composite, the `under` of the lane that composite holds and lends from (the
    /// same name, a level up): what ``ClaimTable/lendersHold(_:)`` checks. `nil`: not checked (tests
    /// that drive the table directly). Not part of the lane's identity.
    var lender: UInt64? { lenderOrNone == .max ? nil : lenderOrNone }
    /// ``lender``, with `UInt64.max` (a serial number never drawn) for none: an optional would take a
    /// byte and pad the lane by eight more, in every record of the claim table.
    private let lenderOrNone: UInt64

    init(name: Name, under: UInt64, lender: UInt64? = nil) {
        self.name = name
        self.under = under
        self.lenderOrNone = lender ?? .max
    }

    static func == (lhs: Lane, rhs: Lane) -> Bool { lhs.under == rhs.under && lhs.name == rhs.name }

    func hash(into hasher: inout Hasher) {
        hasher.combine(name)
        hasher.combine(under)
    }
}
