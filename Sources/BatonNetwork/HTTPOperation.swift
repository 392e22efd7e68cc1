import Baton
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a data or upload operation produces: the body and the response.
public struct HTTPResponse: Sendable {
    /// The body, whole.
    public let body: Data
    /// The response: status, headers, final URL.
    public let response: HTTPURLResponse

    /// The status code.
    public var statusCode: Int { response.statusCode }

    /// The body as UTF-8 text (invalid bytes replaced).
    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// The base of BatonNetwork's operations: a `TransformOperation` from a `URLRequest` (given when it
/// is made, or passed on by the operation before it in a chain) to `Output`.
///
/// - It claims its request's host in its client's ``HTTPClient/hosts`` scope, so at most the host's
///   limit of them execute at once.
/// - Before anything is sent it checks the request: an http or https URL with a host, and no body on
///   a GET or HEAD. Otherwise it fails with ``NetworkError/invalidRequest(operation:reason:)``.
/// - Cancelling it cancels its `URLSessionTask` at once, which closes the connection; cancelled before
///   it executes, it never makes a task.
/// - Its ``Baton/AsyncOperation/timeout`` bounds the whole transfer (`BatonError.timedOut`); the
///   request's `timeoutInterval` bounds the time without data (``NetworkError/idleTimeout(operation:url:after:)``).
/// - A status outside ``acceptableStatusCodes`` fails it with
///   ``NetworkError/unacceptableStatus(operation:status:response:bodyPrefix:)``.
public class HTTPOperation<Output: Sendable>: TransformOperation<URLRequest, Output>, @unchecked Sendable {
    /// The client that runs the transfer.
    public let client: HTTPClient
    private let transfer = Mutex(Transfer())
    /// Why the operation cannot run, known when it was made (a string that is not a URL).
    private let malformed: String?

    private struct Transfer {
        var task: URLSessionTask?
        var cancelled = false
        /// The host category claimed for the request the operation holds now.
        var claimedHost: OperationCategory?
        var accepted: Range<Int>?
    }

    init(_ request: URLRequest?, malformed: String? = nil, client: HTTPClient) {
        self.client = client
        self.malformed = malformed
        if let request { super.init(input: request) } else { super.init() }
        // The observer runs inside `storeInput` on this operation, so it never outlives it: unowned,
        // not weak (a weak reference would give every operation a side table).
        observeStoredInputs { [unowned self] input in
            if let request = input as? URLRequest { self.claimHost(of: request) }
        }
        if let request { claimHost(of: request) }
    }

    /// The statuses that count as success; the client's (200–299 by default) unless set. Set it before
    /// the operation starts.
    public final var acceptableStatusCodes: Range<Int> {
        get { transfer.withLock { $0.accepted } ?? client.acceptableStatusCodes }
        set { transfer.withLock { $0.accepted = newValue } }
    }

    /// The task running the transfer, once the operation has made it.
    public final var task: URLSessionTask? { transfer.withLock { $0.task } }

    /// Claims `request`'s host instead of the host of the request the operation held before (a chain
    /// may replace the request while the operation is pending). Under the operation's transfer lock,
    /// so that two requests stored at once leave the claim of the one stored last.
    private func claimHost(of request: URLRequest) {
        let category = client.hostCategory(for: request.url)
        transfer.withLock { transfer in
            guard transfer.claimedHost != category else { return }
            // Refused once the operation has started: Baton ignores a request stored then, too.
            guard (try? replaceClaim(transfer.claimedHost, with: category)) != nil else { return }
            transfer.claimedHost = category
        }
    }

    /// Checks the request, makes the task and resumes it.
    public final override func execute() {
        guard let request = input else {
            // Run regardless of a failed upstream: its error says more than "no request".
            return finish(
                throwing: upstreamError ?? NetworkError.invalidRequest(operation: reference, reason: "it has no request"))
        }
        if let problem = client.configurationError { return finish(throwing: problem) }
        let task: URLSessionTask
        do {
            try check(request)
            var request = request
            // No limit (infinity included) is sent as the longest Foundation takes.
            if request.timeoutInterval > HTTPClient.longestIdleTimeout {
                request.timeoutInterval = HTTPClient.longestIdleTimeout
            }
            try checkClaim(for: request)
            task = try makeTask(for: request)
        } catch {
            return finish(throwing: error)
        }
        // `didCancel()` never runs while `execute()` does (Baton delivers it after), so a cancel finds
        // the task stored here, and one that came before start never executes the operation.
        // Watched before anyone else can reach the task (and cancel it).
        willResume(task)
        transfer.withLock { $0.task = task }
        task.resume()
        resumed(task)
    }

