import Foundation

extension Operation {
    /// The outcome of a finished operation read as `Output`, for the composites that accept any
    /// operation (retries, tree nodes): a `ResultOperation<Output>`'s own outcome; for any other
    /// operation, its outcome with the output as `Output`: `()` when `Output` is `Void` (what the
    /// operation produced is not wanted), the output itself (or `()` when it has none) when `Output` is
    /// `any Sendable`, and otherwise ``BatonError/missingOutput(operation:)`` when it has none of that
    /// type.
    func outcome<Output: Sendable>(as _: Output.Type) -> Outcome<Output> {
        if let typed = self as? ResultOperation<Output> { return typed.outcome ?? .cancelled }
        return Self.read(observedOutcome, as: Output.self, from: reference)
    }

    /// An observed outcome read as `Output` (see ``outcome(as:)``), for the composites that keep
    /// outcomes after letting their operations go.
    static func read<Output: Sendable>(
        _ observed: Outcome<(any Sendable)?>, as _: Output.Type, from reference: OperationReference
    ) -> Outcome<Output> {
        switch observed {
        case .failed(let error): return .failed(error)
        case .cancelled: return .cancelled
        case .succeeded(let value):
            if Output.self == Void.self, let nothing = () as? Output { return .succeeded(nothing) }
            // The stored value's own Optional is unwrapped first (an `Optional<any Sendable>` is itself
            // an `any Sendable`).
            let output: Output? = if let value { value as? Output } else { () as? Output }
            guard let output else { return .failed(BatonError.missingOutput(operation: reference)) }
            return .succeeded(output)
        }
    }
}
