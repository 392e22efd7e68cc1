import Baton
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a transfer hears from its session task. Called on the session's delegate queue, one call at a
/// time per task.
protocol TransferSink: AnyObject, Sendable {
    /// Body bytes arrived (data and upload tasks).
    func received(_ data: Data)
    /// A download task wrote bytes to its temporary file.
    func wrote(total: Int64, expected: Int64)
    /// A download task's file is complete at `location`, which is removed when this returns.
    func downloaded(to location: URL, response: URLResponse?)
    /// The task ended: `error` is `nil` when it succeeded.
    func completed(response: URLResponse?, error: (any Error)?)
}

/// The session's delegate: hands each task's events to the transfer that made the task. A transfer is
/// registered before its task resumes and removed when the task completes.
final class SessionRouter: NSObject, URLSessionDataDelegate, URLSessionDownloadDelegate, Sendable {
    private let sinks = Mutex([Int: any TransferSink]())

    func register(_ sink: any TransferSink, for task: URLSessionTask) {
        sinks.withLock { $0[task.taskIdentifier] = sink }
    }

    func remove(_ task: URLSessionTask) {
        _ = sinks.withLock { $0.removeValue(forKey: task.taskIdentifier) }
    }

    private func sink(of task: URLSessionTask) -> (any TransferSink)? {
        sinks.withLock { $0[task.taskIdentifier] }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        sink(of: dataTask)?.received(data)
    }

    func urlSession(
        _ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64,
        totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64
    ) {
        sink(of: downloadTask)?.wrote(total: totalBytesWritten, expected: totalBytesExpectedToWrite)
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        sink(of: downloadTask)?.downloaded(to: location, response: downloadTask.response)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let sink = sinks.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        sink?.completed(response: task.response, error: error)
    }
}
