import Foundation

/// Builds the children of a ``Parallel``: its output is the tuple of its children's outputs, in the
/// order they are written (one child: its output itself).
///
/// A child is a ``TransformOperation`` (it takes the group's input), any other operation (it takes
/// none), a block `{ operation in … operation.finish() }`, or a nested ``Cascade`` or ``Parallel``.
/// The children that take an input must all take the same type: the group's input. Inside the body:
///
/// - `for … in` makes one tuple element: the array of the loop's outputs, in order.
/// - `if` without `else` makes an optional element, `nil` when the condition did not hold.
/// - `if`/`else` and `switch` branches must agree on the input they take and the output they produce.
@resultBuilder
public enum ParallelBuilder: FlowExpressions {
    /// An empty group: it succeeds at once, without an output.
    public static func buildBlock() -> ParallelParts<NoInput> {
        ParallelParts(operations: [], readers: [])
    }

    /// The first child.
    public static func buildPartialBlock<Input, Output: Sendable>(first: FlowPart<Input, Output>) -> ParallelParts<Input, Output>
    {
        ParallelParts<NoInput>(operations: [], readers: []).appending(first, taking: Input.self)
    }

    /// A child that takes the group's input, after children that take it too.
    public static func buildPartialBlock<Input, each Earlier, Output: Sendable>(
        accumulated: ParallelParts<Input, repeat each Earlier>, next: FlowPart<Input, Output>
    ) -> ParallelParts<Input, repeat each Earlier, Output> {
        accumulated.appending(next, taking: Input.self)
    }

    /// A child that takes no input.
    public static func buildPartialBlock<Input, each Earlier, Output: Sendable>(
        accumulated: ParallelParts<Input, repeat each Earlier>, next: FlowPart<NoInput, Output>
    ) -> ParallelParts<Input, repeat each Earlier, Output> {
        accumulated.appending(next, taking: Input.self)
    }

    /// A child that takes the group's input, after children that take none.
    public static func buildPartialBlock<Input, each Earlier, Output: Sendable>(
        accumulated: ParallelParts<NoInput, repeat each Earlier>, next: FlowPart<Input, Output>
    ) -> ParallelParts<Input, repeat each Earlier, Output> {
        accumulated.appending(next, taking: Input.self)
    }

    /// A child that takes no input, after children that take none.
    public static func buildPartialBlock<each Earlier, Output: Sendable>(
        accumulated: ParallelParts<NoInput, repeat each Earlier>, next: FlowPart<NoInput, Output>
    ) -> ParallelParts<NoInput, repeat each Earlier, Output> {
        accumulated.appending(next, taking: NoInput.self)
    }

    /// Children that take different inputs: a compile error that says so.
    @available(
        *, unavailable,
        message: "in a Parallel, the children that take an input must all take the same type (the group's input)"
    )
    public static func buildPartialBlock<Input, each Earlier, Other, Output: Sendable>(
        accumulated: ParallelParts<Input, repeat each Earlier>, next: FlowPart<Other, Output>
    ) -> ParallelParts<Input, repeat each Earlier, Output> {
        fatalError("unavailable")
    }

    /// The group's children: its output is the tuple of theirs (one child: its output).
    public static func buildFinalResult<Input, each Output>(
        _ parts: ParallelParts<Input, repeat each Output>
    ) -> FlowPart<Input, (repeat each Output)> {
        parts.part
    }

    /// Children made only when a condition holds: their output, or `nil`.
    public static func buildOptional<Input, each Output>(
        _ parts: ParallelParts<Input, repeat each Output>?
    ) -> FlowPart<Input, (repeat each Output)?> {
        guard let parts else { return FlowPart(operations: [], reader: { _ in nil }) }
        let read = parts.read
        return FlowPart(operations: parts.operations, reader: { try read($0) })
    }

    /// The first branch of an `if`/`else` or a `switch`.
    public static func buildEither<Input, each Output>(
        first: ParallelParts<Input, repeat each Output>
    ) -> FlowPart<Input, (repeat each Output)> {
        first.part
    }

    /// The second branch of an `if`/`else` or a `switch`.
    public static func buildEither<Input, each Output>(
        second: ParallelParts<Input, repeat each Output>
    ) -> FlowPart<Input, (repeat each Output)> {
        second.part
    }

    /// Children made by a `for … in` loop: the array of their outputs, in order.
    public static func buildArray<Input, each Output>(
        _ parts: [ParallelParts<Input, repeat each Output>]
    ) -> FlowPart<Input, [(repeat each Output)]> {
        // Closures, not key paths: a key path into a type with a parameter pack fails at run time
        // (Swift 6.3 cannot decode its generic arguments).
        let assemblers = parts.map { $0.read }
        return FlowPart(
            operations: parts.flatMap { $0.operations },
            reader: { outcomes in
                try assemblers.map { try $0(outcomes) }
            })
    }

    /// Children inside `if #available`.
    public static func buildLimitedAvailability<Input, each Output>(
        _ parts: ParallelParts<Input, repeat each Output>
    ) -> FlowPart<Input, (repeat each Output)> {
        parts.part
    }
}

/// The children of a ``Parallel`` written so far: their operations, the input those that take one
/// take, and their outputs' types, in order.
public struct ParallelParts<Input, each Output> {
    let operations: [Operation]
    /// Read each child's output, in order (one per child written, of that child's output type).
    let readers: [@Sendable (ChildOutcomes) throws -> Any]

    /// The same children with one more after them; `Taken` is the input of those that take one.
    func appending<Other, Next: Sendable, Taken>(
        _ next: FlowPart<Other, Next>, taking _: Taken.Type
    ) -> ParallelParts<Taken, repeat each Output, Next> {
        let read = next.assemble
        return ParallelParts<Taken, repeat each Output, Next>(
            operations: operations + next.operations, readers: readers + [{ try read($0) }])
    }

    /// Reads the tuple of the children's outputs.
    var read: @Sendable (ChildOutcomes) throws -> (repeat each Output) {
        let readers = readers
        return { outcomes in
            var next = readers.makeIterator()
            // One reader per element, each made for that element's type: the casts hold.
            return (repeat try next.next()!(outcomes) as! each Output)
        }
    }

    /// The children as one part whose output is the tuple of theirs.
    var part: FlowPart<Input, (repeat each Output)> {
        FlowPart(operations: operations, reader: read)
    }
}
