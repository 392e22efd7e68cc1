import Baton
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Makes BatonNetwork's operations and runs their transfers: one `URLSession`, the limits per host,
/// and the defaults the operations start with.
///
/// ```swift
/// let client = HTTPClient(maximumRequestsPerHost: 4)
/// let fetch = client.data(URLRequest(url: URL(string: "http://127.0.0.1:8000/cookbook/1")!))
/// ```
///
/// Every operation a client makes claims its host (``hostCategory(for:)``): at most
/// ``maximumRequestsPerHost`` of them execute at once per host, and the others wait without holding a
/// queue worker (when they run in a Baton composite, such as a group, retry or tree). The claim is
/// an ordinary Baton category in the client's ``hosts`` scope, so it shows in a `FlightRecorder`'s
/// trace as time spent waiting.
public final class HTTPClient: Sendable {
    /// The client most code needs: a default session, six requests per host.
    public static let shared = HTTPClient()

    /// How many requests to one host execute at once, unless ``setLimit(_:forHost:)`` said otherwise.
    public let maximumRequestsPerHost: Int
    /// The status codes an operation accepts unless it is told otherwise: 200–299 by default.
    public let acceptableStatusCodes: Range<Int>
    /// The retry policy of ``fetch(_:policy:)`` and ``retrying(_:policy:attempt:)`` when they are
    /// given none.
    public let retryPolicy: HTTPRetryPolicy
    /// The scope of the hosts' categories: one per `scheme://host:port`.
    public let hosts: ExclusivityScope
    /// Why the client's operations fail at start (``NetworkError/invalidConfiguration(reason:)``):
    /// it was made with a limit below 1 or a request timeout that is not a number; `nil` otherwise.
    public let configurationError: NetworkError?

    /// The longest idle timeout sent to Foundation, about 31 years: a request's (or the
    /// configuration's) `timeoutInterval` above it, infinity included, means "no limit" and is sent as
    /// this. Linux's Foundation traps on larger values.
    public static let longestIdleTimeout: TimeInterval = 1e9

    let session: URLSession
    /// The configuration, for the second session that progress-reporting downloads use.
    private let configuration: URLSessionConfiguration
    private let progressSession = Mutex<ProgressSession?>(nil)
    private let limitedHosts = Mutex(Set<String>())
    /// Called just before a host gets the client's default limit: a test's gate.
    package let beforeDefaultLimit = Mutex<(@Sendable () -> Void)?>(nil)

    /// A client with its own session.
    ///
    /// - Parameters:
    ///   - configuration: The session's configuration (copied). Default: `.default`. On Linux its
    ///     `urlCache` is not used: Linux's Foundation can trap when a task with a cache is cancelled.
    ///   - maximumRequestsPerHost: Requests to one host executing at once, at least 1. Default: 6, as
    ///     browsers do. With a value below 1, every operation of the client fails at start with
    ///     ``NetworkError/invalidConfiguration(reason:)`` (nothing is sent), as ``configurationError`` says.
    ///   - acceptableStatusCodes: The statuses that count as success. Default: 200–299.
    ///   - retryPolicy: The default retry policy. Default: ``HTTPRetryPolicy/init()``.
    public init(
        configuration: URLSessionConfiguration = .default,
        maximumRequestsPerHost: Int = 6,
        acceptableStatusCodes: Range<Int> = 200..<300,
        retryPolicy: HTTPRetryPolicy = HTTPRetryPolicy()
    ) {
        self.maximumRequestsPerHost = max(1, maximumRequestsPerHost)
        let requestTimeout = configuration.timeoutIntervalForRequest
        if maximumRequestsPerHost < 1 {
            configurationError = .invalidConfiguration(
                reason: "maximumRequestsPerHost must be at least 1, got \(maximumRequestsPerHost)")
        } else if requestTimeout.isNaN {
            configurationError = .invalidConfiguration(reason: "the configuration's timeoutIntervalForRequest is not a number")
        } else {
            configurationError = nil
        }
        self.acceptableStatusCodes = acceptableStatusCodes
        self.retryPolicy = retryPolicy
        hosts = ExclusivityScope("hosts")
        let configuration = configuration.copy() as? URLSessionConfiguration ?? .default
        // Linux's Foundation traps on an idle timeout it cannot turn into a whole number (infinite, or
        // as huge as 10³⁰⁰ s): beyond `longestIdleTimeout` means no limit, which this is.
        if configuration.timeoutIntervalForRequest > HTTPClient.longestIdleTimeout {
            configuration.timeoutIntervalForRequest = HTTPClient.longestIdleTimeout
        }
        #if canImport(FoundationNetworking)
        // Linux's Foundation makes a task's protocol asynchronously when the session has a URL cache,
        // and a `cancel()` that lands meanwhile can report the task's end after the session has let
        // go of it: a `fatalError` in its task registry (reproduced: 3 runs of 3,000 cancels racing
        // completions all trapped; without a cache, 3 runs of 10,000 did not). Cancelling is what
        // these operations do, so their sessions have no cache there.
        configuration.urlCache = nil
        #endif
        // No delegate: every task reports through its completion handler. A delegate's per-chunk
        // callbacks each cross the session's delegate queue, which costs a large download a quarter of
        // its throughput on Linux (measured), and progress is read from the task when asked.
        // The session's delegate queue stays serial: Linux's Foundation relies on it to end a task
        // once (with a concurrent one, a cancel racing a completion removed the task twice and
        // trapped). The operations finish off that queue instead (see `HTTPOperation.complete`).
        session = URLSession(configuration: configuration, delegate: nil, delegateQueue: FoundationBodyFile.sessionQueue())
        self.configuration = configuration
    }

