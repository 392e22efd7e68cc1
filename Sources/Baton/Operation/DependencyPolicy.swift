/// What an operation does in `start()` when one of its dependencies did not succeed.
///
/// Foundation runs a dependent operation once its dependencies are finished, whatever their outcome.
/// Baton checks the dependencies first, according to the operation's policy:
///
/// ```swift
/// let upload = UploadOperation()
/// upload.dependencyPolicy = .skipOnCancellation   // run even if the compression step failed
/// ```
///
/// A skipped operation never calls `execute()`. It finishes cancelled when a dependency was
/// cancelled, and failed with ``BatonError/dependencyFailed(dependency:underlying:)`` when a
/// dependency failed. Plain Foundation operations count through `isCancelled` only.
public enum DependencyPolicy: Sendable, Hashable {
    /// Skip when any dependency failed or was cancelled. The default.
    case skipOnFailureOrCancellation
    /// Skip only when a dependency was cancelled (the behaviour of MPC_NSOperation).
    case skipOnCancellation
    /// Always run, as plain Foundation does.
    case runRegardless
}
