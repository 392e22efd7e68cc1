/// How an operation ended: exactly one of succeeded, failed or cancelled.
///
/// Every Baton operation ends in one outcome and never changes it afterwards. Operations without an
/// output report `Outcome<Void>`; a ``ResultOperation`` reports `Outcome<Output>`. It is a `Result`
/// with cancellation as a case of its own; ``result`` and ``init(_:)`` convert between the two.
///
/// ```swift
/// switch operation.outcome {
/// case .succeeded(let recipe)?: print(recipe.title)
/// case .failed(let error)?: print("failed: \(error)")
/// case .cancelled?: print("cancelled")
/// case nil: print("not finished yet")
/// }
/// ```
public enum Outcome<Output> {
    /// The operation finished its work and produced `Output`.
    case succeeded(Output)
    /// The operation finished with an error (its own, or one forwarded from upstream).
    case failed(any Error)
    /// The operation was cancelled, or skipped because a dependency was cancelled.
    case cancelled

    /// The output when the operation succeeded, otherwise `nil`.
    public var output: Output? {
        if case .succeeded(let output) = self { return output }
        return nil
    }

    /// The error when the operation failed, otherwise `nil`.
    public var error: (any Error)? {
        if case .failed(let error) = self { return error }
        return nil
    }

    /// Whether the outcome is a success: ``succeeded(_:)``.
    public var isSuccess: Bool {
        if case .succeeded = self { return true }
        return false
    }

    /// Whether the outcome is a failure: ``failed(_:)``.
    public var isFailure: Bool {
        if case .failed = self { return true }
        return false
    }

    /// Whether the outcome is ``cancelled``.
    public var isCancelled: Bool {
        if case .cancelled = self { return true }
        return false
    }

    /// Creates the outcome a `Result` stands for: a failure with `CancellationError` is ``cancelled``,
    /// so that `Outcome(outcome.result)` gives back the same outcome.
    ///
    /// - Parameter result: The result.
    public init(_ result: Result<Output, any Error>) {
        switch result {
        case .success(let output): self = .succeeded(output)
        case .failure(let error) where error is CancellationError: self = .cancelled
        case .failure(let error): self = .failed(error)
        }
    }

    /// The outcome as a `Result`; ``cancelled`` becomes a failure with `CancellationError`.
    public var result: Result<Output, any Error> {
        switch self {
        case .succeeded(let output): return .success(output)
        case .failed(let error): return .failure(error)
        case .cancelled: return .failure(CancellationError())
        }
    }

    /// Returns the output, or throws the error; a cancelled outcome throws `CancellationError`.
    ///
    /// - Returns: The output of a succeeded operation.
    /// - Throws: The error of a failed operation, or `CancellationError` for a cancelled one.
    public func get() throws -> Output {
        switch self {
        case .succeeded(let output): return output
        case .failed(let error): throw error
        case .cancelled: throw CancellationError()
        }
    }

    /// Transforms the output of a succeeded outcome, keeping failures and cancellation as they are.
    ///
    /// - Parameter transform: The function applied to the output.
    /// - Returns: The outcome with its output transformed.
    public func map<NewOutput>(_ transform: (Output) -> NewOutput) -> Outcome<NewOutput> {
        switch self {
        case .succeeded(let output): return .succeeded(transform(output))
        case .failed(let error): return .failed(error)
        case .cancelled: return .cancelled
        }
    }
}

extension Outcome: Sendable where Output: Sendable {}

extension Outcome: CustomStringConvertible {
    /// A short text such as `succeeded(42)`, `failed(timedOut)` or `cancelled`.
    public var description: String {
        switch self {
        case .succeeded(let output): return "succeeded(\(output))"
        case .failed(let error): return "failed(\(error))"
        case .cancelled: return "cancelled"
        }
    }
}
