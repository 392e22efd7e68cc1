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
        if let error = Handoff.pass(from: link.upstream, to: link.downstream, adapter: link.adapter) {
            link.coordinator.recordFailure(error)
        }
    }
}
