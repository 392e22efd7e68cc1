import Dispatch
import Foundation

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Records how operations ran (their structure, their times, their threads and their outcomes) and
/// turns a run into pictures: a Chrome trace, a Graphviz or Mermaid graph, a text tree.
///
/// ```swift
/// let recorder = FlightRecorder()
/// let group = GroupOperation(operations: [Step(), Step()])
/// recorder.attach(to: group)
/// try group.run(timeout: .seconds(5))
/// print(recorder.export(.textTree))
/// ```
///
/// Attach it where you want to look:
/// - to an operation with ``attach(to:)-(AsyncOperation)``: the operation and, for a composite
///   (group, sequence, retry, tree), everything it runs, to any depth;
/// - to the operations of a chain with ``attach(to:)-([Operation])`` before `addChain`: the chain, its
///   operations and their adapter links;
/// - to a queue with ``attach(to:)-(OperationQueue)``: every Baton operation created afterwards that
///   starts on the queue, and every chain added to it;
/// - to the whole process with ``global``: every Baton operation created while it is set.
///
/// An operation records into one recorder, the first that claims it: the global one when it is
/// created, else the one attached to it, else its recorded composite's or chain's when that hands it to
/// a queue, else its queue's when it starts. A chain records into its first operation's recorder, else
/// its queue's, else the global one.
///
/// ## Cost
/// While no recorder is attached, nothing is recorded, and an operation pays a branch; a composite
/// or a chain reads its own recorder once per launch (a chain also asks the registry of attached
/// queues, once). Recording takes the recorder's lock about three times per operation (when it is
/// handed to a queue, when it starts and when it finishes).
///
/// ## Bounded
/// The recorder keeps the most recent ``capacity`` records, by the order it first saw each operation:
/// a new record replaces the oldest one, which is counted in ``droppedCount``. A run of any length
/// costs at most `capacity` records of memory. Exports treat a record whose parent was dropped as a
/// top-level one.
public final class FlightRecorder: Sendable {
    /// The most records kept.
    public let capacity: Int
    /// `DispatchTime` uptime at creation (read through `Uptime`): record times are offsets from it.
    let origin: UInt64
    private let storage: Mutex<Storage>

    private struct Storage {
        /// The records, in a ring: record `id` lives at `(id - 1) % capacity` until a newer one
        /// takes its place. Kept compact (see `Entry`) and made into ``FlightRecord``s when read.
        var ring = Ring()
        var lastID = 0
        var dropped = 0
        /// The names of the recorded types, by the index an entry keeps.
        var typeNames: [String] = []
        var typeIndices: [ObjectIdentifier: Int32] = [:]
        /// The type recorded last and its index: most records follow one of the same type (a group's
        /// children, a chain's stages), found without hashing.
        var lastType: (id: ObjectIdentifier, index: Int32)?
        var threads: [UInt: Int] = [:]
        /// The threads that started an operation last, with their numbers, looked at before `threads`:
        /// a pool's few workers, found without hashing.
        var recentThreads: [(key: UInt, number: Int)] = []
        /// Operations waiting at their gate, by record id, for the live text tree.
        var waiting: [Int: WeakWaiter] = [:]

        /// The index of `type`'s name, added the first time.
        mutating func typeIndex(of type: Any.Type, kind: FlightRecord.Kind) -> Int32 {
            let id = ObjectIdentifier(type)
            if let last = lastType, last.id == id { return last.index }
            let index: Int32
            if let known = typeIndices[id] {
                index = known
            } else {
                index = Int32(typeNames.count)
                typeNames.append(kind == .chain ? "Chain" : String(describing: type))
                typeIndices[id] = index
            }
            lastType = (id, index)
            return index
        }
    }

    /// A record as the recorder keeps it: plain numbers (times in nanoseconds from `origin`, absent
    /// values as sentinels), the type by index, and what few operations have (a name, dependencies,
    /// waits, a failure) out of line. A ``FlightRecord`` is about 230 bytes with five references to
    /// retain on every copy; this is 96, and copies none while `extra` is `nil`. 100,000 recorded
    /// operations hold 22 MB less, and recording costs fewer instructions per operation.
    struct Entry {
        static let absent = Int64.min

        var id: Int
        var parentID = 0
        var predecessorID = 0
        var position = -1
        var attempt = -1
        var thread = 0
        var enqueuedAt = absent
        var startedAt = absent
        var finishedAt = absent
        var typeIndex: Int32
        var kind: FlightRecord.Kind
        var link: FlightRecord.Link?
        var status = StatusCode.pending
        var observesStart = true
        var extra: Extra?

