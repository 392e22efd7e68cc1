import Foundation

/// A sequence written as a block of steps (CompositeOperations' cascade), typed from step to step:
/// each step's input is the output of the step before it, and the compiler checks it.
///
/// ```swift
/// let publish = Cascade {
///     FetchRecipe(id: 7)                   // -> Data
///     ParseRecipe()                        // Data -> Recipe
///     Parallel {                           // Recipe -> (Thumbnail, [Translation])
///         MakeThumbnail()
///         for language in ["fr", "de"] { Translate(into: language) }
///     }
///     Publish()                            // (Thumbnail, [Translation]) -> URL
/// }
/// let url = try publish.run(timeout: .seconds(10))
/// ```
///
/// It is a ``SequenceOperation``: it runs on a queue, waits, records, suspends and cancels like any
/// other, and stops at the first step that fails or is cancelled. `Input` is what its first step
/// takes (``NoInput`` when that step takes nothing): nested in another cascade, it takes the step
/// before it's output; on its own, give it with `input:`. Steps may be ``TransformOperation``s, any
/// other operations, blocks that receive their operation, and nested ``Cascade``s and ``Parallel``s,
/// with `if`, `switch` and `for … in` (see ``CascadeBuilder``).
///
/// ``ResultOperation/onCompletion(_:)`` and ``ResultOperation/onCancellation(_:)`` add CompositeOperations' handlers at any level.
public final class Cascade<Input: Sendable, Output: Sendable>: SequenceOperation<Output>, @unchecked Sendable {
    /// Its `dependencies` are those added with `addDependency` (see `AsyncOperation.listsOnlyAddedDependencies`).
    override class var listsOnlyAddedDependencies: Bool { true }

    /// Creates a cascade of the steps its body writes.
    ///
    /// - Parameters:
    ///   - input: The input its first step takes, or `nil` (the default) when the step before it in an
    ///     enclosing flow gives it, or the first step takes none.
    ///   - keepsFinishedChildren: Whether it keeps every step it ran until it is freed (see
    ///     ``SequenceOperation``). Default: `false`.
    ///   - steps: The steps, in order.
    public init(
        input: Input? = nil, keepsFinishedChildren: Bool = false, @CascadeBuilder _ steps: () -> FlowPart<Input, Output>
    ) {
        super.init(operations: steps().operations, keepsFinishedChildren: keepsFinishedChildren)
        if let input { storeInput(input) }
    }

    /// The input its first step takes: set it before the cascade starts (an enclosing flow sets it
    /// from the step before).
    public var input: Input? {
        get { storedInput(as: Input.self) }
        set { storeInput(newValue) }
    }

    override func offerInput(_ value: any Sendable) -> InputOffer {
        // A cascade whose first step takes nothing ignores what it is given, as that step would.
        Input.self == NoInput.self ? .taken : InputOffer(acceptInput(value, as: Input.self))
    }

    override func feed(firstStep: Operation) {
        if Input.self != NoInput.self, let input { Handoff.give(input, to: firstStep) }
    }
}
