/// An asynchronous operation that produces an `Output`.
///
/// Override ``AsyncOperation/execute()`` and finish with ``finish(with:)-(Output)``; read the
/// result through ``output`` or ``result``.
///
/// ```swift
/// final class Count: ResultOperation<Int>, @unchecked Sendable {
///     let text: String
///     init(_ text: String) { self.text = text }
///     override func execute() { finish(with: text.split(separator: " ").count) }
/// }
///
/// let count = Count("one two three")
/// OperationQueue().addOperation(count)
/// count.waitUntilFinished()
/// print(count.output!)   // 3
/// ```
///
/// Calling the untyped `finish()` on an operation whose `Output` is not `Void` fails it with
/// ``BatonError/missingOutput(operation:)``.
open class ResultOperation<Output>: AsyncOperation, @unchecked Sendable {
    /// Creates a pending operation.
    public override init() {
        super.init()
    }

    /// Finishes the operation successfully with `output` (dropped if the operation was cancelled).
    ///
    /// - Parameter output: The operation's output.
    public final func finish(with output: Output) {
        requestFinish(.succeeded(output), carriesResult: true)
    }

    /// Finishes the operation with a `Result`: its value, or its error.
    ///
    /// - Parameter result: The operation's result.
    public final func finish(with result: Result<Output, any Error>) {
        switch result {
        case .success(let output): finish(with: output)
        case .failure(let error): finish(throwing: error)
        }
    }

    /// The output, or `nil` until the operation has succeeded.
    public final var output: Output? {
        result?.output
    }

    /// How the operation ended, with its typed output, or `nil` until it has finished.
    public final var result: Outcome<Output>? {
        storedOutcome.map(Self.typed)
    }

    /// Adds a closure called with the typed outcome, **before** the operation becomes finished.
    ///
    /// Added after the outcome was decided, it is called at once. Closures are released when the
    /// operation finishes.
    ///
    /// - Parameter observer: The closure, given the typed outcome.
    public final func onResult(_ observer: @escaping @Sendable (Outcome<Output>) -> Void) {
        addOutcomeObserver { observer(Self.typed($0)) }
    }

    override func plainFinishOutcome() -> Outcome<Any?> {
        if let void = () as? Output { return .succeeded(void) }
        return .failed(BatonError.missingOutput(operation: batonName))
    }

    /// Converts the stored outcome; only `finish(with:)` stores a success, so the cast holds.
    static func typed(_ outcome: Outcome<Any?>) -> Outcome<Output> {
        switch outcome {
        case .succeeded(let value):
            guard let output = value as? Output else {
                return .failed(BatonError.missingOutput(operation: String(describing: Self.self)))
            }
            return .succeeded(output)
        case .failed(let error): return .failed(error)
        case .cancelled: return .cancelled
        }
    }
}