        enum StatusCode: UInt8 {
            case pending, executing, succeeded, failed, cancelled
            /// Made by a thread that lost the race to record the operation (see `discard(_:)`): never
            /// shown.
            case discarded
        }

        /// What few records have, made on first use.
        final class Extra {
            var name: String?
            var failure = ""
            var dependencyIDs: [Int] = []
            var waits: [FlightRecord.Wait] = []
        }

        init(id: Int, kind: FlightRecord.Kind, typeIndex: Int32) {
            self.id = id
            self.kind = kind
            self.typeIndex = typeIndex
        }

        mutating func madeExtra() -> Extra { extra.made(by: Extra.init) }

        var name: String? {
            get { extra?.name }
            set { if newValue != nil || extra != nil { madeExtra().name = newValue } }
        }

        mutating func set(_ status: FlightRecord.Status) {
            switch status {
            case .pending: self.status = .pending
            case .executing: self.status = .executing
            case .succeeded: self.status = .succeeded
            case .failed(let message):
                self.status = .failed
                madeExtra().failure = message
            case .cancelled: self.status = .cancelled
            }
        }

        mutating func place(_ placement: FlightRecorder.Placement) {
            if let parent = placement.parent { parentID = parent }
            if let position = placement.position { self.position = position }
            if let predecessor = placement.predecessor { predecessorID = predecessor }
            if let link = placement.link { self.link = link }
            if let attempt = placement.attempt { self.attempt = attempt }
        }

        /// The public record, with `typeNames` to name its type.
        func record(typeNames: [String]) -> FlightRecord {
            func time(_ nanoseconds: Int64) -> Duration? {
                nanoseconds == Self.absent ? nil : .nanoseconds(nanoseconds)
            }
            var record = FlightRecord(id: id, kind: kind, typeName: typeNames[Int(typeIndex)])
            record.name = extra?.name
            if parentID != 0 { record.parentID = parentID }
            if position >= 0 { record.position = position }
            if predecessorID != 0 { record.predecessorID = predecessorID }
            record.link = link
            if attempt >= 0 { record.attempt = attempt }
            if let extra {
                record.dependencyIDs = extra.dependencyIDs
                record.waits = extra.waits
            }
            record.enqueuedAt = time(enqueuedAt)
            record.startedAt = time(startedAt)
            record.finishedAt = time(finishedAt)
            if thread != 0 { record.thread = thread }
            switch status {
            case .pending: record.status = .pending
            case .executing: record.status = .executing
            case .succeeded: record.status = .succeeded
            case .failed: record.status = .failed(extra?.failure ?? "")
            case .cancelled, .discarded: record.status = .cancelled
            }
            record.observesStart = observesStart
            return record
        }
    }

    /// An operation waiting at its gate, not kept alive by the recorder.
    struct WeakWaiter {
        weak var operation: AsyncOperation?
    }

    /// The error ``init(capacity:)`` throws for a capacity below 1.
    public struct CapacityError: Error, Sendable, Equatable, CustomStringConvertible {
        /// The capacity that was asked for.
        public let capacity: Int
        /// Says what was wrong.
        public var description: String {
            "a FlightRecorder's capacity must be at least 1, got \(capacity)"
        }
    }

    /// The capacity of a recorder made with ``init()``: 100,000 records (about 30 MB at most).
    public static let defaultCapacity = 100_000

    /// Creates a recorder that keeps the most recent ``defaultCapacity`` records.
    public convenience init() {
        self.init(validCapacity: Self.defaultCapacity)
    }

    /// Creates a recorder that keeps the most recent `capacity` records.
    ///
    /// - Parameter capacity: The most records kept, at least 1.
    /// - Throws: ``CapacityError`` when `capacity` is below 1.
    public convenience init(capacity: Int) throws(CapacityError) {
        guard capacity >= 1 else { throw CapacityError(capacity: capacity) }
        self.init(validCapacity: capacity)
    }

    private init(validCapacity: Int) {
        capacity = validCapacity
        origin = Uptime.nanoseconds()
        storage = Mutex(Storage())
    }

    // MARK: - Attaching

    /// Records `operation` and, for a composite, every operation it runs (and theirs, to any depth).
    ///
    /// Attach before the operation starts: what happened before is not recorded (attached once it
    /// has finished, the record has its outcome but no times). An operation that already records into
    /// another recorder (a global one, say) stays with it.
    ///
    /// - Parameter operation: The operation.
    public func attach(to operation: AsyncOperation) {
        operation.record(into: self, placement: nil, enqueued: false)
    }

