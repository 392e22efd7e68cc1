/// An input-taking operation made from a closure that receives the operation itself.
///
/// ```swift
/// let double = TransformBlockOperation<Int, Int> { operation in
///     operation.finish(with: operation.input! * 2)
/// }
/// ```
public final class TransformBlockOperation<Input: Sendable, Output: Sendable>: TransformOperation<Input, Output>,
    @unchecked Sendable
{
    /// Its `dependencies` are those added with `addDependency` (see `AsyncOperation.listsOnlyAddedDependencies`).
    override class var listsOnlyAddedDependencies: Bool { true }

    private let body: @Sendable (TransformBlockOperation<Input, Output>) -> Void
    private let cancelHandler: (@Sendable (TransformBlockOperation<Input, Output>) -> Void)?

    /// Creates an operation that runs `body` when it executes.
    ///
    /// - Parameters:
    ///   - input: The input, or `nil` (the default) to set it later or let a chain provide it.
    ///   - body: The work; it reads ``TransformOperation/input`` and must finish the operation (or
    ///     rerun it) eventually.
    ///   - onCancel: What to do when the operation is cancelled while executing, or `nil` (the
    ///     default) to leave it to the body, which then checks `isCancelled`. It runs as
    ///     ``AsyncOperation/didCancel()`` does: once, on the thread that called `cancel()`, and
    ///     never while the body runs (a cancellation that arrives during the body is delivered when
    ///     the body returns). It should stop the work and call `finish()`: the operation then
    ///     finishes ``Outcome/cancelled``. Cancelled before it started, the operation finishes
    ///     without running either closure; cancelled while the body runs and then asked by the body
    ///     to ``rerun()``, it finishes cancelled instead, without the handler (no work is left).
    public init(
        input: borrowing Input? = nil, _ body: @escaping @Sendable (TransformBlockOperation<Input, Output>) -> Void,
        onCancel: (@Sendable (TransformBlockOperation<Input, Output>) -> Void)? = nil
    ) {
        self.body = body
        self.cancelHandler = onCancel
        super.init()
        // Borrowed, compared with `nil` here and unwrapped in a function of its own: a function that
        // unwraps an `Input?`, or owns one and must destroy it, asks the runtime for
        // `Optional<Input>`'s metadata on entry (about 330 instructions per operation made without
        // an input, as a chain's steps are).
        if input != nil { storeGivenInput(input) }
    }

    @inline(never)
    private func storeGivenInput(_ input: Input?) {
        if let input { self.input = input }
    }

    /// Creates an operation that applies a throwing function to its input: it finishes with the
    /// function's value, or fails with the error the function throws.
    ///
    /// ```swift
    /// let double = TransformBlockOperation(input: 21) { $0 * 2 }
    /// ```
    ///
    /// - Parameters:
    ///   - input: The input, or `nil` (the default) to set it later or let a chain provide it.
    ///   - transform: The function.
    public convenience init(input: borrowing Input? = nil, transform: @escaping @Sendable (Input) throws -> Output) {
        self.init(input: input) { operation in
            guard let input = operation.input else {
                operation.finish(throwing: operation.upstreamError ?? BatonError.missingInput(operation: operation.reference))
                return
            }
            operation.finish(with: Result { try transform(input) })
        }
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
