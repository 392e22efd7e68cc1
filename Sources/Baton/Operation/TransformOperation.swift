/// An asynchronous operation that takes an `Input` and produces an `Output`.
///
/// Set ``input`` before the operation starts, or let a chain's adapter inject the previous
/// operation's output. Started without an input, the operation fails with
/// ``BatonError/missingInput(operation:)`` without executing (unless it runs regardless of an
/// upstream failure, see ``AsyncOperation/upstreamError``).
///
/// ```swift
/// final class Shout: TransformOperation<String, String>, @unchecked Sendable {
///     override func execute() { finish(with: input!.uppercased()) }
/// }
///
/// let shout = Shout()
/// shout.input = "hello"
/// OperationQueue().addOperation(shout)
/// shout.waitUntilFinished()
/// print(shout.output!)   // HELLO
/// ```
open class TransformOperation<Input: Sendable, Output: Sendable>: ResultOperation<Output>, @unchecked Sendable {
    /// Creates a pending operation whose input is set later.
    public override init() {
        super.init()
    }

    override func offerInput(_ value: any Sendable) -> InputOffer {
        InputOffer(acceptInput(value, as: Input.self))
    }

    /// Creates a pending operation with its input.
    ///
    /// - Parameter input: The input.
    public init(input: Input) {
        super.init()
        core.withLock { $0.input = input }
    }

    /// The input. Set it before the operation starts; a value set later is ignored and reported.
    public final var input: Input? {
        // Unwrapped before the cast, as `ResultOperation` does with outputs: an `any Sendable` input
        // came back wrapped in the storage's Optional.
        get { storedInput(as: Input.self) }
        set { storeInput(newValue) }
    }

    override func preflightFailure(_ state: State) -> (any Error)? {
        if let failure = super.preflightFailure(state) { return failure }
        if state.input == nil && state.upstreamError == nil {
            return BatonError.missingInput(operation: reference)
        }
        return nil
    }
}

/// What an operation did with an input it was offered (``AsyncOperation/offerInput(_:)``).
enum InputOffer {
    /// It takes no input: the value is not for it.
    case takesNone
    /// It stored the value as its input.
    case taken
    /// The value is not of its input type.
    case mismatch(BatonError)

    init(_ mismatch: BatonError?) {
        self = mismatch.map { .mismatch($0) } ?? .taken
    }
}

extension AsyncOperation {
    /// The input stored for the operation, read as `Input`.
    ///
    /// Read under the lock, cast outside it: `Optional.flatMap` with the cast inside ran unspecialized
    /// for a generic `Input`, with a closure context, on every read of a chain step's input.
    func storedInput<Input>(as _: Input.Type) -> Input? {
        guard let stored = core.withLock({ $0.input }) else { return nil }
        return stored as? Input
    }

    /// Stores the input while the operation is pending; a value given later is ignored and reported.
    func storeInput(_ value: (any Sendable)?) {
        typealias Stored = (accepted: Bool, observer: (@Sendable (any Sendable) -> Void)?)
        let stored: Stored = core.withLock { state in
            guard state.life.isPending else { return (false, nil) }
            state.input = value
            return (true, state.inputObserver)
        }
        if !stored.accepted { return Diagnostics.report(.inputAfterStart, self) }
        if let value, let observer = stored.observer { observer(value) }
    }

    /// Has `observer` told of each input stored while the operation is pending (outside its lock),
    /// which is before its gate can begin: for an operation whose categories follow from its input (a
    /// network request claims its host), so that what it claims then is claimed like anything added
    /// before it started. Set once, in the operation's `init`. `package`: for BatonNetwork's
    /// operations, whose request may arrive through a chain.
    package func observeStoredInputs(_ observer: @escaping @Sendable (any Sendable) -> Void) {
        core.withLock { $0.inputObserver = observer }
    }

    /// Stores `value` as the input when it is an `Input`, or returns the error that says why it does
    /// not fit.
    ///
    /// A value of exactly the type `Input` (what a chain's previous step nearly always hands on) is
    /// stored as it is, without a cast: the cast writes into an `Input?`, and a function that has one
    /// asks the runtime for `Optional<Input>`'s metadata on entry, whichever way it goes (about 330
    /// instructions a step, callgrind). The cast lives in a function of its own, called only when the
    /// types differ.
    func acceptInput<Input: Sendable>(_ value: any Sendable, as _: Input.Type) -> BatonError? {
        if type(of: value) == Input.self {
            storeInput(value)
            return nil
        }
        return castAndStoreInput(value, as: Input.self)
    }

    /// `acceptInput`'s cast, for a value whose type is not exactly `Input` (a subclass, a value for an
    /// existential or an optional `Input`).
    @inline(never)
    private func castAndStoreInput<Input: Sendable>(_ value: any Sendable, as _: Input.Type) -> BatonError? {
        guard let typed = value as? Input else {
            return .inputTypeMismatch(
                operation: reference,
                expected: String(describing: Input.self),
                actual: String(describing: type(of: value))
            )
        }
        storeInput(typed)
        return nil
    }
}
