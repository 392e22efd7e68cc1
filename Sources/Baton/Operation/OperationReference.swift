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
    /// The operation's identity while it lives, for lookups keyed by `ObjectIdentifier`. Swift may
    /// give a freed object's identity to a new one; equality does not rely on it alone.
    public let id: ObjectIdentifier
    /// A number no other Baton operation of the process has (0 for a Foundation operation).
    private let serialNumber: UInt64
    private let box: WeakOperation

    /// Creates a reference to `operation`, named as it is named now.
    ///
    /// - Parameter operation: The operation.
    public init(_ operation: Operation) {
        name = operation.batonName
        id = ObjectIdentifier(operation)
        serialNumber = (operation as? AsyncOperation)?.serialNumber ?? 0
        box = WeakOperation(operation)
    }

    /// The operation, or `nil` once it has been freed.
    public var operation: Operation? { box.operation }

    /// The display name.
    public var description: String { name }

    /// Whether both name the same operation. For Baton operations this holds after they are freed
    /// too (each has a number of its own); two references to Foundation operations compare their
    /// ``id``, which Swift may reuse once an operation is freed.
    public static func == (lhs: OperationReference, rhs: OperationReference) -> Bool {
        lhs.serialNumber == rhs.serialNumber && lhs.id == rhs.id
    }

    /// Hashes the identity.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(serialNumber)
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
