import Baton
import Foundation

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a download produces: where the body is, and the response.
public struct DownloadedFile: Sendable {
    /// The file, at the destination the operation was given.
    public let url: URL
    /// The response.
    public let response: HTTPURLResponse
    /// The body's size in bytes.
    public let byteCount: Int64
}

/// Streams a response's body to a file: memory stays bounded whatever the size, and the destination
/// is written only once the whole body has arrived (replacing any file there), so a failed or
/// cancelled download leaves no partial file at the destination, and no copy of the body behind: on
/// Linux, Foundation writes the body to `<UUID>.tmp` in the temporary folder and removes it on no
/// path, so Baton removes it when the download ends without it (cancelled, timed out, refused, cut
/// short), as Apple's Foundation does.
///
/// ```swift
/// let download = HTTPClient.shared.download(URLRequest(url: url), to: destination)
/// ```
///
/// A destination whose folder does not exist or cannot be written fails the operation at start with
/// ``NetworkError/destinationNotWritable(operation:destination:reason:)``, before anything is sent.
///
/// **Progress.** ``progress`` follows the bytes received while the transfer runs when the operation
/// was made with `reportsProgress: true`; otherwise it reads the task's own counts, which Apple's
/// Foundation keeps while Linux's leaves them at zero until the end. Following progress on Linux takes
/// a session delegate, whose callback per chunk of the body costs a large download about a quarter of
/// its throughput on loopback (measured at 1 GiB): ask for it when someone watches.
public final class DownloadOperation: HTTPOperation<DownloadedFile>, ProgressReporting, @unchecked Sendable {
    /// Where the body goes.
    public let destination: URL
    /// Whether the transfer reports each chunk it writes, so that ``progress`` follows it on every platform.
    public let reportsProgress: Bool
    private let counts = Mutex((received: Int64(0), expected: Int64(-1)))
    /// The object that loads the task on Linux, taken as the task resumes (or, when the task ends
    /// first, as its end is handed to the session's queue): its temporary file is removed when the
    /// task ends without handing it over (see `FoundationBodyFile`).
    private let loader = Mutex(LoaderLook.notYet)
    /// The file of Foundation's that the end removed, if any (for tests).
    let removedBodyFile = Mutex<URL?>(nil)
    /// Whether the task's end knew its loader; `nil` until the task has ended (for tests).
    var endKnewLoader: Bool? {
        guard case .ended(let knewLoader) = loader.withLock({ $0 }) else { return nil }
        return knewLoader
    }

    init(_ request: URLRequest?, to destination: URL, reportsProgress: Bool, client: HTTPClient) {
        self.destination = destination
        self.reportsProgress = reportsProgress
        super.init(request, client: client)
    }

    /// Bytes received against the bytes expected (indeterminate until the response says its length).
    /// Each read returns a new `Progress`.
    public var progress: Progress {
        let progress = Progress(totalUnitCount: expectedBytes)
        progress.completedUnitCount = bytesReceived
        return progress
    }

    /// The bytes received so far.
    public var bytesReceived: Int64 {
        let counted = counts.withLock { $0.received }
        return counted > 0 || reportsProgress ? counted : task?.countOfBytesReceived ?? 0
    }

    private var expectedBytes: Int64 {
        let counted = counts.withLock { $0.expected }
        return counted >= 0 || reportsProgress ? counted : task?.countOfBytesExpectedToReceive ?? -1
    }

    override func makeTask(for request: URLRequest) throws -> URLSessionTask {
        try checkDestination()
        if reportsProgress { return client.progressReporting.downloadTask(for: request, self) }
        return client.session.downloadTask(with: request) { location, response, error in
            self.complete(request, location: location, response: response, error: error)
        }
    }

    /// Where the task's loader is looked for while `resume()` runs: the queue its session reports on.
    private var watchingQueue: FoundationBodyFile.WatchingQueue? {
        let session = reportsProgress ? client.progressReporting.session : client.session
        return session.delegateQueue as? FoundationBodyFile.WatchingQueue
    }

    override func willResume(_ task: URLSessionTask) {
        watchingQueue?.watch(task, for: self)
    }

    override func resumed(_ task: URLSessionTask) {
        takeLoader(of: task)
        watchingQueue?.stopWatching(task)
    }

