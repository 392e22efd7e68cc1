import Foundation

/// A report of misuse that Baton survived: the call was ignored and the program goes on.
///
/// Baton never crashes a release build over a life-cycle mistake. It ignores the offending call and
/// reports it to ``Diagnostics/handler``, which prints one line in debug builds by default.
public struct Diagnostic: Sendable, CustomStringConvertible {
    /// What went wrong.
    public enum Kind: Sendable, Hashable {
        /// `finish` was called on an operation that had already finished or decided its outcome.
        case finishedTwice
        /// A result or error arrived after the operation was cancelled; it was dropped.
        case resultAfterCancellation
        /// `finish` was called on a pending operation that was already cancelled.
        case finishedAfterCancellation
        /// `start()` was called on an operation that had already started.
        case startedTwice
        /// `start()` was called while a dependency was unfinished; the operation ran anyway.
        case startedWhileNotReady
        /// `start()` was called by hand on an operation that a Baton chain, composite or wait holds;
        /// ignored (Baton starts it, through its queue).
        case startedWhileClaimed
        /// `start()` was called by hand on an operation that waits in an `OperationQueue` it was added
        /// to with Foundation's `addOperation`; ignored (the queue starts it). Seen where Baton can read
        /// Foundation's record of the queue (Linux).
        case startedWhileInQueue
        /// An input was set after the operation started; it was ignored.
        case inputAfterStart
        /// `execute()` was not overridden.
        case executeNotOverridden
        /// The operation was still executing when its ``AsyncOperation/timeout`` ran out; it was
        /// cancelled, and fails with ``BatonError/timedOut(operation:after:)``.
        case timedOut
        /// ``AsyncOperation/timeout`` or ``AsyncOperation/dependencyPolicy`` was set after the
        /// operation started; it was ignored.
        case settingAfterStart
        /// Baton's lifecycle machine received an event that cannot happen in the operation's state: a
        /// bug in Baton (please report it). Debug builds stop; release builds ignore the event.
        case internalInconsistency
        /// The operation has waited for a category longer than its scope's
        /// ``ExclusivityScope/slowWaitThreshold``; it goes on waiting.
        case waitedLongForCategory
    }

    /// What went wrong.
    public let kind: Kind
    /// The operation it happened to: its name, its identity, and the operation while it lives.
    public let operation: OperationReference

    /// Creates a report.
    ///
    /// - Parameters:
    ///   - kind: What went wrong.
    ///   - operation: The operation it happened to.
    public init(kind: Kind, operation: Operation) {
        self.kind = kind
        self.operation = OperationReference(operation)
    }

    /// A one-line text such as `Baton: FetchRecipe: finish called twice; ignored`.
    public var description: String {
        let what: String
        switch kind {
        case .finishedTwice: what = "finish called after the outcome was decided; ignored"
        case .resultAfterCancellation: what = "result delivered after cancellation; dropped"
        case .finishedAfterCancellation: what = "finish called on a cancelled pending operation; ignored"
        case .startedTwice: what = "start() called twice; ignored"
        case .startedWhileNotReady: what = "start() called before its dependencies finished; running anyway"
        case .startedWhileClaimed: what = "start() called by hand while a Baton chain, composite or wait holds it; ignored"
        case .startedWhileInQueue: what = "start() called by hand while it waits in an OperationQueue; ignored"
        case .inputAfterStart: what = "input set after start; ignored"
        case .executeNotOverridden: what = "execute() not overridden; failing"
        case .timedOut: what = "still executing when its timeout ran out; cancelled, it fails with timedOut"
        case .settingAfterStart: what = "timeout or dependency policy set after start; ignored"
        case .internalInconsistency: what = "impossible lifecycle event; ignored (a Baton bug, please report it)"
        case .waitedLongForCategory: what = "has waited for a category longer than its scope's slow-wait threshold"
        }
        return "Baton: \(operation.name): \(what)"
    }
}
