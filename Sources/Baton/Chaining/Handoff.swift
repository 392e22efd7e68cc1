import Foundation

/// What passes from one operation to the next, in chains and in sequences: cancellation, the
/// upstream error, and the upstream output (through the adapter).
enum Handoff {
    /// Passes `upstream`'s outcome to `downstream`, which has not started.
    ///
    /// - Returns: The error that ends the flow here (the upstream's, or the adapter's), if any.
    @discardableResult
    static func pass(from upstream: Operation, to downstream: Operation, adapter: ChainAdapter) -> (any Error)? {
        // Shared: only a success's output is copied out, and only to be given on.
        let outcome = upstream.observedSharedOutcome
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
                let decision = try decide(upstream, outcome.value.map { $0 ?? () }, downstream)
                return apply(decision, to: downstream, after: outcome)
            } catch {
                fail(downstream, with: error)
                return error
            }
        }
    }

    /// Does what an adapter decided.
    static func apply(
        _ decision: ChainAdapter.Decision, to downstream: Operation, after outcome: SharedOutcome
    ) -> (any Error)? {
        switch decision {
        case .forward:
            return forward(outcome, to: downstream)
        case .recover(let input):
            switch (downstream as? AsyncOperation)?.offerInput(input) ?? .takesNone {
            case .takesNone:
                let error = BatonError.invalidArgument(
                    operation: downstream.reference,
                    reason: "an adapter recovered with \(input), but the operation takes no input")
                fail(downstream, with: error)
                return error
            case .mismatch(let mismatch):
                fail(downstream, with: mismatch)
                return mismatch
            case .taken:
                return nil
            }
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
    private static func forward(_ outcome: SharedOutcome, to downstream: Operation) -> (any Error)? {
        switch outcome.kind {
        case .cancelled:
            downstream.cancelHeld()
            return nil
        case .failed:
            let error = outcome.error!
            if let baton = downstream as? AsyncOperation, baton.dependencyPolicy == .runRegardless {
                baton.setUpstreamError(error)
            } else {
                fail(downstream, with: error)
            }
            return error
        case .succeeded:
            guard case .succeeded(let value?) = outcome.value else { return nil }
            return give(value, to: downstream)
        }
    }

    /// Gives `value` to `downstream` as its input when it takes one; one of another type fails it.
    ///
    /// - Returns: The mismatch that failed `downstream`, if any.
    @discardableResult
    static func give(_ value: any Sendable, to downstream: Operation) -> BatonError? {
        guard case .mismatch(let mismatch)? = (downstream as? AsyncOperation)?.offerInput(value) else { return nil }
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