    /// Takes the object that loads `task`, once, unless the task's end has been handled already.
    func takeLoader(of task: URLSessionTask) {
        guard case .notYet = loader.withLock({ $0 }), let found = FoundationBodyFile.loader(of: task) else { return }
        loader.withLock { look in
            if case .notYet = look { look = .found(found) }
        }
    }

    /// The transfer has written `received` bytes of `expected` (-1 when unknown).
    func wrote(_ received: Int64, of expected: Int64) {
        counts.withLock { $0 = (received, expected) }
    }

    /// Ends the operation once its task has ended: `location` (removed before the operation ends, if it was
    /// not moved into place) holds the whole body, unless there is an error.
    ///
    /// The destination is replaced only by a download that succeeds. A cancellation (or the timeout)
    /// that came before the body was whole keeps the file in place; one that lands while the new file
    /// is moved into place is answered after: the operation ends cancelled, and the previous file (kept
    /// under a hidden name as a hard link until the outcome is known) is put back, or the new one
    /// removed when there was none.
    func complete(_ request: URLRequest, location: URL?, response: URLResponse?, error: (any Error)?) {
        // A body that is not moved into place (an error status, a cancellation, a failed move) is
        // removed here: Apple's Foundation removes it once this returns, Linux's never does. Without
        // a location, Linux's may still have made one, which it names nowhere but in its loader: it
        // is removed before the operation can end.
        // Taken as the task resumed, or, for a task that ended before `resume()` returned, as its end
        // was handed to the session's queue (Foundation lets go of the loader right after that).
        let loader = loader.withLock { look in
            guard case .found(let loader) = look else {
                look = .ended(knewLoader: false)
                return nil as AnyObject?
            }
            look = .ended(knewLoader: true)
            return loader
        }
        if location == nil, let loader, let made = FoundationBodyFile.file(of: loader) {
            unlink(made.path)
            removedBodyFile.withLock { $0 = made }
        }
        // The status is checked before the file is placed: a 404's body never reaches the destination.
        let verdict = verdict(for: request, response: response, error: error) {
            guard let location, let handle = try? FileHandle(forReadingFrom: location) else { return Data() }
            defer { try? handle.close() }
            return (try? handle.read(upToCount: NetworkError.bodyPrefixLimit)) ?? Data()
        }
        // Ends the operation off the session's queue (see `HTTPOperation.complete`), once Foundation's
        // file is gone: moved into place, or removed here (an observer of the end never sees it).
        func settle(_ result: Result<DownloadedFile, any Error>) {
            if let location { unlink(location.path) }
            DispatchQueue.global().async {
                switch result {
                case .success(let file): self.finish(with: file)
                case .failure(let failure): self.end(with: failure)
                }
            }
        }
        switch verdict {
        case .failure(let failure):
            settle(.failure(failure))
        case .success(let http):
            guard let location else {
                return settle(
                    .failure(
                        NetworkError.transport(
                            operation: reference, url: request.url ?? destination, code: .badServerResponse,
                            reason: "the download ended without a file")))
            }
            guard !cancellationRequested else { return settle(.failure(CancellationRequested())) }
            let size = (try? FileManager.default.attributesOfItem(atPath: location.path)[.size] as? NSNumber)?.int64Value ?? 0
            let previous = PreviousFile(keeping: destination)
            if let problem = place(location) {
                previous.discard()
                return settle(.failure(problem))
            }
            wrote(size, of: size)
            onFinish { outcome in
                if case .succeeded = outcome { previous.discard() } else { previous.restore() }
            }
            settle(.success(DownloadedFile(url: destination, response: http, byteCount: size)))
        }
    }

    private func checkDestination() throws(NetworkError) {
        let files = FileManager.default
        let folder = destination.deletingLastPathComponent()
        var isDirectory: ObjCBool = false
        guard destination.isFileURL else {
            throw .destinationNotWritable(operation: reference, destination: destination, reason: "it is not a file URL")
        }
        guard files.fileExists(atPath: folder.path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw .destinationNotWritable(operation: reference, destination: destination, reason: "its folder does not exist")
        }
        guard files.isWritableFile(atPath: folder.path) else {
            throw .destinationNotWritable(operation: reference, destination: destination, reason: "its folder is not writable")
        }
        if files.fileExists(atPath: destination.path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw .destinationNotWritable(operation: reference, destination: destination, reason: "it is a folder")
        }
    }

