import Baton
import Foundation

#if canImport(FoundationNetworking)
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
/// A task can end before `resume()` has returned (a connection refused at once, a `cancel()` of the
/// task itself the moment it appears: 1 to 16 of 300 downloads each, measured). Foundation lets go of
/// the protocol object then too, but only after it has handed the task's end to the session's
/// delegate queue, on both of its ending paths. So a client's sessions report on a
/// ``WatchingQueue``: while a download's `resume()` runs, the queue knows its task, and anything
/// added to the queue first takes the loader of each task it watches (before the end it carries can
/// run). Watching lasts from just before `resume()` to just after it, so the queue nearly always
/// watches nothing, and what is added costs one lock and an empty check.
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

    /// The delegate queue for a client's session: serial, as Foundation's own, and on Linux one that
    /// watches the tasks of resuming downloads.
    static func sessionQueue() -> OperationQueue? {
        #if canImport(FoundationNetworking)
        return WatchingQueue()
        #else
        return nil
        #endif
    }

    #if canImport(FoundationNetworking)
    /// A session's serial delegate queue that, before it takes a task's end, takes the loader of every
    /// download task it watches (those whose `resume()` is running). Foundation adds a task's end here
    /// and only then lets go of the task's loader, so a task that ends before `resume()` returns has
    /// its loader taken all the same.
    final class WatchingQueue: OperationQueue, @unchecked Sendable {
        private let resuming = Mutex([ObjectIdentifier: (task: URLSessionTask, download: DownloadOperation)]())

        override init() {
            super.init()
            maxConcurrentOperationCount = 1
        }

        /// Watches `task` until ``stopWatching(_:)``: its loader is taken for `download` before
        /// anything else is added to the queue.
        func watch(_ task: URLSessionTask, for download: DownloadOperation) {
            resuming.withLock { $0[ObjectIdentifier(task)] = (task, download) }
        }

        func stopWatching(_ task: URLSessionTask) {
            resuming.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(task)) }
        }

        /// How many tasks are watched now (for tests).
        var watchedCount: Int { resuming.withLock { $0.count } }

        override func addOperation(_ block: @escaping @Sendable () -> Void) {
            let watched = resuming.withLock { $0.isEmpty ? [] : Array($0.values) }
            // Outside the lock: a loader is read under its task's own lock.
            for entry in watched { entry.download.takeLoader(of: entry.task) }
            super.addOperation(block)
        }
    }

    /// `_protocolLock` and `_protocolStorage` of `URLSessionTask`.
    private struct TaskLayout: Sendable {
        let lockOffset: Int
        let storageOffset: Int
        let storageType: Any.Type

        static let shared: TaskLayout? = {
            let fields = ForeignFields.declared(by: URLSessionTask.self)
            guard let lock = fields["_protocolLock"], lock.type == NSLock.self, let storage = fields["_protocolStorage"]
            else { return nil }
            return TaskLayout(lockOffset: lock.offset, storageOffset: storage.offset, storageType: storage.type)
        }()

        func loader(of task: URLSessionTask) -> AnyObject? {
            // The enum's type is Foundation's own (file-private there): opened, to copy it under the lock.
            func copy<T>(_: T.Type) -> Any { ForeignFields.load(T.self, at: storageOffset, of: task, lockedBy: lockOffset) }
            let storage = _openExistential(storageType, do: copy)
            // The enum's case that holds the object is `existing(URLProtocol)`.
            guard let held = Mirror(reflecting: storage).children.first, held.label == "existing" else { return nil }
            return held.value as? URLProtocol
        }
    }

    /// The lazy `tempFileURL` of Foundation's `_NativeProtocol`, the class every download's loader
    /// descends from. Only that class is read: a protocol class of the user's with a lazy
    /// `tempFileURL` of its own names a file of the user's (an independent review's test had one
    /// removed).
    private struct LoaderLayout: Sendable {
        let native: ObjectIdentifier
        let fileOffset: Int

        static let shared: LoaderLayout? = {
            guard let native = _typeByName("FoundationNetworking._NativeProtocol") as? AnyClass,
                let file = ForeignFields.declared(by: native)["$__lazy_storage_$_tempFileURL"], file.type == URL?.self
            else { return nil }
            return LoaderLayout(native: ObjectIdentifier(native), fileOffset: file.offset)
        }()

        static func file(of loader: AnyObject) -> URL? {
            guard let layout = shared else { return nil }
            var level: AnyClass? = type(of: loader)
            while let current = level, ObjectIdentifier(current) != layout.native { level = _getSuperclass(current) }
            guard level != nil else { return nil }
            return ForeignFields.load(URL?.self, at: layout.fileOffset, of: loader)
        }
    }
    #endif
}
