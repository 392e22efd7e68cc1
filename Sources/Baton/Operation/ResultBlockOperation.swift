/// An operation with an output, made from a closure that receives the operation itself.
///
/// ```swift
/// let answer = ResultBlockOperation<Int> { operation in operation.finish(with: 42) }
/// ```
public final class ResultBlockOperation<Output: Sendable>: ResultOperation<Output>, @unchecked Sendable {
    private let body: @Sendable (ResultBlockOperation<Output>) -> Void

    /// Creates an operation that runs `body` when it executes.
    ///
    /// - Parameter body: The work; it must finish the operation (or rerun it) eventually.
    public init(_ body: @escaping @Sendable (ResultBlockOperation<Output>) -> Void) {
        self.body = body
        super.init()
    }

    /// Runs the body.
    public override func execute() {
        body(self)
    }

    /// Runs the body again, asynchronously: after the current call returns when called from inside
    /// the body, otherwise now on another thread (the dispatch queue of the queue that runs the
    /// operation, when Baton launched it there). Called from inside the body of a cancelled operation,
    /// the operation finishes cancelled instead. Ignored when the operation is decided or finished,
    /// and after a cancellation arrived outside the body: whoever handles the cancellation finishes
    /// the operation.
    public func rerun() {
        reexecute()
    }
}