    /// Records each of `operations`: attach a chain's operations this way before `addChain`, and the
    /// chain is recorded too, with each operation's position and the adapter links between them.
    ///
    /// Foundation operations (not Baton ones) cannot carry a recorder of their own; in a chain whose
    /// first operation is recorded, they are recorded as the chain runs them.
    ///
    /// - Parameter operations: The operations.
    public func attach(to operations: [Operation]) {
        for case let operation as AsyncOperation in operations { attach(to: operation) }
    }

    /// Records every chain added to `queue` from now on, and every Baton operation that is created
    /// from now on and starts on `queue` (with, for a composite, everything it runs).
    ///
    /// The queue is held weakly; ``detach(from:)`` stops recording it.
    ///
    /// - Parameter queue: The queue.
    public func attach(to queue: OperationQueue) {
        RecordingRegistry.attach(self, to: queue)
    }

    /// Stops recording the chains and operations that start on `queue` from now on (those already
    /// recorded go on being recorded until they finish).
    ///
    /// - Parameter queue: The queue.
    public func detach(from queue: OperationQueue) {
        RecordingRegistry.detach(self, from: queue)
    }

    /// The recorder every Baton operation created while it is set records into (with, for a
    /// composite, everything it runs, and every chain added while it is set); `nil`, the default,
    /// records nothing.
    ///
    /// ```swift
    /// FlightRecorder.global = FlightRecorder()
    /// defer { FlightRecorder.global = nil }
    /// ```
    public static var global: FlightRecorder? {
        get { RecordingRegistry.global }
        set { RecordingRegistry.global = newValue }
    }

    // MARK: - Reading

    /// The records kept, by ``FlightRecord/id``: one snapshot, taken at one instant.
    ///
    /// A Baton operation's record ends before the operation reads as finished, so a snapshot taken
    /// once `isFinished` is `true` shows it ended. A Foundation operation's record ends when its
    /// completion runs, just after it reads as finished.
    public var records: [FlightRecord] {
        // Made under the lock: an entry's out-of-line part changes under it.
        storage.withLock { storage in
            let split = storage.lastID % capacity
            let all = storage.ring.all
            let ordered = all.count == capacity && split != 0 ? Array(all[split...] + all[..<split]) : all
            return ordered.compactMap { $0.status == .discarded ? nil : $0.record(typeNames: storage.typeNames) }
        }
    }

    /// How many records were dropped to stay within ``capacity``.
    public var droppedCount: Int {
        storage.withLock { $0.dropped }
    }

    // MARK: - Recording (internal)

    /// Where a record sits in the structure.
    struct Placement {
        var parent: Int?
        var position: Int?
        var predecessor: Int?
        var link: FlightRecord.Link?
        var attempt: Int?
    }

    /// The offset of now from the recorder's creation.
    func now() -> Duration {
        .nanoseconds(nanosecondsNow())
    }

    /// The offset of now from the recorder's creation, in nanoseconds.
    func nanosecondsNow() -> Int64 {
        Int64(bitPattern: Uptime.nanoseconds() &- origin)
    }

    /// Makes a new record and returns its id; the oldest record makes way when the ring is full.
    func register(
        kind: FlightRecord.Kind, type: Any.Type, name: String?, placement: Placement?, enqueued: Bool,
        observesStart: Bool = true
    ) -> Int {
        let time = enqueued ? nanosecondsNow() : Entry.absent
        return storage.withLock { storage in
            storage.lastID += 1
            var entry = Entry(id: storage.lastID, kind: kind, typeIndex: storage.typeIndex(of: type, kind: kind))
            entry.name = name
            entry.enqueuedAt = time
            entry.observesStart = observesStart
            if let placement { entry.place(placement) }
            let id = entry.id
            if storage.ring.count < capacity {
                storage.ring.append(entry, capacity: capacity)
            } else {
                storage.ring.replace((id - 1) % capacity, with: entry)
                storage.dropped += 1
            }
            return id
        }
    }

    /// Updates a record (if it is still kept).
    private func update(_ id: Int, _ change: (inout Entry) -> Void) {
        storage.withLock { storage in update(id, in: &storage, change) }
    }

    /// Updates a record (if it is still kept), under the lock.
    private func update(_ id: Int, in storage: inout Storage, _ change: (inout Entry) -> Void) {
        let slot = (id - 1) % capacity
        guard slot < storage.ring.count else { return }
        storage.ring.change(slot) { record in
            if record.id == id { change(&record) }
        }
    }

    /// Places an existing record in a parent, as it is handed to a queue.
    func place(_ id: Int, _ placement: Placement, enqueued: Bool) {
        let time = enqueued ? nanosecondsNow() : Entry.absent
        update(id) { entry in
            entry.place(placement)
            if time != Entry.absent { entry.enqueuedAt = time }
        }
    }

