/// An asynchronous operation made from a closure that receives the operation itself.
///
/// The closure finishes the operation when its work is done, from any thread, or calls ``rerun()`` to
/// run again (CompositeOperations' "operation yields itself to the block").
///
/// ```swift
/// let attempts = Counter()
/// let poll = AsyncBlockOperation { operation in
///     if attempts.increment() < 3 { operation.rerun() } else { operation.finish() }
/// }
/// ```
public final class AsyncBlockOperation: AsyncOperation, @unchecked Sendable {
    private let body: @Sendable (AsyncBlockOperation) -> Void

    /// Creates an operation that runs `body` when it executes.
    ///
    /// - Parameter body: The work; it must finish the operation (or rerun it) eventually.
    public init(_ body: @escaping @Sendable (AsyncBlockOperation) -> Void) {
        self.body = body
        super.init()
    }

    /// Runs the body.
    public override func execute() {
        body(self)
    }

    /// Runs the body again, asynchronously, after the current call returns. A cancelled operation
    /// finishes cancelled instead; a finished one ignores the call.
    public func rerun() {
        reexecute()
    }
}
