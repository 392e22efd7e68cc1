/// An outcome as an operation keeps it and passes it around inside Baton: immutable, behind one
/// reference.
///
/// `Outcome<(any Sendable)?>` is address-only (its output is an opaque existential), so every copy and
/// every destroy went through the runtime's generic value witnesses: about 130 instructions a copy,
/// and a group child made some 25 of them between its `finish()` and its group counting it (measured
/// with callgrind, 2026-11-25). This class is copied with a retain. The outcomes without a payload, a
/// success without an output and a cancellation, are two shared instances: the usual finish
/// allocates nothing.
final class SharedOutcome: LifecycleOutcome, Sendable {
    /// Which case `value` is, read without copying the payload.
    enum Kind: Hashable {
        case succeeded, failed, cancelled
    }

    /// The outcome itself; reading it copies it (once, where a caller needs the output or the error).
    let value: Outcome<(any Sendable)?>
    let kind: Kind

    private init(_ value: Outcome<(any Sendable)?>, kind: Kind) {
        self.value = value
        self.kind = kind
    }

    /// The cancelled outcome, shared.
    static let cancelled = SharedOutcome(.cancelled, kind: .cancelled)
    /// The success without an output (a `Void` operation's), shared.
    static let succeededWithoutOutput = SharedOutcome(.succeeded(nil), kind: .succeeded)

    /// A success with `output`: the shared instance when there is none.
    static func succeeded(_ output: (any Sendable)?) -> SharedOutcome {
        guard let output else { return succeededWithoutOutput }
        return SharedOutcome(.succeeded(output), kind: .succeeded)
    }

    /// A failure with `error`.
    static func failed(_ error: any Error) -> SharedOutcome {
        SharedOutcome(.failed(error), kind: .failed)
    }

    /// `outcome`, shared.
    static func of(_ outcome: Outcome<(any Sendable)?>) -> SharedOutcome {
        switch outcome {
        case .succeeded(let output): return succeeded(output)
        case .failed(let error): return failed(error)
        case .cancelled: return cancelled
        }
    }

    var isCancelled: Bool { kind == .cancelled }
    var isSuccess: Bool { kind == .succeeded }

    /// The error of a failure, otherwise `nil`.
    var error: (any Error)? {
        guard kind == .failed, case .failed(let error) = value else { return nil }
        return error
    }
}
