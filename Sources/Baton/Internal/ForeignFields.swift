import Foundation

#if !canImport(Darwin)
@_spi(Reflection) import Swift

/// Stored properties of Foundation's own classes, read where no API tells Baton what it must know.
/// Linux's Foundation (swift-corelibs-foundation) is written in Swift, so the standard library's
/// reflection finds its properties by name: found once, each is then one load at its offset. A
/// property Foundation guards with a lock of its own is read holding that lock (the one place Baton
/// takes a lock that is not its `Mutex`: it is Foundation's, and only Foundation's code nests in it).
/// `FoundationQueueState` reads `Operation`'s; BatonNetwork reads a download task's.
package enum ForeignFields {
    /// The stored properties `type` itself declares (not its superclasses'), by name.
    package static func declared(by type: AnyClass) -> [String: (offset: Int, type: Any.Type)] {
        var fields: [String: (offset: Int, type: Any.Type)] = [:]
        // `.classType` (a `static var`, which Swift 6 refuses to read) is bit 0.
        _ = _forEachField(of: type, options: _EachFieldOptions(rawValue: 1 << 0)) { name, offset, type, _ in
            fields[String(cString: name)] = (offset, type)
            return true
        }
        return fields
    }

    /// A copy of the `T` stored at `offset` in `object`.
    package static func load<T>(_: T.Type, at offset: Int, of object: AnyObject) -> T {
        withExtendedLifetime(object) {
            UnsafeRawPointer(Unmanaged.passUnretained(object).toOpaque()).load(fromByteOffset: offset, as: T.self)
        }
    }

    /// A copy of the `T` stored at `offset` in `object`, read holding the `NSLock` stored at
    /// `lockOffset` in it: Foundation's lock that guards the property. Never called under a lock of
    /// Baton's: Foundation calls into Baton (`isReady`) with its own locks held.
    package static func load<T>(_: T.Type, at offset: Int, of object: AnyObject, lockedBy lockOffset: Int) -> T {
        let lock = load(Unmanaged<NSLock>.self, at: lockOffset, of: object).takeUnretainedValue()
        lock.lock()
        defer { lock.unlock() }
        return load(T.self, at: offset, of: object)
    }
}
#endif
