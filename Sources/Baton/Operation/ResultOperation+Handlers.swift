import Foundation

extension ResultOperation {
    /// Adds CompositeOperations' completion handler: called once with the operation's outcome
    /// (succeeded with its output, failed, or cancelled), before it becomes finished.
    ///
    /// - Parameter handler: The handler.
    /// - Returns: The operation, so that handlers can be added where it is written in a flow.
    @discardableResult
    public func onCompletion(_ handler: @escaping @Sendable (Outcome<Output>) -> Void) -> Self {
        onFinish(handler)
        return self
    }

    /// Adds CompositeOperations' cancellation handler: called once if the operation ends cancelled,
    /// before it becomes finished (and before the completion handlers added after it).
    ///
    /// - Parameter handler: The handler.
    /// - Returns: The operation, so that handlers can be added where it is written in a flow.
    @discardableResult
    public func onCancellation(_ handler: @escaping @Sendable () -> Void) -> Self {
        onFinish { outcome in
            if case .cancelled = outcome { handler() }
        }
        return self
    }
}
