/// Receives an operation's life-cycle events, in the style of TWGOperations.
///
/// The delegate is held weakly. Its success, failure and cancellation methods are called **before**
/// the operation becomes finished, so a parent that reacts to them does so before any dependent
/// operation starts. Every method has an empty default implementation.
///
/// ```swift
/// final class Importer: AsyncOperationDelegate {
///     func operation(_ operation: AsyncOperation, didSucceedWith output: Any?) { print("imported \(output ?? "")") }
///     func operation(_ operation: AsyncOperation, didFailWith error: any Error) { print("failed: \(error)") }
/// }
/// ```
public protocol AsyncOperationDelegate: AnyObject, Sendable {
    /// The operation became executing and is about to call `execute()`.
    ///
    /// - Parameter operation: The operation.
    func operationDidStart(_ operation: AsyncOperation)

    /// The operation succeeded; `output` is its output (`nil` for operations without one).
    ///
    /// - Parameters:
    ///   - operation: The operation.
    ///   - output: Its output, or `nil` for an ``AsyncOperation`` without an output.
    func operation(_ operation: AsyncOperation, didSucceedWith output: Any?)

    /// The operation failed with `error`.
    ///
    /// - Parameters:
    ///   - operation: The operation.
    ///   - error: Its error.
    func operation(_ operation: AsyncOperation, didFailWith error: any Error)

    /// The operation finished cancelled.
    ///
    /// - Parameter operation: The operation.
    func operationDidCancel(_ operation: AsyncOperation)
}

extension AsyncOperationDelegate {
    /// Does nothing.
    public func operationDidStart(_ operation: AsyncOperation) {}
    /// Does nothing.
    public func operation(_ operation: AsyncOperation, didSucceedWith output: Any?) {}
    /// Does nothing.
    public func operation(_ operation: AsyncOperation, didFailWith error: any Error) {}
    /// Does nothing.
    public func operationDidCancel(_ operation: AsyncOperation) {}
}