    /// The task is about to be resumed. Subclasses override (a download watches for a task that ends
    /// before `resume()` returns).
    func willResume(_ task: URLSessionTask) {}

    /// The task has just been resumed. Subclasses override (a download takes what it needs to clean
    /// up after Foundation).
    func resumed(_ task: URLSessionTask) {}

    /// The operation holds the claim of the host it sends to. A request stored from another thread as
    /// the operation started may be in the input while its claim was refused (the gate had begun):
    /// sending it would go around that host's limit.
    private func checkClaim(for request: URLRequest) throws(NetworkError) {
        let claimed = transfer.withLock { $0.claimedHost?.name }
        guard let url = request.url, claimed == HTTPClient.hostKey(of: url) else {
            throw .invalidRequest(
                operation: reference,
                reason: "its request was replaced as it started, after its host's limit was claimed for another")
        }
    }

    /// Cancels the task, which ends the transfer at once.
    public final override func didCancel() {
        let task = transfer.withLock { transfer -> URLSessionTask? in
            transfer.cancelled = true
            return transfer.task
        }
        task?.cancel()
    }

    var reference: OperationReference { OperationReference(self) }

    /// The request is one Foundation can send as asked.
    func check(_ request: URLRequest) throws(NetworkError) {
        if let malformed {
            throw .invalidRequest(operation: reference, reason: "'\(malformed)' is not a URL")
        }
        guard let url = request.url else { throw .invalidRequest(operation: reference, reason: "the request has no URL") }
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw .invalidRequest(operation: reference, reason: "'\(url.absoluteString)' is not an http or https URL")
        }
        guard let host = url.host, !host.isEmpty else {
            throw .invalidRequest(operation: reference, reason: "'\(url.absoluteString)' has no host")
        }
        guard !request.timeoutInterval.isNaN else {
            throw .invalidRequest(operation: reference, reason: "its timeoutInterval is not a number")
        }
        let method = (request.httpMethod ?? "GET").uppercased()
        if ["GET", "HEAD"].contains(method), request.httpBody != nil || request.httpBodyStream != nil || sendsBody {
            throw .invalidRequest(operation: reference, reason: "a \(method) request cannot carry a body")
        }
    }

    /// Whether the subclass sends a body of its own (an upload).
    var sendsBody: Bool { false }

    /// Makes the task (not resumed), whose completion handler ends the operation. Subclasses override.
    func makeTask(for request: URLRequest) throws -> URLSessionTask {
        preconditionFailure("HTTPOperation subclasses make their task")
    }

    /// A data task that ends the operation with what `deliver` makes of the body.
    func dataTask(
        for request: URLRequest, deliver: @escaping @Sendable (Data, HTTPURLResponse) throws -> Output
    ) -> URLSessionTask {
        client.session.dataTask(with: request) { data, response, error in
            self.complete(request, data: data, response: response, error: error, deliver: deliver)
        }
    }

    /// Ends the operation once its task has ended with a whole body, or an error. Called on the
    /// session's serial delegate queue, it ends the operation from another queue: the operation's
    /// `onFinish` observers (which run where it finishes) may block, or wait for another request of
    /// the same client, without holding up every transfer's end.
    func complete(
        _ request: URLRequest, data: Data?, response: URLResponse?, error: (any Error)?,
        deliver: @escaping @Sendable (Data, HTTPURLResponse) throws -> Output
    ) {
        let body = data ?? Data()
        DispatchQueue.global().async {
            switch self.verdict(for: request, response: response, error: error, body: { body }) {
            case .success(let http): self.finish(with: Result { try deliver(body, http) })
            case .failure(let failure): self.end(with: failure)
            }
        }
    }

    /// Whether `cancel()` (or the operation's timeout) asked for the end of the transfer: read under
    /// the lock `didCancel()` sets it under, so a result kept when it is `false` was decided first.
    var cancellationRequested: Bool { transfer.withLock { $0.cancelled } }

    /// What the task's end means: the HTTP response when it succeeded with an accepted status, or the
    /// error that says what happened.
    func verdict(
        for request: URLRequest, response: URLResponse?, error: (any Error)?, body: () -> Data
    ) -> Result<HTTPURLResponse, any Error> {
        let url = request.url ?? URL(fileURLWithPath: "/")
        if let error {
            let code = (error as? URLError)?.code ?? .unknown
            if code == .cancelled && cancellationRequested { return .failure(CancellationRequested()) }
            if code == .timedOut {
                // A session's resource timeout ends a task the same way; a limit that is not finite
                // (or absurd) is reported as the most a `Duration` of seconds holds.
                let seconds = request.timeoutInterval
                let idle: Duration =
                    seconds.isFinite && seconds < 1e12 ? .milliseconds(Int64(max(0, seconds) * 1000)) : .seconds(Int64(1e12))
                return .failure(NetworkError.idleTimeout(operation: reference, url: url, after: idle))
            }
            return .failure(
                NetworkError.transport(operation: reference, url: url, code: code, reason: Self.reason(for: code, error)))
        }
        guard let http = response as? HTTPURLResponse else {
            return .failure(
                NetworkError.transport(
                    operation: reference, url: url, code: .badServerResponse, reason: "the response is not HTTP"))
        }
        guard acceptableStatusCodes.contains(http.statusCode) else {
            return .failure(
                NetworkError.unacceptableStatus(
                    operation: reference, status: http.statusCode, response: http,
                    bodyPrefix: Data(body().prefix(NetworkError.bodyPrefixLimit))))
        }
        return .success(http)
    }

