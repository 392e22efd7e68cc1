import Foundation

extension Operation {
    /// Calls `body` once the operation has finished: right after `isFinished` is announced for a Baton
    /// operation, from its completion block (asynchronously, as Foundation runs it) for any other.
    ///
    /// For a Foundation operation the completion block is wrapped and, once it has run, put back:
    /// Linux never clears a completion block, so a wrapper left in place would keep `body` (and
    /// whatever it captures) alive as long as the operation.
    func observeCompletion(_ body: @escaping @Sendable () -> Void) {
        if let baton = self as? AsyncOperation {
            baton.whenFinished(body)
            return
        }
        // Reading the block and setting its wrapper is one step for every Baton observer of the
        // operation: two observers installed at once from two threads would otherwise both wrap the
        // same block, and one of them would never be called (measured: 3 in 5,000). Foundation's
        // getter and setter only take the operation's own lock and call nothing back.
        let stripe = CompletionInstalls.stripes.stripe(for: self)
        stripe.withLock { installs in
            installs += 1
            let previous = completionBlock
            completionBlock = { [weak self] in
                stripe.withLock { _ in self?.completionBlock = previous }
                previous?()
                body()
            }
        }
    }

    /// Calls `body` exactly once when the operation has finished, or at once if it already has. For a
    /// Foundation operation that finished before the call, its completion block will not run again:
    /// the finished state is checked after the block is installed, and a flag makes sure only one of
    /// the two calls `body`.
    func observeCompletionOnce(_ body: @escaping @Sendable () -> Void) {
        if let baton = self as? AsyncOperation {
            baton.whenFinished(body)
            return
        }
        let called = Mutex(false)
        let once: @Sendable () -> Void = {
            let first = called.withLock { called -> Bool in
                defer { called = true }
                return !called
            }
            if first { body() }
        }
        observeCompletion(once)
        if isFinished { once() }
    }

    /// The outcome as a chain or a composite sees it: a Baton operation's own, or for a Foundation
    /// operation cancelled or succeeded (without an output).
    var observedOutcome: Outcome<(any Sendable)?> {
        observedSharedOutcome.value
    }

    /// ``observedOutcome``, shared: what a caller reads when it needs only the case or the error.
    var observedSharedOutcome: SharedOutcome {
        if let baton = self as? AsyncOperation {
            return baton.sharedOutcome ?? .cancelled
        }
        return isCancelled ? .cancelled : .succeededWithoutOutput
    }
}

/// Locks that make installing a completion observer on a Foundation operation one step. Striped by the
/// operation's identity: installs on different operations rarely share one, and no lock is taken for
/// Baton's own operations.
enum CompletionInstalls {
    /// Each counts the installs it made (a lock's state must not be empty: see `Mutex`).
    static let stripes = StripedMutex(0)
}
