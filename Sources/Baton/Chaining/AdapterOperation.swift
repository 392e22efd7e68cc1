import Foundation

/// A chain adapter that is an operation of its own: it runs **on the chain's queue**, between its
/// neighbours, for adapters that do real work (decode, validate, write) and so deserve what an
/// operation has: a place in `queue.operations`, the chain's quality of service, cancellation, and a
/// node of its own in a ``FlightRecorder``'s graph.
///
/// Subclass it and override ``AsyncOperation/execute()``: read ``upstream``, ``upstreamOutcome`` and ``downstream``,
/// then finish with a ``ChainAdapter/Decision``. Give a factory to ``ChainAdapter/operation(_:)``:
/// the chain makes one adapter operation per link.
///
/// ```swift
/// final class Validate: AdapterOperation, @unchecked Sendable {
///     override func execute() {
///         guard case .succeeded(let text as String) = upstreamOutcome, !text.isEmpty else {
///             return finish(with: .fail(ValidationError()))
///         }
///         finish(with: .forward)
///     }
/// }
/// let handle = try queue.addChain([fetch, parse], adapter: .operation { Validate() })
/// ```
///
/// - An adapter operation that fails fails the downstream operation with its error (without running
///   it), and the chain with it; one that is cancelled cancels the downstream operation.
/// - The chain stays linear and runs one stage at a time: the downstream operation is enqueued once
///   the adapter operation has finished.
/// - It holds its neighbours only until it has finished.
/// - Use the closure adapters (``ChainAdapter/default``, ``ChainAdapter/recovering(_:)``) for quick
///   hand-ons: they run on the finishing thread, for about half the cost of a step through the queue
///   (see Docs/Chaining.md for the measured cost of each).
open class AdapterOperation: ResultOperation<ChainAdapter.Decision>, @unchecked Sendable {
    private struct Link {
        var upstream: Operation
        var outcome: Outcome<any Sendable>
        var downstream: Operation
    }

    private let link = Mutex<Link?>(nil)

    /// Creates an adapter operation.
    public override init() {
        super.init()
    }

    /// The operation before this adapter, or `nil` once the adapter has finished (or outside a chain).
    public final var upstream: Operation? {
        link.withLock { $0?.upstream }
    }

    /// The upstream operation's outcome: its output (`()` when it has none), its failure or its
    /// cancellation. `.cancelled` outside a chain.
    public final var upstreamOutcome: Outcome<any Sendable> {
        link.withLock { $0?.outcome } ?? .cancelled
    }

    /// The operation after this adapter, which has not started, or `nil` once the adapter has
    /// finished (or outside a chain).
    public final var downstream: Operation? {
        link.withLock { $0?.downstream }
    }

    /// Placed between `upstream` (finished) and `downstream` (not started) by a chain.
    func connect(upstream: Operation, downstream: Operation) {
        let outcome = upstream.observedOutcome.map { $0 ?? () }
        link.withLock { $0 = Link(upstream: upstream, outcome: outcome, downstream: downstream) }
    }

    /// Lets go of the neighbours once the chain has read the decision.
    func disconnect() {
        let released = link.withLock { link -> Link? in
            defer { link = nil }
            return link
        }
        withExtendedLifetime(released) {}
    }

    /// What the chain does with the downstream operation: the decision, or a failure or cancellation.
    var chainDecision: ChainAdapter.Decision {
        switch outcome ?? .cancelled {
        case .succeeded(let decision): return decision
        case .failed(let error): return .fail(error)
        case .cancelled: return .cancel
        }
    }
}

/// An adapter operation made from a closure, run on the chain's queue between two neighbours.
///
/// ```swift
/// let adapter = ChainAdapter.operation {
///     AdapterBlockOperation { _, outcome, _ in
///         if case .failed = outcome { return .recover(with: "fallback") }
///         return .forward
///     }
/// }
/// ```
public final class AdapterBlockOperation: AdapterOperation, @unchecked Sendable {
    /// Its `dependencies` are those added with `addDependency` (see `AsyncOperation.listsOnlyAddedDependencies`).
    override class var listsOnlyAddedDependencies: Bool { true }

    private let adapt:
        @Sendable (_ upstream: Operation, _ outcome: Outcome<any Sendable>, _ downstream: Operation) throws ->
            ChainAdapter.Decision

    /// Creates an adapter operation that decides with `adapt`.
    ///
    /// - Parameter adapt: Given both neighbours and the upstream outcome, returns the decision; an
    ///   error it throws fails the downstream operation and the chain.
    public init(
        _ adapt:
            @escaping @Sendable (_ upstream: Operation, _ outcome: Outcome<any Sendable>, _ downstream: Operation)
            throws -> ChainAdapter.Decision
    ) {
        self.adapt = adapt
        super.init()
    }

    /// Runs the closure and finishes with its decision. Outside a chain (no neighbours) it fails with
    /// ``BatonError/invalidArgument(operation:reason:)``.
    public override func execute() {
        guard let upstream, let downstream else {
            return finish(
                throwing: BatonError.invalidArgument(
                    operation: reference, reason: "an adapter operation runs only between two operations of a chain"))
        }
        finish(with: Result { try adapt(upstream, upstreamOutcome, downstream) })
    }
}