    /// Ends the operation with `error`: a cancellation the operation asked for ends it cancelled (or
    /// timed out, which Baton decides).
    func end(with error: any Error) {
        if error is CancellationRequested { finish() } else { finish(throwing: error) }
    }

    private static func reason(for code: URLError.Code, _ error: any Error) -> String {
        switch code {
        case .cannotConnectToHost: return "the connection was refused"
        case .networkConnectionLost: return "the connection was lost"
        case .badServerResponse: return "the server closed the connection or answered badly"
        case .cannotFindHost, .dnsLookupFailed: return "the host could not be found"
        case .notConnectedToInternet: return "not connected"
        case .cancelled: return "the transfer was cancelled from outside the operation"
        default:
            // On Linux a body cut short is `unknown` (-1), "transfer closed with N bytes remaining".
            let text = (error as NSError).localizedDescription
            return text.isEmpty ? "the transfer failed" : text
        }
    }
}

/// The transfer ended because the operation was cancelled.
struct CancellationRequested: Error {}

/// An operation that sends a request: what a retry asks to know whether the method is idempotent.
protocol RequestSending: AnyObject {
    /// The method of the request the operation sends (`GET` unless set).
    var sentMethod: String? { get }
}

extension HTTPOperation: RequestSending {
    var sentMethod: String? { input.map { $0.httpMethod ?? "GET" } }
}

/// Sends a request and produces the whole body and the response.
///
/// ```swift
/// let fetch = HTTPClient.shared.data(URLRequest(url: url))
/// OperationQueue().addOperation(fetch)
/// ```
///
/// Make one with ``HTTPClient/data(_:)-(URLRequest)``, or ``HTTPClient/data()`` to take the request from
/// the operation before it in a chain. The body is held in memory: for large bodies use a
/// ``DownloadOperation``.
public final class DataOperation: HTTPOperation<HTTPResponse>, @unchecked Sendable {
    /// An operation that fails at start because `malformed` is not a URL. Its input is a placeholder,
    /// so that it starts (and reports the text it was given) rather than wait for a request.
    convenience init(malformed: String, client: HTTPClient) {
        self.init(URLRequest(url: URL(fileURLWithPath: "/")), malformed: malformed, client: client)
    }

    override func makeTask(for request: URLRequest) throws -> URLSessionTask {
        dataTask(for: request) { HTTPResponse(body: $0, response: $1) }
    }
}

/// Sends a request and decodes its JSON body: a ``DataOperation`` and a ``DecodeOperation`` in one,
/// for a composite (a tree node, a retry) that needs one operation per request.
///
/// ```swift
/// struct Recipe: Decodable, Sendable { let name: String }
/// let recipe = HTTPClient.shared.json(Recipe.self, URLRequest(url: url))
/// ```
///
/// A body that is not the expected JSON fails it with
/// ``NetworkError/decodingFailed(operation:type:path:reason:)``; ``response`` keeps the response.
public final class JSONOperation<Value: Decodable & Sendable>: HTTPOperation<Value>, @unchecked Sendable {
    private let makeDecoder: @Sendable () -> JSONDecoder
    private let received = Mutex<HTTPURLResponse?>(nil)

    init(_ request: URLRequest?, decoder: @escaping @Sendable () -> JSONDecoder, client: HTTPClient) {
        makeDecoder = decoder
        super.init(request, client: client)
    }

    /// The response, once it has arrived.
    public var response: HTTPURLResponse? { received.withLock { $0 } }

    override func makeTask(for request: URLRequest) throws -> URLSessionTask {
        dataTask(for: request) { [makeDecoder, received] body, response in
            received.withLock { $0 = response }
            do {
                return try makeDecoder().decode(Value.self, from: body)
            } catch let error as DecodingError {
                let (path, reason) = describe(error)
                throw NetworkError.decodingFailed(
                    operation: OperationReference(self), type: String(describing: Value.self), path: path, reason: reason)
            }
        }
    }
}
