import Baton
import Foundation

#if canImport(FoundationNetworking)
@_spi(Reflection) import Swift
import FoundationNetworking
#endif

/// Where Linux's FoundationNetworking writes a download task's body, so that a download that ends
/// without handing the file over (cancelled, timed out, refused, cut short) can remove it.
///
/// swift-corelibs-foundation writes the body to `<UUID>.tmp` in the temporary folder, a name it keeps
/// in the task's protocol object (a lazy `tempFileURL` of its `_NativeProtocol`) and gives out only
/// when the download succeeds. Every other end leaves the file behind, an empty one even when the
/// connection was refused. Baton takes the protocol object from the task right after `resume()`:
/// the task creates it there, under its `_protocolLock`, and lets go of it only once the task has
/// ended. Once the task has ended, the lazy name tells which file it made, if any. Only Foundation's
/// own `_NativeProtocol` is read: a protocol class of the user's names files of the user's.
///
/// The one gap: a task that ends before `resume()` has returned (a connection refused at once, a
/// `cancel()` of the task itself right after it resumed) has let go of its protocol object before
/// Baton could look, and its file stays, as it always did (about 2% of 500 refused downloads at once
/// in the review's run; none of Baton's own cancels, which wait for the task to be stored).
///
/// Found once by name and type with the standard library's reflection; where anything is not found
/// (Apple platforms, whose Foundation removes its own file; a future Foundation that renames these),
/// every answer is `nil` and nothing is removed.
enum FoundationBodyFile {
    /// The object that loads `task`, read under the task's own lock; `nil` when there is none (not
    /// resumed yet, or ended already) or Baton cannot read it.
    static func loader(of task: URLSessionTask) -> AnyObject? {
        #if canImport(FoundationNetworking)
        return TaskLayout.shared?.loader(of: task)
        #else
        return nil
        #endif
    }

    /// The file `loader` made for the body, if it made one. Read only once its task has ended: the
    /// name is written, once, while the transfer runs.
    static func file(of loader: AnyObject) -> URL? {
        #if canImport(FoundationNetworking)
        return LoaderLayout.file(of: loader)
        #else
        return nil
        #endif
    }

    #if canImport(FoundationNetworking)
    /// `_protocolLock` and `_protocolStorage` of `URLSessionTask`.
    private struct TaskLayout: Sendable {
        let lockOffset: Int
        let storageOffset: Int
        let storageType: Any.Type

        static let shared: TaskLayout? = {
            var lockOffset: Int?
            var storage: (Int, Any.Type)?
            // `.classType` (a `static var`, which Swift 6 refuses to read) is bit 0.
            _ = _forEachField(of: URLSessionTask.self, options: _EachFieldOptions(rawValue: 1 << 0)) { name, offset, type, _ in
                switch String(cString: name) {
                case "_protocolLock" where type == NSLock.self: lockOffset = offset
                case "_protocolStorage": storage = (offset, type)
                default: break
                }
                return true
            }
            guard let lockOffset, let storage else { return nil }
            return TaskLayout(lockOffset: lockOffset, storageOffset: storage.0, storageType: storage.1)
        }()

        func loader(of task: URLSessionTask) -> AnyObject? {
            withExtendedLifetime(task) {
                let base = UnsafeRawPointer(Unmanaged.passUnretained(task).toOpaque())
                let lock = base.load(fromByteOffset: lockOffset, as: Unmanaged<NSLock>.self).takeUnretainedValue()
                func copy<T>(_: T.Type) -> Any { base.load(fromByteOffset: storageOffset, as: T.self) }
                lock.lock()
                let storage = _openExistential(storageType, do: copy)
                lock.unlock()
                // The enum's case that holds the object is `existing(URLProtocol)`.
                guard let held = Mirror(reflecting: storage).children.first, held.label == "existing" else { return nil }
                return held.value as? URLProtocol
            }
        }
    }

    /// The lazy `tempFileURL` of the protocol object's `_NativeProtocol` level.
    private enum LoaderLayout {
        private static let storageName = "$__lazy_storage_$_tempFileURL"

        /// Offsets by the protocol object's class: HTTP's, and any other that loads a download.
        private static let offsets = Mutex([ObjectIdentifier: Int?]())

        static func file(of loader: AnyObject) -> URL? {
            let type: AnyClass = Swift.type(of: loader)
            let known = offsets.withLock { $0[ObjectIdentifier(type)] }
            let offset = known ?? find(in: type)
            if known == nil { offsets.withLock { $0[ObjectIdentifier(type)] = .some(offset) } }
            guard let offset else { return nil }
            return withExtendedLifetime(loader) {
                UnsafeRawPointer(Unmanaged.passUnretained(loader).toOpaque()).load(fromByteOffset: offset, as: URL?.self)
            }
        }

        /// Foundation's own class: a protocol class of the user's with a lazy `tempFileURL` of its own
        /// names a file of the user's (an independent review's test had one removed).
        private static let nativeLevel = "FoundationNetworking._NativeProtocol"

        /// The offset of the lazy name in an object of `type`, found at Foundation's `_NativeProtocol`
        /// level of it; `nil` when `type` does not descend from it.
        private static func find(in type: AnyClass) -> Int? {
            var level: AnyClass? = type
            while let current = level, _typeName(current, qualified: true) != nativeLevel {
                level = _getSuperclass(current)
            }
            guard let native = level else { return nil }
            var found: Int?
            _ = _forEachField(of: native, options: _EachFieldOptions(rawValue: 1 << 0)) { name, offset, fieldType, _ in
                if String(cString: name) == storageName, fieldType == URL?.self { found = offset }
                return found == nil
            }
            return found
        }
    }
    #endif
}
