import Foundation

/// Names an operation in an error or a diagnostic, and leads back to it while it lives.
///
/// Two unnamed operations of the same type share a display ``name``; the reference still tells them
/// apart: compare ``operation`` with `===`, or use ``id`` as a dictionary key.
///
/// ```swift
/// do {
///     try save.run(timeout: .seconds(5))
/// } catch BatonError.dependencyFailed(let dependency, _) {
///     print(dependency.operation === download)   // true: it was the download
/// }
/// ```
///
/// The operation is held weakly. An error can outlive the operations it names (and is often stored in
/// the outcome of the very operation it names), so a strong reference would keep operations alive or
/// form a cycle. Once the operation is freed, ``operation`` is `nil` and ``name`` remains.
public struct OperationReference: Sendable, Hashable, CustomStringConvertible {
    /// The operation's `name`, or its type when it has none.
    public let name: String
    /// The operation's identity. Unique among live objects: equal references name the same operation
    /// while it lives (Swift may reuse an identity once an object is freed).
    public let id: ObjectIdentifier
    private let box: WeakOperation

    /// Creates a reference to `operation`, named as it is named now.
    ///
    /// - Parameter operation: The operation.
    public init(_ operation: Operation) {
        name = operation.batonName
        id = ObjectIdentifier(operation)
        box = WeakOperation(operation)
    }

    /// The operation, or `nil` once it has been freed.
    public var operation: Operation? { box.operation }

    /// The display name.
    public var description: String { name }

    /// Whether both name the same operation (the same ``id``).
    public static func == (lhs: OperationReference, rhs: OperationReference) -> Bool {
        lhs.id == rhs.id
    }

    /// Hashes the identity.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(id)
    }
}

/// A weak reference written once, in `init`, and only read afterwards (weak loads are atomic).
private final class WeakOperation: @unchecked Sendable {
    weak var operation: Operation?

    init(_ operation: Operation) {
        self.operation = operation
    }
}

extension Operation {
    /// The name Baton uses in errors and diagnostics: `name`, or the type's name.
    var batonName: String {
        name ?? String(describing: type(of: self))
    }

    /// A reference to this operation for an error or a diagnostic.
    var reference: OperationReference {
        OperationReference(self)
    }
}
