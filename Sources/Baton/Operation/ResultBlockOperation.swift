/// An operation with an output, made from a closure that receives the operation itself.
///
/// ```swift
/// let answer = ResultBlockOperation<Int> { operation in operation.finish(with: 42) }
/// ```
public final class ResultBlockOperation<Output: Sendable>: ResultOperation<Output>, @unchecked Sendable {
    /// Its `dependencies` are those added with `addDependency` (see `AsyncOperation.listsOnlyAddedDependencies`).
    override class var listsOnlyAddedDependencies: Bool { true }

    private let body: @Sendable (ResultBlockOperation<Output>) -> Void
    private let cancelHandler: (@Sendable (ResultBlockOperation<Output>) -> Void)?

    /// Creates an operation that runs `body` when it executes.
    ///
    /// - Parameters:
    ///   - body: The work; it must finish the operation (or rerun it) eventually.
    ///   - onCancel: What to do when the operation is cancelled while executing, or `nil` (the
    ///     default) to leave it to the body, which then checks `isCancelled`. It runs as
    ///     ``AsyncOperation/didCancel()`` does: once, on the thread that called `cancel()`, and
    ///     never while the body runs (a cancellation that arrives during the body is delivered when
    ///     the body returns). It should stop the work and call `finish()`: the operation then
    ///     finishes ``Outcome/cancelled``. Cancelled before it started, the operation finishes
    ///     without running either closure; cancelled while the body runs and then asked by the body
    ///     to ``rerun()``, it finishes cancelled instead, without the handler (no work is left).
    public init(
        _ body: @escaping @Sendable (ResultBlockOperation<Output>) -> Void,
        onCancel: (@Sendable (ResultBlockOperation<Output>) -> Void)? = nil
    ) {
        self.body = body
        self.cancelHandler = onCancel
        super.init()
    }

    /// Runs the body.
    public override func execute() {
        body(self)
    }

    /// Runs the `onCancel` closure, if there is one.
    public override func didCancel() {
        cancelHandler?(self)
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
