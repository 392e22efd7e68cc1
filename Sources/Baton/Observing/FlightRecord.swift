/// What a ``FlightRecorder`` knows about one operation (or one chain): its place in the structure, its
/// times, the thread it started on, and how it ended.
///
/// A record is a value: ``FlightRecorder/records`` returns a snapshot, taken at one instant, so a
/// record of an operation still running says ``Status-swift.enum/executing`` and stays so.
///
/// Times are offsets from the moment the recorder was created, so two records of one recorder compare
/// directly and an export needs no clock of its own.
public struct FlightRecord: Sendable, Identifiable, Equatable {
    /// What kind of thing the record is.
    public enum Kind: Sendable, Equatable {
        /// An operation that runs no children of its own.
        case operation
        /// A group, sequence, retry or tree: an operation that runs children.
        case composite
        /// A chain started with `addChain`: not an operation, but the span and cluster its operations
        /// belong to.
        case chain
    }

    /// How a record is linked to the record before it (``predecessorID``).
    public enum Link: Sendable, Equatable {
        /// A chain's adapter handed the predecessor's outcome to this operation.
        case adapter
        /// A sequence ran this step after the predecessor.
        case step
        /// A retry made this attempt after the predecessor failed.
        case retry
        /// A tree node launched this operation after the predecessor (its parent node) succeeded.
        case subtree
    }

    /// Where the operation is in its life, and how it ended.
    public enum Status: Sendable, Equatable, CustomStringConvertible {
        /// Known to the recorder (enqueued or created) but not started.
        case pending
        /// Started and not finished.
        case executing
        /// Finished successfully.
        case succeeded
        /// Finished with an error; the string is the error's description.
        case failed(String)
        /// Finished cancelled (or skipped because a dependency was cancelled).
        case cancelled

        /// Whether the operation has finished.
        public var isFinished: Bool {
            switch self {
            case .pending, .executing: return false
            case .succeeded, .failed, .cancelled: return true
            }
        }

        /// `pending`, `executing` or `finished(outcome)`, as the text tree prints it.
        public var description: String {
            switch self {
            case .pending: return "pending"
            case .executing: return "executing"
            case .succeeded: return "finished(succeeded)"
            case .failed(let error): return "finished(failed: \(error))"
            case .cancelled: return "finished(cancelled)"
            }
        }
    }

    /// The record's number in its recorder: unique, and in the order the recorder first saw each
    /// operation. It stays the same for the whole run, so exports can refer to it.
    public let id: Int
    /// Whether it is an operation, a composite or a chain.
    public internal(set) var kind: Kind
    /// The type of the operation, as `String(describing:)` prints it (`"Chain"` for a chain).
    public internal(set) var typeName: String
    /// The operation's `name` when it started or finished, if it had one.
    public internal(set) var name: String?
    /// The composite or chain that ran the operation, if the recorder saw it.
    public internal(set) var parentID: Int?
    /// The operation's place in its parent: its index in a chain, a group (the order children were
    /// added) or a sequence, the attempt number less one in a retry, the launch order in a tree.
    public internal(set) var position: Int?
    /// The operation that ran before this one and led to it (see ``link``).
    public internal(set) var predecessorID: Int?
    /// How ``predecessorID`` led to this operation.
    public internal(set) var link: Link?
    /// The attempt number (from 1) when the operation is an attempt of a ``RetryOperation``.
    public internal(set) var attempt: Int?
    /// The recorded operations this one depended on (`addDependency`), when it started.
    public internal(set) var dependencyIDs: [Int] = []
    /// When a Baton chain or composite handed the operation to a queue (`nil` when it was added to a
    /// queue by other means).
    public internal(set) var enqueuedAt: Duration?
    /// When the operation started executing (`nil` if it never did: pending, or skipped at start).
    public internal(set) var startedAt: Duration?
    /// When the operation finished.
    public internal(set) var finishedAt: Duration?
    /// A small number for the thread the operation started on, the same for every operation that
    /// started on that thread; `nil` if it has not started.
    public internal(set) var thread: Int?
    /// Where the operation is, or how it ended.
    public internal(set) var status: Status
    /// Whether the recorder can see the operation start: `false` for a Foundation operation (not a
    /// Baton one) run by a recorded composite, whose record says only when it was enqueued and when
    /// it finished.
    public internal(set) var observesStart = true

    /// What the operation waited for before it executed, in order: its conditions, then its
    /// categories (only waits that took time: a category granted at once is not a wait).
    public internal(set) var waits: [Wait] = []

    /// A wait at an operation's gate (see ``waits``).
    public struct Wait: Sendable, Equatable {
        /// What it waited for: `conditions`, or its categories as `'database', 'disk'`.
        public let what: String
        /// When it began waiting.
        public let began: Duration
        /// When the wait ended: passed, refused, or given up because the operation was cancelled.
        public let ended: Duration
    }

    /// How long the operation executed: from start to finish, once both are known.
    public var duration: Duration? {
        guard let startedAt, let finishedAt else { return nil }
        return finishedAt - startedAt
    }

    /// The name if there is one, else the type: how exports label the record.
    public var label: String {
        name.map { "\(typeName) \"\($0)\"" } ?? typeName
    }

    init(id: Int, kind: Kind, typeName: String) {
        self.id = id
        self.kind = kind
        self.typeName = typeName
        self.status = .pending
    }
}
