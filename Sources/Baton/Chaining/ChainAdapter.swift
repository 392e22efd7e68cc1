import Foundation

/// What runs between two neighbouring operations of a chain (or of a ``SequenceOperation``).
///
/// - ``default`` forwards: an upstream operation that was cancelled cancels the downstream one, one
///   that failed fails it with the same error (a plain Foundation downstream operation is cancelled
///   instead; a downstream whose policy is ``DependencyPolicy/runRegardless`` runs and reads
///   ``AsyncOperation/upstreamError``), and an output goes into the downstream
///   ``TransformOperation/input`` (a value of the wrong type fails it with
///   ``BatonError/inputTypeMismatch(operation:expected:actual:)``).
/// - ``custom(_:)`` calls your closure with both neighbours instead of passing the output, when the
///   upstream operation succeeded; failures and cancellations are forwarded.
/// - ``recovering(_:)`` is given every upstream outcome, failures and cancellations included, and
///   decides (a ``Decision``): forward it, recover (give the downstream an input and let it run), or
///   fail or cancel the downstream operation.
///
/// - ``operation(_:)`` puts an ``AdapterOperation`` of yours between each pair of neighbours: it runs
///   on the chain's queue, and decides as a recovering adapter does.
///
/// The first three run on the thread that finished the upstream operation, before the downstream one
/// is enqueued: keep them quick, and make slow work an adapter operation (or a step of its own).
///
/// ```swift
/// let cached = ChainAdapter.recovering { _, outcome, _ in
///     guard case .failed = outcome else { return .forward }
///     return .recover(with: "cached page")   // the downstream runs with this input
/// }
/// ```
public struct ChainAdapter: Sendable {
    enum Kind {
        case forward
        case transfer(@Sendable (_ upstream: Operation, _ downstream: Operation) throws -> Void)
        case deciding(
            @Sendable (_ upstream: Operation, _ outcome: Outcome<any Sendable>, _ downstream: Operation) throws -> Decision)
        case operation(@Sendable () -> AdapterOperation)
    }

    let kind: Kind

    /// What a recovering adapter does with the upstream operation's outcome.
    public enum Decision: Sendable {
        /// What ``ChainAdapter/default`` does with this outcome: pass the output on, or the failure
        /// or cancellation.
        case forward
        /// The downstream operation runs with this input, whatever the upstream outcome was; the
        /// chain goes on as if the upstream had succeeded. A downstream operation that takes no
        /// input (not a ``TransformOperation``) fails with
        /// ``BatonError/invalidArgument(operation:reason:)`` naming it, and a value of the wrong type
        /// with ``BatonError/inputTypeMismatch(operation:expected:actual:)``.
        case recover(with: any Sendable)
        /// The downstream operation runs with the input it has (one given when it was made), or with
        /// none when it takes none. One that needs an input and has none fails at start with
        /// ``BatonError/missingInput(operation:)`` naming it.
        case run
        /// The downstream operation fails with this error without running (a Foundation one is
        /// cancelled), and the chain fails with it.
        case fail(any Error)
        /// The downstream operation is cancelled.
        case cancel
    }

    /// Passes the upstream output into the downstream input, checking its type at run time.
    public static let `default` = ChainAdapter(kind: .forward)

    /// Calls `transfer` with both neighbours when the upstream operation succeeded.
    ///
    /// - Parameter transfer: Runs right after the upstream operation has finished, on the thread that
    ///   finished it, before the downstream operation is enqueued; keep it quick (make slow work an
    ///   operation of its own). An error it throws fails the downstream operation (a plain Foundation
    ///   operation is cancelled) and becomes the chain's outcome.
    /// - Returns: The adapter.
    public static func custom(
        _ transfer: @escaping @Sendable (_ upstream: Operation, _ downstream: Operation) throws -> Void
    ) -> ChainAdapter {
        ChainAdapter(kind: .transfer(transfer))
    }

    /// Gives `decide` every upstream outcome (an output, a failure or a cancellation) and does what it
    /// decides: MPC_NSOperation's adapter blocks, which saw the upstream's error and cancellation.
    ///
    /// ```swift
    /// let fallback = ChainAdapter.recovering { _, outcome, _ in
    ///     switch outcome {
    ///     case .succeeded: return .forward
    ///     case .failed: return .recover(with: Data())   // an empty body instead of the error
    ///     case .cancelled: return .cancel
    ///     }
    /// }
    /// ```
    ///
    /// A chain made as it goes (``Foundation/OperationQueue/addChain(first:adapter:next:)``) ends at
    /// its first failure or cancellation before any adapter is asked, as its generator is given only
    /// operations that succeeded; arrays, ``Chain``s and sequences ask the adapter.
    ///
    /// - Parameter decide: Runs right after the upstream operation has finished, on the thread that
    ///   finished it, before the downstream operation is enqueued; keep it quick. `outcome` carries
    ///   the upstream output (`()` when it has none). An error it throws fails the downstream
    ///   operation and becomes the chain's outcome, as ``Decision/fail(_:)`` does.
    /// - Returns: The adapter.
    public static func recovering(
        _ decide:
            @escaping @Sendable (_ upstream: Operation, _ outcome: Outcome<any Sendable>, _ downstream: Operation) throws
            -> Decision
    ) -> ChainAdapter {
        ChainAdapter(kind: .deciding(decide))
    }

    /// Puts an adapter operation made by `make` between each pair of neighbours: it runs on the
    /// chain's queue after the upstream operation has finished, and the downstream operation is
    /// enqueued once it has finished, with what it decided. Chains only: a ``SequenceOperation`` given
    /// one fails at start with ``BatonError/invalidArgument(operation:reason:)``.
    ///
    /// - Parameter make: Makes a fresh adapter operation for each link. One that is not fresh
    ///   (returned twice, or held elsewhere) fails the downstream operation and the chain with the
    ///   ``BatonError`` that says why.
    /// - Returns: The adapter.
    public static func operation(_ make: @escaping @Sendable () -> AdapterOperation) -> ChainAdapter {
        ChainAdapter(kind: .operation(make))
    }

    /// The factory of an adapter made with ``operation(_:)``.
    var operationFactory: (@Sendable () -> AdapterOperation)? {
        if case .operation(let make) = kind { return make }
        return nil
    }

    /// Whether the adapter is given failures and cancellations (a sequence then goes on to it rather
    /// than stopping at the first failure).
    var seesEveryOutcome: Bool {
        if case .deciding = kind { return true }
        return false
    }
}
