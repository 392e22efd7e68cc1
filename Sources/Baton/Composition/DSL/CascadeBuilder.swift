import Foundation

/// Builds the steps of a ``Cascade``: each step's input is the output of the step before it, checked
/// by the compiler.
///
/// A step is a ``TransformOperation`` (it takes the previous output), any other operation (it takes
/// none), a block `{ operation in … operation.finish() }`, or a nested ``Cascade`` or ``Parallel``.
/// Inside the body:
///
/// - `if` without `else` runs its steps only when the condition holds: they must give back the type
///   they take (`T` in, `T` out), or take nothing and produce nothing; when skipped, the value flows on.
/// - `if`/`else` and `switch` branches must agree on the input they take and the output they produce.
/// - `for … in` repeats steps that give back the type they take, or that take and produce nothing.
@resultBuilder
public enum CascadeBuilder: FlowExpressions {
    /// An empty cascade: it succeeds at once, without an output.
    @inlinable
    public static func buildBlock() -> FlowPart<NoInput, Void> {
        FlowPart(operations: [], reader: nil)
    }

    /// The first step.
    @inlinable
    public static func buildPartialBlock<Input, Output>(first: FlowPart<Input, Output>) -> FlowPart<Input, Output> {
        first
    }

    /// A step that takes the output of the steps before it.
    @inlinable
    public static func buildPartialBlock<Input, Middle, Output>(
        accumulated: FlowPart<Input, Middle>, next: FlowPart<Middle, Output>
    ) -> FlowPart<Input, Output> {
        FlowPart(operations: accumulated.operations(followedBy: next), reader: nil)
    }

    /// A step that takes no input, after steps that produce anything.
    @inlinable
    public static func buildPartialBlock<Input, Middle, Output>(
        accumulated: FlowPart<Input, Middle>, next: FlowPart<NoInput, Output>
    ) -> FlowPart<Input, Output> {
        FlowPart(operations: accumulated.operations(followedBy: next), reader: nil)
    }

    /// A step whose input is not the output of the steps before it: a compile error that says so.
    @available(
        *, unavailable,
        message: "in a Cascade, each step takes the output of the step before it: a step here takes another type"
    )
    public static func buildPartialBlock<Input, Middle, Other, Output>(
        accumulated: FlowPart<Input, Middle>, next: FlowPart<Other, Output>
    ) -> FlowPart<Input, Output> {
        fatalError("unavailable")
    }

    /// Steps run only when a condition holds: when it does not, one step passes the value on.
    public static func buildOptional<Value: Sendable>(_ part: FlowPart<Value, Value>?) -> FlowPart<Value, Value> {
        part ?? passThrough()
    }

    /// Steps that change the type under an `if` without `else`: a compile error that says so.
    @available(
        *, unavailable,
        message: "steps under an 'if' without 'else' must give back the type they take, or take and produce nothing"
    )
    public static func buildOptional<Input, Output>(_ part: FlowPart<Input, Output>?) -> FlowPart<Input, Output> {
        fatalError("unavailable")
    }

    /// Steps without input or output run only when a condition holds.
    public static func buildOptional(_ part: FlowPart<NoInput, Void>?) -> FlowPart<NoInput, Void> {
        part ?? nothing()
    }

    /// The first branch of an `if`/`else` or a `switch`.
    @inlinable
    public static func buildEither<Input, Output>(first: FlowPart<Input, Output>) -> FlowPart<Input, Output> {
        first
    }

    /// The second branch of an `if`/`else` or a `switch`.
    @inlinable
    public static func buildEither<Input, Output>(second: FlowPart<Input, Output>) -> FlowPart<Input, Output> {
        second
    }

    /// Steps repeated by a `for … in` loop, each giving back the type it takes; no repetition passes
    /// the value on.
    @inlinable
    public static func buildArray<Value: Sendable>(_ parts: [FlowPart<Value, Value>]) -> FlowPart<Value, Value> {
        guard !parts.isEmpty else { return passThrough() }
        return FlowPart(operations: FlowPart.joined(parts), reader: nil)
    }

    /// Steps that change the type in a `for … in` loop: a compile error that says so.
    @available(
        *, unavailable,
        message: "steps in a 'for' loop must give back the type they take, or take and produce nothing"
    )
    public static func buildArray<Input, Output>(_ parts: [FlowPart<Input, Output>]) -> FlowPart<Input, Output> {
        fatalError("unavailable")
    }

    /// Steps without input or output repeated by a `for … in` loop.
    public static func buildArray(_ parts: [FlowPart<NoInput, Void>]) -> FlowPart<NoInput, Void> {
        guard !parts.isEmpty else { return nothing() }
        return FlowPart(operations: FlowPart.joined(parts), reader: nil)
    }

    /// Steps inside `if #available`.
    @inlinable
    public static func buildLimitedAvailability<Input, Output>(_ part: FlowPart<Input, Output>) -> FlowPart<Input, Output> {
        part
    }

    /// The step that stands for skipped steps that give back the type they take: it passes its input on.
    @usableFromInline
    static func passThrough<Value: Sendable>() -> FlowPart<Value, Value> {
        let step = TransformBlockOperation<Value, Value>(transform: { $0 })
        step.name = "skipped"
        return FlowPart(step)
    }

    /// The step that stands for skipped steps without input or output: it produces nothing, so the
    /// step after it sees what they would have given it.
    @usableFromInline
    static func nothing() -> FlowPart<NoInput, Void> {
        let step = ResultBlockOperation<Void> { $0.finish() }
        step.name = "skipped"
        return FlowPart(step)
    }
}