    /// The operation started, on this thread, after `dependencies`.
    func started(_ id: Int, dependencies: [Int]) {
        let time = nanosecondsNow()
        let thread = Self.currentThreadKey()
        storage.withLock { storage in
            let number = Self.number(of: thread, in: &storage)
            update(id, in: &storage) { entry in
                entry.startedAt = time
                entry.thread = number
                entry.status = .executing
                if !dependencies.isEmpty { entry.madeExtra().dependencyIDs = dependencies }
            }
        }
    }

    /// The operation began waiting at its gate: the live text tree asks it what for.
    func beganWaiting(_ id: Int, _ operation: AsyncOperation) {
        storage.withLock { $0.waiting[id] = WeakWaiter(operation: operation) }
    }

    /// The operation waited `duration`, ending now, for `what`.
    func waited(_ id: Int, for what: String, _ duration: Duration) {
        let time = now()
        // One lock: the operation stops waiting and its record gains the wait.
        storage.withLock { storage in
            storage.waiting[id] = nil
            update(id, in: &storage) { entry in
                entry.madeExtra().waits.append(FlightRecord.Wait(what: what, began: time - duration, ended: time))
            }
        }
    }

    /// What each operation still waiting at its gate waits for, by record id.
    func waitingNotes() -> [Int: String] {
        let waiting = storage.withLock { $0.waiting }
        var notes = [Int: String]()
        for (id, waiter) in waiting {
            if let note = waiter.operation?.gateWaitDescription() { notes[id] = note }
        }
        return notes
    }

    /// Takes back a record made for an operation that another thread recorded first, at the same
    /// moment: it is never shown. Its id stays used.
    func discard(_ id: Int) {
        update(id) { $0.status = .discarded }
    }

    /// The operation (or chain) finished with `status`.
    func finished(_ id: Int, status: FlightRecord.Status, name: String?) {
        let time = nanosecondsNow()
        // One lock: the operation stops waiting (if it did) and its record ends.
        storage.withLock { storage in
            if !storage.waiting.isEmpty { storage.waiting[id] = nil }
            update(id, in: &storage) { entry in
                entry.finishedAt = time
                entry.set(status)
                if let name { entry.name = name }
            }
        }
    }

    /// The number of `thread`, in the order threads first started an operation here.
    private static func number(of thread: UInt, in storage: inout Storage) -> Int {
        if let recent = storage.recentThreads.first(where: { $0.key == thread }) { return recent.number }
        let number: Int
        if let known = storage.threads[thread] {
            number = known
        } else {
            number = storage.threads.count + 1
            storage.threads[thread] = number
        }
        // A few of them: a pool's workers take turns; a thread seen long ago goes back to the table.
        if storage.recentThreads.count == 8 { storage.recentThreads.removeFirst() }
        storage.recentThreads.append((thread, number))
        return number
    }

    /// The records, in chunks: growing never copies the records already kept.
    struct Ring {
        private static let chunkSize = 4_096
        private var chunks: [[Entry]] = []
        private(set) var count = 0

        mutating func append(_ record: Entry, capacity: Int) {
            if chunks.last.map({ $0.count == Self.chunkSize }) ?? true {
                chunks.append([])
                chunks[chunks.count - 1].reserveCapacity(min(Self.chunkSize, capacity - count))
            }
            chunks[chunks.count - 1].append(record)
            count += 1
        }

        mutating func replace(_ slot: Int, with record: Entry) {
            chunks[slot / Self.chunkSize][slot % Self.chunkSize] = record
        }

        mutating func change(_ slot: Int, _ body: (inout Entry) -> Void) {
            body(&chunks[slot / Self.chunkSize][slot % Self.chunkSize])
        }

        var all: [Entry] { chunks.flatMap { $0 } }
    }

    private static func currentThreadKey() -> UInt {
        #if canImport(Darwin)
        return UInt(bitPattern: pthread_self())
        #else
        return UInt(pthread_self())
        #endif
    }
}

extension FlightRecord.Status {
    /// The status an outcome ends in.
    init<Output>(_ outcome: Outcome<Output>) {
        switch outcome {
        case .succeeded: self = .succeeded
        case .failed(let error): self = .failed(String(describing: error))
        case .cancelled: self = .cancelled
        }
    }

    /// The status a shared outcome ends in, read without copying its output.
    init(_ outcome: SharedOutcome) {
        switch outcome.kind {
        case .succeeded: self = .succeeded
        case .failed: self = .failed(String(describing: outcome.error!))
        case .cancelled: self = .cancelled
        }
    }
}
