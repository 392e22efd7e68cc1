import Baton
import Foundation

// Most tests check an operation's outcome, not what a wait throws: these run through the public
// `runForOutcome`, or wait through the public API (`wait`, `value`) and return the outcome once the
// operation has finished. A wait that fails before the operation finishes (timed out, refused)
// rethrows. WaitingTests and OutcomeWaitTests check the public waits themselves.

extension OutcomeReporting where Self: AsyncOperation {
    /// `runForOutcome(on:timeout:)` with the tests' timeout.
    @discardableResult
    func runToOutcome(on queue: OperationQueue = OperationQueue(), timeout: Double = testTimeout) throws -> Outcome<Void> {
        try runForOutcome(on: queue, timeout: .seconds(timeout))
    }

    /// `wait(timeout:)`, then the outcome.
    @discardableResult
    func waitToOutcome(timeout: Double = testTimeout) throws -> Outcome<Void> {
        do { try wait(timeout: .seconds(timeout)) } catch { guard outcome != nil else { throw error } }
        return outcome!
    }

    /// `value`, then the outcome (`cancelled` when the awaiting task was cancelled first).
    func awaitOutcome() async -> Outcome<Void> {
        do { try await value } catch { return outcome ?? .cancelled }
        return outcome ?? .cancelled
    }
}

extension ResultOperation {
    /// `runForOutcome(on:timeout:)` with the tests' timeout.
    @discardableResult
    func runToOutcome(on queue: OperationQueue = OperationQueue(), timeout: Double = testTimeout) throws -> Outcome<Output> {
        try runForOutcome(on: queue, timeout: .seconds(timeout))
    }

    /// `wait(timeout:)`, then the outcome.
    @discardableResult
    func waitToOutcome(timeout: Double = testTimeout) throws -> Outcome<Output> {
        do { try wait(timeout: .seconds(timeout)) } catch { guard outcome != nil else { throw error } }
        return outcome!
    }

    /// `value`, then the outcome (`cancelled` when the awaiting task was cancelled first).
    func awaitOutcome() async -> Outcome<Output> {
        do { _ = try await value } catch { return outcome ?? .cancelled }
        return outcome ?? .cancelled
    }
}

extension ChainHandle {
    /// `wait(timeout:)`, then the chain's outcome.
    @discardableResult
    func waitToOutcome(timeout: Double = testTimeout) throws -> Outcome<Output> {
        do { try wait(timeout: .seconds(timeout)) } catch { guard outcome != nil else { throw error } }
        return outcome!
    }

    /// `value`, then the chain's outcome.
    func awaitOutcome() async -> Outcome<Output> {
        do { _ = try await value } catch { return outcome ?? .cancelled }
        return outcome ?? .cancelled
    }
}

/// Lets a test match an error's culprit by its display name (`case .alreadyEnqueued("shared")`);
/// tests of identity compare `culprit.operation` with `===`.
func ~= (name: String, reference: OperationReference) -> Bool {
    reference.name == name
}

/// Matches a path of culprits by their display names.
func ~= (names: [String], references: [OperationReference]) -> Bool {
    references.map(\.name) == names
}