    /// The session of downloads that report their progress, made when the first one starts.
    var progressReporting: ProgressSession {
        progressSession.withLock { existing in
            if let existing { return existing }
            let made = ProgressSession(configuration: configuration)
            existing = made
            return made
        }
    }

    deinit {
        // Transfers still running hold the client, so there are none left here. The last reference may
        // go on the session's own queue (its task registry lets go of a completion handler, which held
        // the last operation, which held the client), where invalidating it synchronously would wait
        // for that very queue: Linux's Foundation traps on it. So the session is let go from elsewhere.
        let sessions = [session] + [progressSession.withLock { $0?.session }].compactMap { $0 }
        DispatchQueue.global().async {
            // A session with a delegate holds it until it is invalidated.
            for session in sessions { session.finishTasksAndInvalidate() }
        }
    }

    /// Lets `limit` requests to one host execute at once, for this host only.
    ///
    /// - Parameters:
    ///   - limit: At least 1.
    ///   - url: Any URL of the host (its scheme, host and port are what counts).
    /// - Throws: `BatonError.invalidLimit` when `limit` is below 1 or the URL has no host.
    public func setLimit(_ limit: Int, forHost url: URL) throws(BatonError) {
        let name = Self.hostKey(of: url) ?? ""
        // Under the client's lock, as the first-use default below is: neither can undo the other.
        let problem = limitedHosts.withLock { limited -> BatonError? in
            do throws(BatonError) {
                try hosts.setLimit(limit, for: name)
            } catch {
                return error
            }
            limited.insert(name)
            return nil
        }
        if let problem { throw problem }
    }

    /// The category an operation of this client claims for `url`'s host, or `nil` for a URL without
    /// an http(s) scheme and a host (such an operation fails when it starts).
    ///
    /// - Parameter url: The request's URL.
    /// - Returns: The category `scheme://host:port` in ``hosts``.
    public func hostCategory(for url: URL?) -> OperationCategory? {
        guard let url, let name = Self.hostKey(of: url) else { return nil }
        // The first time a host is seen it gets the client's limit (a name is never empty here), under
        // the lock that `setLimit(_:forHost:)` takes, so that a limit set for the host is never undone.
        let hook = beforeDefaultLimit.withLock { $0 }
        limitedHosts.withLock { limited in
            guard limited.insert(name).inserted else { return }
            hook?()
            try? hosts.setLimit(maximumRequestsPerHost, for: name)
        }
        return OperationCategory(name, in: hosts)
    }

    /// `scheme://host:port`, with the scheme's default port when the URL names none.
    static func hostKey(of url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = url.host?.lowercased(), !host.isEmpty
        else { return nil }
        return "\(scheme)://\(host):\(url.port ?? (scheme == "https" ? 443 : 80))"
    }

    // MARK: - Making operations

    /// An operation that sends `request` and produces the body and the response.
    ///
    /// - Parameter request: The request.
    /// - Returns: A pending operation; add it to a queue, a chain or a composite.
    public func data(_ request: URLRequest) -> DataOperation {
        DataOperation(request, client: self)
    }

    /// An operation that GETs `url`. A string that is not a URL makes an operation that fails at start
    /// with ``NetworkError/invalidRequest(operation:reason:)``.
    ///
    /// - Parameter url: The URL, as text.
    /// - Returns: A pending operation.
    public func data(_ url: String) -> DataOperation {
        guard let parsed = URL(string: url) else { return DataOperation(malformed: url, client: self) }
        return DataOperation(URLRequest(url: parsed), client: self)
    }

