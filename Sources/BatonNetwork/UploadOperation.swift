import Baton
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What an upload sends.
public enum UploadBody: Sendable {
    /// Bytes in memory.
    case data(Data)
    /// A file, streamed from disk.
    case file(URL)
}

/// Sends a body (from memory or a file) and produces the response's body and the response.
///
/// ```swift
/// var request = URLRequest(url: url)
/// request.httpMethod = "PUT"
/// let upload = HTTPClient.shared.upload(request, from: .data(Data("hello".utf8)))
/// ```
///
/// A request whose method is GET (`URLRequest`'s default, which cannot carry a body) is sent as a
/// POST. A HEAD request, or a file that cannot be read or is not a regular file (a folder, a FIFO, a
/// device), fails the operation at start with ``NetworkError/invalidRequest(operation:reason:)``.
public final class UploadOperation: HTTPOperation<HTTPResponse>, @unchecked Sendable {
    /// What the operation sends.
    public let body: UploadBody

    init(_ request: URLRequest?, body: UploadBody, client: HTTPClient) {
        self.body = body
        var request = request
        // URLRequest's method defaults to GET, which cannot carry a body: an upload means POST unless
        // the caller chose another method.
        if let given = request, given.httpMethod == nil || given.httpMethod?.uppercased() == "GET" {
            request?.httpMethod = "POST"
        }
        super.init(request, client: client)
    }

    override var sendsBody: Bool { true }

    override func makeTask(for request: URLRequest) throws -> URLSessionTask {
        let complete: @Sendable (Data?, URLResponse?, (any Error)?) -> Void = { data, response, error in
            self.complete(request, data: data, response: response, error: error) { HTTPResponse(body: $0, response: $1) }
        }
        switch body {
        case .data(let data):
            return client.session.uploadTask(with: request, from: data, completionHandler: complete)
        case .file(let file):
            guard FileManager.default.isReadableFile(atPath: file.path) else {
                throw NetworkError.invalidRequest(operation: reference, reason: "cannot read the file \(file.path)")
            }
            // Foundation sends a file's size from its attributes: a folder never ends, a FIFO or a
            // device sends nothing. Only a regular file has a body to send.
            let type = try? FileManager.default.attributesOfItem(atPath: file.path)[.type] as? FileAttributeType
            guard type == .typeRegular else {
                throw NetworkError.invalidRequest(operation: reference, reason: "\(file.path) is not a regular file")
            }
            return client.session.uploadTask(with: request, fromFile: file, completionHandler: complete)
        }
    }
}
