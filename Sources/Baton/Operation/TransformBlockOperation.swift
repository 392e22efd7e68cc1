/// An input-taking operation made from a closure that receives the operation itself.
///
/// ```swift
/// let double = TransformBlockOperation<Int, Int> { operation in
///     operation.finish(with: operation.input! * 2)
/// }
/// ```
public final class TransformBlockOperation<Input, Output>: TransformOperation<Input, Output>, @unchecked Sendable {
    private let body: @Sendable (TransformBlockOperation<Input, Output>) -> Void

    /// Creates an operation that runs `body` when it executes.
    ///
    /// - Parameter body: The work; it reads ``TransformOperation/input`` and must finish the
    ///   operation (or rerun it) eventually.
    public init(_ body: @escaping @Sendable (TransformBlockOperation<Input, Output>) -> Void) {
        self.body = body
        super.init()
    }

    /// Creates an operation that applies a throwing function to its input: it finishes with the
    /// function's value, or fails with the error the function throws.
    ///
    /// - Parameter transform: The function.
    public convenience init(transform: @escaping @Sendable (Input) throws -> Output) {
        self.init { operation in
            guard let input = operation.input else {
                operation.finish(throwing: operation.upstreamError ?? BatonError.missingInput(operation: operation.batonName))
                return
            }
            operation.finish(with: Result { try transform(input) })
        }
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