    /// Moves a complete body into place; the error that says why it could not, if it could not.
    ///
    /// The body is first moved beside the destination (a copy when the temporary folder is on another
    /// file system), then renamed over it: a reader of the destination sees the old file or the new
    /// one, never a part.
    func place(_ location: URL) -> NetworkError? {
        let files = FileManager.default
        // A name of its own, short whatever the destination's (which may be as long as a name can be).
        let staging = destination.deletingLastPathComponent().appendingPathComponent(".baton-download-\(UUID().uuidString)")
        do {
            try files.moveItem(at: location, to: staging)
        } catch {
            try? files.removeItem(at: location)
            return .destinationNotWritable(operation: reference, destination: destination, reason: "\(error)")
        }
        guard rename(staging.path, destination.path) == 0 else {
            let reason = String(cString: strerror(errno))
            try? files.removeItem(at: staging)
            return .destinationNotWritable(operation: reference, destination: destination, reason: reason)
        }
        return nil
    }
}

/// What a download knows of its task's loader.
private enum LoaderLook: @unchecked Sendable {
    /// Not looked at yet (or the task had none when looked at).
    case notYet
    /// The loader, to read its file's name from once the task has ended.
    case found(AnyObject)
    /// The task's end has been handled (knowing the loader, or not): a look that comes later keeps
    /// nothing.
    case ended(knewLoader: Bool)
}

/// The delegate of a client's second session, for downloads that report their progress: it hands
/// each task's chunks and end to the operation that made it. An operation is registered before its
/// task resumes and let go when the task has delivered its file or failed.
final class ProgressRouter: NSObject, URLSessionDownloadDelegate, Sendable {
    private let downloads = Mutex([Int: (operation: DownloadOperation, request: URLRequest)]())

    func register(_ operation: DownloadOperation, _ request: URLRequest, for task: URLSessionTask) {
        downloads.withLock { $0[task.taskIdentifier] = (operation, request) }
    }

    func urlSession(
        _ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64,
        totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64
    ) {
        let entry = downloads.withLock { $0[downloadTask.taskIdentifier] }
        entry?.operation.wrote(totalBytesWritten, of: totalBytesExpectedToWrite)
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        // The file is complete: the operation ends here, and the task's end that follows finds nothing.
        guard let entry = downloads.withLock({ $0.removeValue(forKey: downloadTask.taskIdentifier) }) else { return }
        entry.operation.complete(entry.request, location: location, response: downloadTask.response, error: nil)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        guard let entry = downloads.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
        entry.operation.complete(entry.request, location: nil, response: task.response, error: error)
    }
}

/// A session with a ``ProgressRouter`` as its delegate, made the first time a client needs it.
final class ProgressSession: Sendable {
    let router = ProgressRouter()
    let session: URLSession

    init(configuration: URLSessionConfiguration) {
        session = URLSession(configuration: configuration, delegate: router, delegateQueue: FoundationBodyFile.sessionQueue())
    }

    func downloadTask(for request: URLRequest, _ operation: DownloadOperation) -> URLSessionTask {
        let task = session.downloadTask(with: request)
        router.register(operation, request, for: task)
        return task
    }
}

/// The file a download is about to replace, kept (as a hard link under a hidden name beside it) until
/// the download's outcome is known.
struct PreviousFile: Sendable {
    let destination: URL
    /// The hard link to the previous file; `nil` when there was none, or it could not be linked.
    let kept: URL?
    /// Whether a file was at the destination.
    let existed: Bool

    init(keeping destination: URL) {
        self.destination = destination
        let hidden = destination.deletingLastPathComponent().appendingPathComponent(".baton-previous-\(UUID().uuidString)")
        // One call decides both facts: linked, it existed and is kept; ENOENT, there was none.
        let linked = link(destination.path, hidden.path) == 0
        kept = linked ? hidden : nil
        existed = linked || errno != ENOENT
    }

    /// The download succeeded: the previous file goes.
    func discard() {
        if let kept { unlink(kept.path) }
    }

    /// The download did not succeed after all: the previous file comes back (or the new one goes when
    /// there was none). A previous file that could not be kept cannot come back.
    func restore() {
        if let kept {
            rename(kept.path, destination.path)
        } else if !existed {
            unlink(destination.path)
        }
    }
}
