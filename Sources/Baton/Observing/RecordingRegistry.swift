import CBatonAtomics
import Foundation

/// What every new operation reads once, at creation, without taking a lock: a serial number from an
/// atomic counter, and two published words, the global recorder's slot and whether any queue has a
/// recorder. With neither, an operation carries no recording and pays nothing more.
///
/// The lock here serialises the writers (setting the global recorder, attaching and detaching
/// queues) and guards the queue table, which only operations that start while some queue records
/// read. No operation that records nothing takes it.
enum RecordingRegistry {
    private struct QueueEntry {
        weak var queue: OperationQueue?
        let recorder: FlightRecorder
    }

    private struct Shared {
        /// The global recorder's publication: it keeps the recorder alive, and its slot holds it
        /// weakly.
        var global: Publication?
        var queues: [ObjectIdentifier: QueueEntry] = [:]
    }

    /// The global recorder, as one setting of `global` published it. The slot refers to this, not to
    /// the recorder, weakly: a weak reference gives its object a side table, and every retain and
    /// release of such an object takes the runtime's slow path. Operations retain their recorder
    /// several times each; they never retain a publication (about 490 instructions per recorded
    /// operation, callgrind).
    private final class Publication: Sendable {
        let recorder: FlightRecorder

        init(_ recorder: FlightRecorder) {
            self.recorder = recorder
        }
    }

    /// Where the global recorder is published: a slot that holds its publication weakly and is never
    /// freed, so a reader that loaded its address may always read it, however the global changes
    /// meanwhile. One per setting of `global` to a recorder other than the current one, a few dozen
    /// bytes for the life of the process.
    private final class GlobalSlot: Sendable {
        weak let publication: Publication?

        init(_ publication: Publication) {
            self.publication = publication
        }
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
        Creation(serial: baton_next_serial(), global: publishedGlobal, looksUpQueue: baton_queues_record())
    }

    /// The global recorder as published: one atomic load, then a weak load from a slot that is never
    /// freed. A reader that raced a change sees the old recorder (while its publication still lives),
    /// the new one, or none: an operation created while the global recorder changes may be recorded
    /// by either, or by neither, never by a freed one.
    private static var publishedGlobal: FlightRecorder? {
        guard let slot = baton_global_recorder_slot() else { return nil }
        return Unmanaged<GlobalSlot>.fromOpaque(slot).takeUnretainedValue().publication?.recorder
    }

    static var global: FlightRecorder? {
        get { publishedGlobal }
        set {
            shared.withLock { shared in
                guard let newValue else {
                    shared.global = nil
                    baton_publish_global_recorder_slot(nil)
                    return
                }
                // Already the global one: its slot stays.
                if shared.global?.recorder === newValue { return }
                let publication = Publication(newValue)
                shared.global = publication
                baton_publish_global_recorder_slot(Unmanaged.passRetained(GlobalSlot(publication)).toOpaque())
            }
        }
    }

    static func attach(_ recorder: FlightRecorder, to queue: OperationQueue) {
        shared.withLock { shared in
            shared.queues = shared.queues.filter { $0.value.queue != nil }
            shared.queues[ObjectIdentifier(queue)] = QueueEntry(queue: queue, recorder: recorder)
            baton_set_queues_record(true)
        }
    }

    static func detach(_ recorder: FlightRecorder, from queue: OperationQueue) {
        shared.withLock { shared in
            let id = ObjectIdentifier(queue)
            if let entry = shared.queues[id], entry.queue == nil || entry.recorder === recorder {
                shared.queues[id] = nil
            }
            baton_set_queues_record(!shared.queues.isEmpty)
        }
    }

    /// The recorder attached to `queue`, if any. Entries of freed queues are dropped here (and on
    /// attach), so that operations stop looking queues up once no recorded queue is left.
    static func recorder(for queue: OperationQueue) -> FlightRecorder? {
        shared.withLock { shared in
            if shared.queues.values.contains(where: { $0.queue == nil }) {
                shared.queues = shared.queues.filter { $0.value.queue != nil }
                baton_set_queues_record(!shared.queues.isEmpty)
            }
            guard let entry = shared.queues[ObjectIdentifier(queue)], entry.queue === queue else { return nil }
            return entry.recorder
        }
    }

    /// The recorder a chain added to `queue` records into: the queue's, or else the global one.
    static func recorder(forChainOn queue: OperationQueue) -> FlightRecorder? {
        if baton_queues_record() {
            let attached: FlightRecorder? = shared.withLock { shared in
                guard let entry = shared.queues[ObjectIdentifier(queue)], entry.queue === queue else { return nil }
                return entry.recorder
            }
            if let attached { return attached }
        }
        return publishedGlobal
    }
}

