import Foundation

/// What an adapter reports to the chain that owns it.
protocol ChainCoordinator: AnyObject, Sendable {
    /// An upstream operation failed (or an adapter threw): the chain's outcome if it is the first.
    func recordFailure(_ error: any Error)
}

/// The operation a chain inserts between two neighbours: it forwards cancellation, the upstream
/// error and the upstream output into the downstream operation.
///
/// It holds both neighbours only until it has run, so no adapter↔operation cycle outlives the chain.
/// Cancelling an adapter cancels its downstream operation: the adapter itself always runs, so that
/// the cancellation reaches everything after it.
final class AdapterOperation: AsyncOperation, @unchecked Sendable {
    struct Link {
        let upstream: Operation
        let downstream: Operation
        let adapter: ChainAdapter
        let coordinator: any ChainCoordinator
    }

    private let link: Mutex<Link?>

    init(upstream: Operation, downstream: Operation, adapter: ChainAdapter, coordinator: any ChainCoordinator) {
        link = Mutex(Link(upstream: upstream, downstream: downstream, adapter: adapter, coordinator: coordinator))
        super.init()
        dependencyPolicy = .runRegardless
    }

    override var cancellationTarget: Operation? {
        link.withLock { $0?.downstream }
    }

    override func execute() {
        if let current = link.withLock({ $0 }) {
            Self.forward(current)
            link.withLock { $0 = nil }
        }
        finish()
    }

    private static func forward(_ link: Link) {
        let downstream = link.downstream
        switch upstreamOutcome(link.upstream) {
        case .cancelled:
            downstream.cancel()
        case .failed(let error):
            link.coordinator.recordFailure(error)
            if let baton = downstream as? AsyncOperation, baton.dependencyPolicy == .runRegardless {
                baton.setUpstreamError(error)
            } else {
                fail(downstream, with: error)
            }
        case .succeeded(let value):
            do {
                if let transfer = link.adapter.transfer {
                    try transfer(link.upstream, downstream)
                } else if let value, let receiver = downstream as? InputAccepting, let mismatch = receiver.acceptInput(value) {
                    throw mismatch
                }
            } catch {
                link.coordinator.recordFailure(error)
                fail(downstream, with: error)
            }
        }
    }

    private static func upstreamOutcome(_ upstream: Operation) -> Outcome<Any?> {
        if let baton = upstream as? AsyncOperation {
            return baton.storedOutcome ?? .cancelled
        }
        return upstream.isCancelled ? .cancelled : .succeeded(nil)
    }

    /// Fails a Baton operation before it starts; a plain Foundation operation can only be cancelled.
    private static func fail(_ downstream: Operation, with error: any Error) {
        guard let baton = downstream as? AsyncOperation else {
            downstream.cancel()
            return
        }
        if !baton.isCancelled { baton.finish(throwing: error) }
    }
}