    /// An operation that takes its request from the operation before it in a chain.
    ///
    /// - Returns: A pending operation without an input.
    public func data() -> DataOperation {
        DataOperation(nil, client: self)
    }

    /// An operation that sends `request` and decodes its JSON body as `type`.
    ///
    /// - Parameters:
    ///   - type: The type to decode.
    ///   - request: The request.
    ///   - decoder: Makes the decoder. Default: a plain `JSONDecoder`.
    /// - Returns: A pending operation.
    public func json<Value: Decodable & Sendable>(
        _ type: Value.Type, _ request: URLRequest, decoder: @escaping @Sendable () -> JSONDecoder = { JSONDecoder() }
    ) -> JSONOperation<Value> {
        JSONOperation(request, decoder: decoder, client: self)
    }

    /// An operation that streams `request`'s body to `destination` (memory bounded whatever the size),
    /// replacing any file there once the whole body has arrived.
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - destination: The file to write.
    ///   - reportsProgress: Whether `progress` follows the transfer on every platform (see
    ///     ``DownloadOperation``: on Linux it costs throughput). Default: `false`.
    /// - Returns: A pending operation.
    public func download(_ request: URLRequest, to destination: URL, reportsProgress: Bool = false) -> DownloadOperation {
        DownloadOperation(request, to: destination, reportsProgress: reportsProgress, client: self)
    }

    /// An operation that sends `body` with `request` (a POST unless the request says otherwise).
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - body: What to send.
    /// - Returns: A pending operation.
    public func upload(_ request: URLRequest, from body: UploadBody) -> UploadOperation {
        UploadOperation(request, body: body, client: self)
    }

    /// A retry of `request` through data operations, by `policy` (the client's by default).
    ///
    /// - Parameters:
    ///   - request: The request each attempt sends.
    ///   - policy: When to try again. Default: ``retryPolicy``.
    /// - Returns: A pending `RetryOperation` whose output is the successful attempt's.
    public func fetch(_ request: URLRequest, policy: HTTPRetryPolicy? = nil) -> RetryOperation<HTTPResponse> {
        retrying(request, policy: policy) { self.data($0) }
    }

    /// A retry of `request` through JSON operations that decode the body as `type`, by `policy` (the
    /// client's by default). A body that does not decode stops the retry at once.
    ///
    /// - Parameters:
    ///   - type: The type to decode.
    ///   - request: The request each attempt sends.
    ///   - policy: When to try again. Default: ``retryPolicy``.
    ///   - decoder: Makes the decoder. Default: a plain `JSONDecoder`.
    /// - Returns: A pending `RetryOperation` whose output is the decoded value.
    public func fetch<Value: Decodable & Sendable>(
        _ type: Value.Type, _ request: URLRequest, policy: HTTPRetryPolicy? = nil,
        decoder: @escaping @Sendable () -> JSONDecoder = { JSONDecoder() }
    ) -> RetryOperation<Value> {
        retrying(request, policy: policy) { self.json(type, $0, decoder: decoder) }
    }

    /// A retry whose attempts are operations made by `attempt` for `request` (a download, an upload, or
    /// a subclass), by `policy`. Each attempt is a new operation; `request`'s method decides whether a
    /// failure that may have reached the server is retried (see ``HTTPRetryPolicy``).
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - policy: When to try again. Default: ``retryPolicy``.
    ///   - attempt: Makes one attempt's operation.
    /// - Returns: A pending `RetryOperation`.
    public func retrying<Output: Sendable>(
        _ request: URLRequest,
        policy: HTTPRetryPolicy? = nil,
        attempt: @escaping @Sendable (URLRequest) -> ResultOperation<Output>
    ) -> RetryOperation<Output> {
        let policy = policy ?? retryPolicy
        let given = request.httpMethod ?? "GET"
        return RetryOperation(
            maximumAttempts: policy.maximumAttempts,
            decide: { error, number in
                // The method the attempt sent, which may not be the one given (an upload sends a GET
                // as a POST): the error names the attempt, which the retry still holds.
                let culprit = (error as? NetworkError)?.culprit ?? (error as? BatonError)?.culprit
                let sent = (culprit?.operation as? any RequestSending)?.sentMethod
                return policy.decision(after: error, attempt: number, method: sent ?? given).action
            }
        ) { _ in attempt(request) }
    }
}
