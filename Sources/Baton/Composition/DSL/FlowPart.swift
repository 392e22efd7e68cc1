import Foundation

/// The input type of a flow step that takes no input: an operation that is not a
/// ``TransformOperation`` (it ignores what the step before it produced), or a ``Cascade`` or
/// ``Parallel`` whose steps take none.
///
/// It has no values: it only appears in types, such as `Cascade<NoInput, Recipe>`.
public enum NoInput: Sendable {}

/// A piece of a flow written with ``CascadeBuilder`` or ``ParallelBuilder``: its operations, in order,
/// typed by the input its first step takes and the output it produces.
///
/// You do not make these yourself: every operation, block, ``Cascade`` or ``Parallel`` written in a
/// builder's body becomes one, and the builder checks that they fit together.
public struct FlowPart<Input, Output> {
    /// The one operation of a single step: a loop of 100,000 steps makes no array per step.
    @usableFromInline let single: Operation?
    /// The operations of a part made of several (or none), in order.
    @usableFromInline let several: [Operation]
    /// Makes this part's output from its operations' outcomes, read in order (used by ``Parallel``,
    /// whose output is built from its children's). `nil` for one operation, whose output is read as
    /// `Output`, and for the steps inside a cascade, whose outputs nobody reads (a cascade in a group
    /// is one operation): no closure is made per step.
    @usableFromInline let reader: (@Sendable (ChildOutcomes) throws -> Output)?

    @usableFromInline
    init(operations: [Operation], reader: (@Sendable (ChildOutcomes) throws -> Output)?) {
        single = nil
        several = operations
        self.reader = reader
    }

    @usableFromInline
    init(single: Operation) {
        self.single = single
        several = []
        reader = nil
    }

    /// The operations, in order.
    @usableFromInline
    var operations: [Operation] {
        single.map { [$0] } ?? several
    }

    /// These operations, then `next`'s.
    @usableFromInline
    func operations<Other, Result>(followedBy next: FlowPart<Other, Result>) -> [Operation] {
        var operations = self.operations
        if let single = next.single { operations.append(single) } else { operations += next.several }
        return operations
    }

    /// The operations of `parts`, in order, in one array.
    @usableFromInline
    static func joined(_ parts: [FlowPart]) -> [Operation] {
        var operations: [Operation] = []
        operations.reserveCapacity(parts.count)
        for part in parts {
            if let single = part.single { operations.append(single) } else { operations += part.several }
        }
        return operations
    }
}

extension FlowPart where Output: Sendable {
    /// One operation whose output is read as `Output`.
    @usableFromInline
    init(_ operation: Operation) {
        self.init(single: operation)
    }

    /// Reads this part's output from its operations' outcomes.
    var assemble: @Sendable (ChildOutcomes) throws -> Output {
        reader ?? { try $0.next(as: Output.self) }
    }
}

/// The outcomes of a ``Parallel``'s children, read in the order the children were written.
@usableFromInline
final class ChildOutcomes: @unchecked Sendable {
    typealias Entry = (reference: OperationReference, outcome: Outcome<(any Sendable)?>)

    private let outcomes: [Entry?]
    /// The group: named when a child's outcome is missing.
    private let group: OperationReference
    /// Only the thread that assembles the output reads, once, in order.
    private var position = 0

    init(_ outcomes: [Entry?], of group: OperationReference) {
        self.outcomes = outcomes
        self.group = group
    }

    /// The next child's output, read as `Output`.
    func next<Output: Sendable>(as _: Output.Type) throws -> Output {
        defer { position += 1 }
        guard position < outcomes.count, let (reference, outcome) = outcomes[position] else {
            throw BatonError.missingOutput(operation: group)
        }
        return try Operation.read(outcome, as: Output.self, from: reference).get()
    }
}

/// The expressions both flow builders accept: operations, blocks, and nested flows.
public protocol FlowExpressions {}

extension FlowExpressions {
    /// A step that takes the previous step's output as its input.
    @inlinable
    public static func buildExpression<Input, Output>(
        _ operation: TransformOperation<Input, Output>
    ) -> FlowPart<Input, Output> {
        FlowPart(operation)
    }

    /// A step that produces an output and takes no input.
    @inlinable
    public static func buildExpression<Output>(_ operation: ResultOperation<Output>) -> FlowPart<NoInput, Output> {
        FlowPart(operation)
    }

    /// A nested cascade: it takes what its first step takes and produces what its last step produces.
    @inlinable
    public static func buildExpression<Input, Output>(_ cascade: Cascade<Input, Output>) -> FlowPart<Input, Output> {
        FlowPart(cascade)
    }

    /// A nested parallel group: it gives its input to each child that takes one, and produces its
    /// children's outputs.
    @inlinable
    public static func buildExpression<Input, Output>(_ parallel: Parallel<Input, Output>) -> FlowPart<Input, Output> {
        FlowPart(parallel)
    }

    /// A step without an output that takes no input: any other operation (a ``GroupOperation``, an
    /// ``AsyncBlockOperation``, a Foundation operation).
    @inlinable
    public static func buildExpression<Step: Operation>(_ operation: Step) -> FlowPart<NoInput, Void> {
        FlowPart(operation)
    }
}
