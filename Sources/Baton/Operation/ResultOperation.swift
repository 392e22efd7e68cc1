/// An asynchronous operation that produces an `Output`.
///
/// Override ``AsyncOperation/execute()`` and finish with ``finish(with:)-(Output)``; read the
/// result through ``output`` or ``outcome``.
///
/// ```swift
/// final class Count: ResultOperation<Int>, @unchecked Sendable {
///     let text: String
///     init(_ text: String) { self.text = text }
///     override func execute() { finish(with: text.split(separator: " ").count) }
/// }
///
/// let words = try Count("one two three").run(timeout: .seconds(5))
/// print(words)   // 3
/// ```
///
/// Calling the untyped `finish()` on an operation whose `Output` is not `Void` fails it with
/// ``BatonError/missingOutput(operation:)``.
open class ResultOperation<Output: Sendable>: AsyncOperation, @unchecked Sendable {
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
        outcome?.output
    }

    /// How the operation ended, with its output, or `nil` until it has finished.
    ///
    /// The same property as ``OutcomeReporting/outcome`` of every ``AsyncOperation``, typed by
    /// `Output`.
    public final var outcome: Outcome<Output>? {
        storedOutcome.map(typed)
    }

    /// Adds a closure called once with the outcome, **before** the operation becomes finished.
    ///
    /// Added after the outcome was decided, it is called at once. Closures are released when the
    /// operation finishes, so capturing the operation does not leak it.
    ///
    /// - Parameter observer: The closure, given the outcome with its output.
    public final func onFinish(_ observer: @escaping @Sendable (Outcome<Output>) -> Void) {
        addOutcomeObserver { observer(self.typed($0)) }
    }

    override func plainFinishOutcome() -> SharedOutcome {
        if let void = () as? Output { return .succeeded(void) }
        return .failed(BatonError.missingOutput(operation: reference))
    }

    /// Converts the stored outcome; only `finish(with:)` stores a success, so the cast holds.
    func typed(_ outcome: Outcome<(any Sendable)?>) -> Outcome<Output> {
        switch outcome {
        case .succeeded(let value):
            // The stored value's own Optional is unwrapped first: cast whole, an `Optional<any
            // Sendable>` is itself an `any Sendable`, and an `any Sendable` output came back wrapped.
            let output: Output? = if let value { value as? Output } else { value as? Output }
            guard let output else {
                return .failed(BatonError.missingOutput(operation: reference))
            }
            return .succeeded(output)
        case .failed(let error): return .failed(error)
        case .cancelled: return .cancelled
        }
    }
}
