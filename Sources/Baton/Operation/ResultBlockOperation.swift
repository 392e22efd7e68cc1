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

    /// Runs the body again, asynchronously, after the current call returns. A cancelled operation
    /// finishes cancelled instead; a finished one ignores the call.
    public func rerun() {
        reexecute()
    }
}
