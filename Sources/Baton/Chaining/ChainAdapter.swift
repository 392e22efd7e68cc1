import Foundation

/// What runs between two neighbouring operations of a chain.
///
/// Whatever the adapter, cancellation and failure flow on: an upstream operation that was cancelled
/// cancels the downstream one, and one that failed fails the downstream one with the same error
/// (a plain Foundation downstream operation is cancelled instead). Only when the upstream operation
/// succeeded does the adapter's transfer run:
///
/// - ``default`` passes the upstream output into the downstream ``TransformOperation/input``; a value
///   of the wrong type fails the downstream operation with ``BatonError/inputTypeMismatch(operation:expected:actual:)``.
/// - ``custom(_:)`` calls your closure with both neighbours instead. It may set an input, cancel the
///   downstream operation, or throw: the error fails the downstream operation.
///
/// ```swift
/// let adapter = ChainAdapter.custom { upstream, downstream in
///     guard let count = (upstream as? ResultOperation<Int>)?.output,
///           let report = downstream as? TransformOperation<String, String> else { return }
///     report.input = "\(count) lines"
/// }
/// ```
public struct ChainAdapter: Sendable {
    let transfer: (@Sendable (_ upstream: Operation, _ downstream: Operation) throws -> Void)?

    /// Passes the upstream output into the downstream input, checking its type at run time.
    public static let `default` = ChainAdapter(transfer: nil)

    /// Calls `transfer` with both neighbours when the upstream operation succeeded.
    ///
    /// - Parameter transfer: Runs right after the upstream operation has finished, on the thread that
    ///   finished it, before the downstream operation is enqueued; keep it quick (make slow work an
    ///   operation of its own). An error it throws fails the downstream operation (a plain Foundation
    ///   operation is cancelled) and becomes the chain's outcome.
    /// - Returns: The adapter.
    public static func custom(
        _ transfer: @escaping @Sendable (_ upstream: Operation, _ downstream: Operation) throws -> Void
    ) -> ChainAdapter {
        ChainAdapter(transfer: transfer)
    }
}
