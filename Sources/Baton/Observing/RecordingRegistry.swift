import Foundation

/// What every new operation reads once, at creation, under one lock it already takes for its serial
/// number: the global recorder, and whether any queue has one. With neither, an operation carries no
/// recording and pays nothing more.
enum RecordingRegistry {
    private struct QueueEntry {
        weak var queue: OperationQueue?
        let recorder: FlightRecorder
    }

    private struct Shared {
        var lastSerial: UInt64 = 0
        var global: FlightRecorder?
        var queues: [ObjectIdentifier: QueueEntry] = [:]
    }

    /// What an operation learns at creation.
    struct Creation {
        let serial: UInt64
        let global: FlightRecorder?
        /// Some queue has a recorder: look the starting queue up at start.
        let looksUpQueue: Bool
    }

    private static let shared = Mutex(Shared())

    static func creation() -> Creation {
        shared.withLock { shared in
            shared.lastSerial += 1
            return Creation(serial: shared.lastSerial, global: shared.global, looksUpQueue: !shared.queues.isEmpty)
        }
    }

    static var global: FlightRecorder? {
        get { shared.withLock { $0.global } }
        set { shared.withLock { $0.global = newValue } }
    }

    static func attach(_ recorder: FlightRecorder, to queue: OperationQueue) {
        shared.withLock { shared in
            shared.queues = shared.queues.filter { $0.value.queue != nil }
            shared.queues[ObjectIdentifier(queue)] = QueueEntry(queue: queue, recorder: recorder)
        }
    }

    static func detach(_ recorder: FlightRecorder, from queue: OperationQueue) {
        shared.withLock { shared in
            let id = ObjectIdentifier(queue)
            if let entry = shared.queues[id], entry.queue == nil || entry.recorder === recorder {
                shared.queues[id] = nil
            }
        }
    }

    /// The recorder attached to `queue`, if any. Entries of freed queues are dropped here (and on
    /// attach), so that operations stop looking queues up once no recorded queue is left.
    static func recorder(for queue: OperationQueue) -> FlightRecorder? {
        shared.withLock { shared in
            if shared.queues.values.contains(where: { $0.queue == nil }) {
                shared.queues = shared.queues.filter { $0.value.queue != nil }
            }
            guard let entry = shared.queues[ObjectIdentifier(queue)], entry.queue === queue else { return nil }
            return entry.recorder
        }
    }

    /// The recorder a chain added to `queue` records into: the queue's, or else the global one.
    static func recorder(forChainOn queue: OperationQueue) -> FlightRecorder? {
        shared.withLock { shared in
            if let entry = shared.queues[ObjectIdentifier(queue)], entry.queue === queue { return entry.recorder }
            return shared.global
        }
    }
}

/// An operation's link to the recorder it records into. A class, so that an operation that records
/// nothing pays one pointer for it.
final class Recording: Sendable {
    let recorder: FlightRecorder
    /// The record's id, or ``unregistered`` for an operation created under a global recorder that has
    /// not been enqueued or started yet: its record is made then, once, with its place.
    let id: Int
    static let unregistered = 0

    init(recorder: FlightRecorder, id: Int) {
        self.recorder = recorder
        self.id = id
    }

    /// Records `child` as run by this record's operation (at `position`, after `predecessor`), as it is
    /// handed to a queue, and returns its record's id. A child already recording into this recorder is
    /// placed; one recording into another recorder is left alone (and `nil` is returned).
    @discardableResult
    func adopt(
        _ child: Operation, position: Int?, after predecessor: Operation? = nil, link: FlightRecord.Link? = nil,
        attempt: Int? = nil
    ) -> Int? {
        var predecessorID: Int?
        if let predecessor = (predecessor as? AsyncOperation)?.recording, predecessor.recorder === recorder,
            predecessor.id != Recording.unregistered
        {
            predecessorID = predecessor.id
        }
        return adopt(
            child,
            FlightRecorder.Placement(
                parent: id, position: position, predecessor: predecessorID, link: link, attempt: attempt))
    }

    /// Records `child` with `placement`, as it is handed to a queue, and returns its record's id.
    @discardableResult
    func adopt(_ child: Operation, _ placement: FlightRecorder.Placement) -> Int? {
        if let baton = child as? AsyncOperation {
            return baton.record(into: recorder, placement: placement, enqueued: true)
        }
        // A Foundation operation: its start cannot be seen, its finish can.
        let id = recorder.register(
            kind: .operation, type: type(of: child), name: child.name, placement: placement, enqueued: true,
            observesStart: false)
        let recorder = self.recorder
        child.observeCompletionOnce { [weak child] in
            recorder.finished(id, status: child?.isCancelled == true ? .cancelled : .succeeded, name: nil)
        }
        return id
    }
}

/// A Baton operation that runs children: recorded as ``FlightRecord/Kind/composite``.
protocol RecordedComposite: AnyObject {}

extension AsyncOperation {
    /// The recording this operation records into, if any.
    var recording: Recording? {
        core.withLock { $0.recording }
    }

    /// Makes this operation record into `recorder` (placed by `placement`), unless it already records
    /// somewhere; an operation already recording into `recorder` is placed. Returns the record's id in
    /// `recorder`, or `nil` when the operation records into another one.
    @discardableResult
    func record(into recorder: FlightRecorder, placement: FlightRecorder.Placement?, enqueued: Bool) -> Int? {
        if let existing = recording {
            guard existing.recorder === recorder else { return nil }
            if existing.id != Recording.unregistered {
                if let placement { recorder.place(existing.id, placement, enqueued: enqueued) }
                return existing.id
            }
        }
        let id = recorder.register(
            kind: self is RecordedComposite ? .composite : .operation, type: recordedType, name: recordedName,
            placement: placement, enqueued: enqueued)
        // Attached from two threads at once, the first stays and the other record is never updated.
        return core.withLock { state in
            if state.recording == nil
                || (state.recording?.recorder === recorder && state.recording?.id == Recording.unregistered)
            {
                state.recording = Recording(recorder: recorder, id: id)
            }
            return state.recording?.recorder === recorder ? state.recording?.id : nil
        }
    }

    /// The recording at start or finish, registered now if it was not yet.
    func registered(_ recording: Recording) -> Recording? {
        guard recording.id == Recording.unregistered else { return recording }
        return record(into: recording.recorder, placement: nil, enqueued: false).map {
            Recording(recorder: recording.recorder, id: $0)
        }
    }

    /// At start, for an operation created while some queue had a recorder: records into the recorder
    /// of the queue it starts on, if that has one.
    func recordingOfStartingQueue() -> Recording? {
        guard let queue = OperationQueue.current, let recorder = RecordingRegistry.recorder(for: queue) else {
            return nil
        }
        guard let id = record(into: recorder, placement: nil, enqueued: false) else { return recording }
        return Recording(recorder: recorder, id: id)
    }

    /// The recorded operations of `recording`'s recorder this operation depends on.
    func recordedDependencies(in recorder: FlightRecorder) -> [Int] {
        let dependencies = self.dependencies
        guard !dependencies.isEmpty else { return [] }
        return dependencies.compactMap { dependency in
            guard let recording = (dependency as? AsyncOperation)?.recording, recording.recorder === recorder,
                recording.id != Recording.unregistered
            else { return nil }
            return recording.id
        }
    }
}

extension GroupOperation: RecordedComposite {}
extension ResultGroupOperation: RecordedComposite {}
extension SequenceOperation: RecordedComposite {}
extension RetryOperation: RecordedComposite {}
extension TreeOperation: RecordedComposite {}
