import Foundation

/// What passes from one operation to the next, in chains and in sequences: cancellation, the
/// upstream error, and the upstream output (through the adapter).
enum Handoff {
    /// Passes `upstream`'s outcome to `downstream`, which has not started.
    ///
    /// - Returns: The error that ends the flow here (the upstream's, or the adapter's), if any.
    @discardableResult
    static func pass(from upstream: Operation, to downstream: Operation, adapter: ChainAdapter) -> (any Error)? {
        let outcome = upstream.observedOutcome
        switch adapter.kind {
        case .forward:
            return forward(outcome, to: downstream)
        case .transfer(let transfer):
            guard outcome.isSuccess else { return forward(outcome, to: downstream) }
            do {
                try transfer(upstream, downstream)
                return nil
            } catch {
                fail(downstream, with: error)
                return error
            }
        case .operation:
            // A chain runs adapter operations itself (`ChainHandle`), and a sequence refuses them at
            // start: never reached, and forwarding is the safe answer if it were.
            return forward(outcome, to: downstream)
        case .deciding(let decide):
            do {
                let decision = try decide(upstream, outcome.map { $0 ?? () }, downstream)
                return apply(decision, to: downstream, after: outcome)
            } catch {
                fail(downstream, with: error)
                return error
            }
        }
    }

    /// Does what an adapter decided.
    static func apply(
        _ decision: ChainAdapter.Decision, to downstream: Operation, after outcome: Outcome<(any Sendable)?>
    ) -> (any Error)? {
        switch decision {
        case .forward:
            return forward(outcome, to: downstream)
        case .recover(let input):
            guard let receiver = downstream as? InputAccepting else {
                let error = BatonError.invalidArgument(
                    operation: downstream.reference,
                    reason: "an adapter recovered with \(input), but the operation takes no input")
                fail(downstream, with: error)
                return error
            }
            if let mismatch = receiver.acceptInput(input) {
                fail(downstream, with: mismatch)
                return mismatch
            }
            return nil
        case .run:
            return nil
        case .fail(let error):
            fail(downstream, with: error)
            return error
        case .cancel:
            downstream.cancelHeld()
            return nil
        }
    }

    /// The default hand-on: cancellation, failure, or the output into the input.
    private static func forward(_ outcome: Outcome<(any Sendable)?>, to downstream: Operation) -> (any Error)? {
        switch outcome {
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
            guard let value else { return nil }
            return give(value, to: downstream)
        }
    }

    /// Gives `value` to `downstream` as its input when it takes one; one of another type fails it.
    ///
    /// - Returns: The mismatch that failed `downstream`, if any.
    @discardableResult
    static func give(_ value: any Sendable, to downstream: Operation) -> BatonError? {
        guard let receiver = downstream as? InputAccepting, let mismatch = receiver.acceptInput(value) else {
            return nil
        }
        fail(downstream, with: mismatch)
        return mismatch
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
