import Baton
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The errors BatonNetwork's operations fail with. Each case names the operation at fault and says
/// what went wrong in terms of the request; `description` is one line a log can print.
///
/// Two timeouts are told apart: the operation's own ``Baton/AsyncOperation/timeout`` bounds the whole
/// transfer and fails it with `BatonError.timedOut`; the request's `timeoutInterval` bounds the time
/// without any data and fails it with ``idleTimeout(operation:url:after:)``.
public enum NetworkError: Error, Sendable, CustomStringConvertible {
    /// The request cannot be sent as it is (no URL, a URL that is not http or https, a malformed URL,
    /// a body on a method that cannot carry one, an upload file that cannot be read); nothing was sent.
    case invalidRequest(operation: OperationReference, reason: String)
    /// The server answered with a status outside the operation's accepted range. `bodyPrefix` holds the
    /// first bytes of the body (at most ``bodyPrefixLimit``), which usually say why.
    case unacceptableStatus(operation: OperationReference, status: Int, response: HTTPURLResponse, bodyPrefix: Data)
    /// No data arrived for the request's `timeoutInterval`.
    case idleTimeout(operation: OperationReference, url: URL, after: Duration)
    /// The transfer failed below HTTP: the connection was refused, reset or dropped mid-body, the host
    /// could not be found. `code` is Foundation's `URLError` code.
    case transport(operation: OperationReference, url: URL, code: URLError.Code, reason: String)
    /// A download's destination cannot be written; no file was left there.
    case destinationNotWritable(operation: OperationReference, destination: URL, reason: String)
    /// The body is not the JSON the decode step expected; `path` says where it failed
    /// (`recipes[3].name`, or `(top level)`).
    case decodingFailed(operation: OperationReference, type: String, path: String, reason: String)
    /// The ``HTTPClient`` was made with a setting it cannot use (a limit below 1, a request timeout
    /// that is not a number); each of its operations fails at start with this error.
    case invalidConfiguration(reason: String)

    /// The most of a failed response's body that ``unacceptableStatus(operation:status:response:bodyPrefix:)``
    /// keeps: 512 bytes.
    public static let bodyPrefixLimit = 512

    /// The operation the error names; `nil` for a client's ``invalidConfiguration(reason:)``.
    public var culprit: OperationReference? {
        switch self {
        case .invalidRequest(let operation, _), .unacceptableStatus(let operation, _, _, _),
            .idleTimeout(let operation, _, _), .transport(let operation, _, _, _),
            .destinationNotWritable(let operation, _, _), .decodingFailed(let operation, _, _, _):
            return operation
        case .invalidConfiguration:
            return nil
        }
    }

    /// One line that names the operation and says what went wrong.
    public var description: String {
        switch self {
        case .invalidRequest(let operation, let reason):
            return "\(operation): invalid request: \(reason)"
        case .unacceptableStatus(let operation, let status, let response, let body):
            let text = String(decoding: body.prefix(120), as: UTF8.self)
                .replacingOccurrences(of: "\n", with: " ")
            let url = response.url?.absoluteString ?? "?"
            return "\(operation): status \(status) from \(url)" + (text.isEmpty ? "" : ": \(text)")
        case .idleTimeout(let operation, let url, let after):
            return "\(operation): no data from \(url.absoluteString) for \(after) (the request's timeoutInterval)"
        case .transport(let operation, let url, let code, let reason):
            return "\(operation): \(url.absoluteString): \(reason) (URLError \(code.rawValue))"
        case .destinationNotWritable(let operation, let destination, let reason):
            return "\(operation): cannot write \(destination.path): \(reason)"
        case .decodingFailed(let operation, let type, let path, let reason):
            return "\(operation): the body is not a \(type) at \(path): \(reason)"
        case .invalidConfiguration(let reason):
            return "HTTPClient: \(reason)"
        }
    }

    /// The HTTP status, for ``unacceptableStatus(operation:status:response:bodyPrefix:)``.
    public var status: Int? {
        if case .unacceptableStatus(_, let status, _, _) = self { return status }
        return nil
    }
}
