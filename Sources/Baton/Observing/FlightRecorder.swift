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
    /// `DispatchTime` uptime at creation: record times are offsets from it.
    let origin: UInt64
    private let storage: Mutex<Storage>

    private struct Storage {
        /// The records, in a ring: record `id` lives at `(id - 1) % capacity` until a newer one
        /// takes its place.
        var ring = Ring()
        var lastID = 0
        var dropped = 0
        var typeNames: [ObjectIdentifier: String] = [:]
        /// The type recorded last and its name: most records follow one of the same type (a group's
        /// children, a chain's stages), found without hashing.
        var lastType: (id: ObjectIdentifier, name: String)?
        var threads: [UInt: Int] = [:]
        /// The threads that started an operation last, with their numbers, looked at before `threads`:
        /// a pool's few workers, found without hashing.
        var recentThreads: [(key: UInt, number: Int)] = []
        /// Operations waiting at their gate, by record id, for the live text tree.
        var waiting: [Int: WeakWaiter] = [:]
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
        origin = DispatchTime.now().uptimeNanoseconds
        storage = Mutex(Storage())
    }

    // MARK: - Attaching

    /// Records `operation` and, for a composite, every operation it runs (and theirs, to any depth).
    ///
    /// Attach before the operation starts: what happened before is not recorded. An operation that
    /// already records into another recorder (a global one, say) stays with it.
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
    public var records: [FlightRecord] {
        storage.withLock { storage in
            let split = storage.lastID % capacity
            let all = storage.ring.all
            guard all.count == capacity, split != 0 else { return all }
            return Array(all[split...] + all[..<split])
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
        .nanoseconds(Int64(bitPattern: DispatchTime.now().uptimeNanoseconds &- origin))
    }

    /// Makes a new record and returns its id; the oldest record makes way when the ring is full.
    func register(
        kind: FlightRecord.Kind, type: Any.Type, name: String?, placement: Placement?, enqueued: Bool,
        observesStart: Bool = true
    ) -> Int {
        let typeID = ObjectIdentifier(type)
        let time = enqueued ? now() : nil
        return storage.withLock { storage in
            storage.lastID += 1
            let typeName: String
            if let last = storage.lastType, last.id == typeID {
                typeName = last.name
            } else if let known = storage.typeNames[typeID] {
                typeName = known
                storage.lastType = (typeID, known)
            } else {
                typeName = kind == .chain ? "Chain" : String(describing: type)
                storage.typeNames[typeID] = typeName
                storage.lastType = (typeID, typeName)
            }
            var record = FlightRecord(id: storage.lastID, kind: kind, typeName: typeName)
            record.name = name
            record.enqueuedAt = time
            record.observesStart = observesStart
            if let placement { record.place(placement) }
            let id = record.id
            if storage.ring.count < capacity {
                storage.ring.append(record, capacity: capacity)
            } else {
                storage.ring.replace((id - 1) % capacity, with: record)
                storage.dropped += 1
            }
            return id
        }
    }

    /// Updates a record (if it is still kept).
    private func update(_ id: Int, _ change: (inout FlightRecord) -> Void) {
        storage.withLock { storage in update(id, in: &storage, change) }
    }

    /// Updates a record (if it is still kept), under the lock.
    private func update(_ id: Int, in storage: inout Storage, _ change: (inout FlightRecord) -> Void) {
        let slot = (id - 1) % capacity
        guard slot < storage.ring.count else { return }
        storage.ring.change(slot) { record in
            if record.id == id { change(&record) }
        }
    }

    /// Places an existing record in a parent, as it is handed to a queue.
    func place(_ id: Int, _ placement: Placement, enqueued: Bool) {
        let time = enqueued ? now() : nil
        update(id) { record in
            record.place(placement)
            if let time { record.enqueuedAt = time }
        }
    }

    /// The operation started, on this thread, after `dependencies`.
    func started(_ id: Int, dependencies: [Int]) {
        let time = now()
        let thread = Self.currentThreadKey()
        storage.withLock { storage in
            let number = Self.number(of: thread, in: &storage)
            let slot = (id - 1) % capacity
            guard slot < storage.ring.count else { return }
            storage.ring.change(slot) { record in
                Self.start(&record, id: id, at: time, thread: number, dependencies: dependencies)
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
        storage.withLock { $0.waiting[id] = nil }
        update(id) { record in
            record.waits.append(FlightRecord.Wait(what: what, began: time - duration, ended: time))
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

    /// The operation (or chain) finished with `status`.
    func finished(_ id: Int, status: FlightRecord.Status, name: String?) {
        let time = now()
        // One lock: the operation stops waiting (if it did) and its record ends.
        storage.withLock { storage in
            if !storage.waiting.isEmpty { storage.waiting[id] = nil }
            update(id, in: &storage) { record in
                record.finishedAt = time
                record.status = status
                if let name { record.name = name }
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
        private var chunks: [[FlightRecord]] = []
        private(set) var count = 0

        mutating func append(_ record: FlightRecord, capacity: Int) {
            if chunks.last.map({ $0.count == Self.chunkSize }) ?? true {
                chunks.append([])
                chunks[chunks.count - 1].reserveCapacity(min(Self.chunkSize, capacity - count))
            }
            chunks[chunks.count - 1].append(record)
            count += 1
        }

        mutating func replace(_ slot: Int, with record: FlightRecord) {
            chunks[slot / Self.chunkSize][slot % Self.chunkSize] = record
        }

        mutating func change(_ slot: Int, _ body: (inout FlightRecord) -> Void) {
            body(&chunks[slot / Self.chunkSize][slot % Self.chunkSize])
        }

        var all: [FlightRecord] { chunks.flatMap { $0 } }
    }

    /// One in-place change of a record (one access to the ring).
    private static func start(
        _ record: inout FlightRecord, id: Int, at time: Duration, thread: Int, dependencies: [Int]
    ) {
        guard record.id == id else { return }
        record.startedAt = time
        record.thread = thread
        record.status = .executing
        if !dependencies.isEmpty { record.dependencyIDs = dependencies }
    }

    private static func currentThreadKey() -> UInt {
        #if canImport(Darwin)
        return UInt(bitPattern: pthread_self())
        #else
        return UInt(pthread_self())
        #endif
    }
}

extension FlightRecord {
    fileprivate mutating func place(_ placement: FlightRecorder.Placement) {
        if let parent = placement.parent { parentID = parent }
        if let position = placement.position { self.position = position }
        if let predecessor = placement.predecessor { predecessorID = predecessor }
        if let link = placement.link { self.link = link }
        if let attempt = placement.attempt { self.attempt = attempt }
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
