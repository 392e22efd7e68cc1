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
/// cancelled download leaves no partial file behind.
///
/// ```swift
/// let download = HTTPClient.shared.download(URLRequest(url: url), to: destination)
/// ```
///
/// A destination whose folder does not exist or cannot be written fails the operation at start with
/// ``NetworkError/destinationNotWritable(operation:destination:reason:)``, before anything is sent.
/// ``progress`` follows the bytes written.
public final class DownloadOperation: HTTPOperation<DownloadedFile>, ProgressReporting, @unchecked Sendable {
    /// Where the body goes.
    public let destination: URL
    private let counts = Mutex((written: Int64(0), expected: Int64(-1)))

    init(_ request: URLRequest?, to destination: URL, client: HTTPClient) {
        self.destination = destination
        super.init(request, client: client)
    }

    /// Bytes written against the bytes expected (indeterminate until the response says its length).
    /// Each read returns a new `Progress`.
    public var progress: Progress {
        let (written, expected) = counts.withLock { ($0.written, $0.expected) }
        let progress = Progress(totalUnitCount: expected)
        progress.completedUnitCount = written
        return progress
    }

    /// The bytes written so far.
    public var bytesWritten: Int64 { counts.withLock { $0.written } }

    override func makeTask(for request: URLRequest) throws -> URLSessionTask {
        try checkDestination()
        return client.session.downloadTask(with: request)
    }

    override func sink(for request: URLRequest) -> any TransferSink {
        FileSink(operation: self, request: request)
    }

    func wrote(total: Int64, expected: Int64) {
        counts.withLock { $0 = (total, expected) }
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
        let staging = destination.deletingLastPathComponent()
            .appendingPathComponent(".\(destination.lastPathComponent).baton-\(UUID().uuidString)")
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

/// Follows a download task: progress, the finished file, the end.
final class FileSink: TransferSink, @unchecked Sendable {
    private let operation: DownloadOperation
    private let request: URLRequest
    /// The file placed at the destination, or why not; set when the temporary file was complete.
    private let placed = Mutex<Result<DownloadedFile, any Error>?>(nil)

    init(operation: DownloadOperation, request: URLRequest) {
        self.operation = operation
        self.request = request
    }

    func received(_ data: Data) {}

    func wrote(total: Int64, expected: Int64) { operation.wrote(total: total, expected: expected) }

    func downloaded(to location: URL, response: URLResponse?) {
        // The status is checked before the file is placed: a 404's body never reaches the destination.
        let verdict = operation.verdict(for: request, response: response, error: nil) {
            (try? FileHandle(forReadingFrom: location)).map { handle in
                defer { try? handle.close() }
                return (try? handle.read(upToCount: NetworkError.bodyPrefixLimit)) ?? Data()
            } ?? Data()
        }
        let outcome: Result<DownloadedFile, any Error>
        switch verdict {
        case .failure(let error):
            outcome = .failure(error)
        case .success(let http):
            let size = (try? FileManager.default.attributesOfItem(atPath: location.path)[.size] as? NSNumber)?.int64Value
            if let problem = operation.place(location) {
                outcome = .failure(problem)
            } else {
                outcome = .success(DownloadedFile(url: operation.destination, response: http, byteCount: size ?? 0))
            }
        }
        placed.withLock { $0 = outcome }
    }

    func completed(response: URLResponse?, error: (any Error)?) {
        let placed = placed.withLock { $0 }
        if let error {
            // The body may have been placed before the task reported an error; it is not a whole download then.
            if case .success? = placed { try? FileManager.default.removeItem(at: operation.destination) }
            if case .failure(let failure) = operation.verdict(for: request, response: response, error: error, body: { Data() }) {
                return operation.end(with: failure)
            }
        }
        switch placed {
        case .success(let file)?:
            operation.finish(with: file)
        case .failure(let failure)?:
            operation.end(with: failure)
        case nil:
            // No file and no error: the server sent nothing Foundation could finish.
            operation.end(
                with: NetworkError.transport(
                    operation: OperationReference(operation), url: request.url ?? operation.destination,
                    code: .badServerResponse, reason: "the download ended without a file"))
        }
    }
}