/// An operation's record: the recorder it records into and the record's id. A value: kept inline in the
/// operation's state (`RecorderLink.recorded`), it costs a recorded operation no allocation, and the
/// link stays 16 bytes, which the state's heap block had room for (a class cost a recorded group child
/// about 350 instructions, callgrind).
struct Recording: Sendable {
    let recorder: FlightRecorder
    let id: Int

    /// Whether `other` is this record.
    func isSame(as other: Recording?) -> Bool {
        other.map { $0.recorder === recorder && $0.id == id } ?? false
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
        if let predecessor = (predecessor as? AsyncOperation)?.recording, predecessor.recorder === recorder {
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
            return baton.record(into: recorder, placement: placement, enqueued: true)?.id
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

/// How an operation records: one state, in the operation's state behind its lock.
enum RecorderLink: Sendable {
    /// Not recorded.
    case none
    /// Created while some queue had a recorder: at start, it records into its queue's, if that has one.
    case queueLookup
    /// Claimed by the global recorder at creation: the record is made when the operation is enqueued
    /// or starts, once, with its place.
    case claimed(FlightRecorder)
    /// Recorded.
    case recorded(Recording)

    /// The recorder the operation records into, once it has a record or will have one.
    var recorder: FlightRecorder? {
        switch self {
        case .none, .queueLookup: return nil
        case .claimed(let recorder): return recorder
        case .recorded(let recording): return recording.recorder
        }
    }

    /// The operation's record, if it has one.
    var recording: Recording? {
        if case .recorded(let recording) = self { return recording }
        return nil
    }
}

extension AsyncOperation {
    /// How this operation records.
    var recorderLink: RecorderLink {
        core.withLock { $0.recorderLink }
    }

    /// The record this operation has, if any.
    var recording: Recording? {
        recorderLink.recording
    }

    /// Makes this operation record into `recorder` (placed by `placement`), unless another recorder
    /// has it; an operation that already has a record in `recorder` is placed. Returns its record in
    /// `recorder`, or `nil` when another recorder has it.
    @discardableResult
    func record(into recorder: FlightRecorder, placement: FlightRecorder.Placement?, enqueued: Bool) -> Recording? {
        switch recorderLink {
        case .recorded(let existing):
            guard existing.recorder === recorder else { return nil }
            if let placement { recorder.place(existing.id, placement, enqueued: enqueued) }
            return existing
        case .claimed(let other) where other !== recorder:
            return nil
        case .none, .queueLookup, .claimed:
            break
        }
        let made = Recording(
            recorder: recorder,
            id: recorder.register(
                kind: type(of: self).recordsAsComposite ? .composite : .operation, type: recordedType, name: recordedName,
                placement: placement, enqueued: enqueued))
        // One lock step decides. Recorded from two threads at once, the first record stays and the
        // other is taken back. Stored once the finish has committed (which ends only the record it
        // finds), the record is ended here, with the outcome.
        let (kept, endedWith): (Recording?, SharedOutcome?) = core.withLock { state in
            switch state.recorderLink {
            case .recorded(let existing):
                return (existing.recorder === recorder ? existing : nil, nil)
            case .claimed(let other) where other !== recorder:
                return (nil, nil)
            case .none, .queueLookup, .claimed:
                state.recorderLink = .recorded(made)
                return (made, state.life.isFinished ? state.life.finished : nil)
            }
        }
        if kept.map({ !$0.isSame(as: made) }) ?? true { recorder.discard(made.id) }
        if let endedWith, recordsItsFinish {
            recorder.finished(made.id, status: FlightRecord.Status(endedWith), name: recordedName)
        }
        return kept
    }

    /// The record of an operation that starts (or finishes without having started): made now for one
    /// claimed at creation, or, when `startingOnQueue`, for one created while some queue had a
    /// recorder and starting on that queue.
    func recording(resolving link: RecorderLink, startingOnQueue: Bool) -> Recording? {
        switch link {
        case .none:
            return nil
        case .recorded(let recording):
            return recording
        case .claimed(let recorder):
            return record(into: recorder, placement: nil, enqueued: false)
        case .queueLookup:
            guard startingOnQueue, let queue = OperationQueue.current,
                let recorder = RecordingRegistry.recorder(for: queue)
            else { return nil }
            return record(into: recorder, placement: nil, enqueued: false)
        }
    }

    /// The recorded operations of `recorder` among `dependencies` (this operation's).
    func recordedDependencies(_ dependencies: [Operation], in recorder: FlightRecorder) -> [Int] {
        guard !dependencies.isEmpty else { return [] }
        return dependencies.compactMap { dependency in
            guard let recording = (dependency as? AsyncOperation)?.recording, recording.recorder === recorder else {
                return nil
            }
            return recording.id
        }
    }
}
