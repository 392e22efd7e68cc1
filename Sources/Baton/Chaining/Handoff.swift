import Foundation

/// What passes from one operation to the next, in chains and in sequences: cancellation, the
/// upstream error, and the upstream output (through the adapter).
enum Handoff {
    /// Passes `upstream`'s outcome to `downstream`, which has not started.
    ///
    /// - Returns: The error that ends the flow here (the upstream's, or the adapter's), if any.
    @discardableResult
    static func pass(from upstream: Operation, to downstream: Operation, adapter: ChainAdapter) -> (any Error)? {
        switch upstream.observedOutcome {
        case .cancelled:
            downstream.cancelHeld()
            return nil
        case .failed(let error):
            if let baton = downstream as? AsyncOperation, baton.dependencyPolicy == .runRegardless {
                baton.setUpstreamError(error)
            } else {
                fail(downstream, with: error)
            }
            return error
        case .succeeded(let value):
            do {
                if let transfer = adapter.transfer {
                    try transfer(upstream, downstream)
                } else if let value, let receiver = downstream as? InputAccepting, let mismatch = receiver.acceptInput(value) {
                    throw mismatch
                }
                return nil
            } catch {
                fail(downstream, with: error)
                return error
            }
        }
    }

    /// Fails a Baton operation before it starts; a plain Foundation operation can only be cancelled.
    private static func fail(_ downstream: Operation, with error: any Error) {
        guard let baton = downstream as? AsyncOperation else {
            downstream.cancelHeld()
            return
        }
        if !baton.isCancelled { baton.finish(throwing: error) }
    }
}
