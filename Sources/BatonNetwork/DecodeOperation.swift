import Baton
import Foundation

/// Decodes JSON: the step after a data operation in a chain (or given a response as its input).
///
/// ```swift
/// struct Recipe: Decodable, Sendable { let name: String }
/// let chain = try OperationQueue().addChain([client.data(request), DecodeOperation<Recipe>()])
/// ```
///
/// A body that is not the expected JSON fails with
/// ``NetworkError/decodingFailed(operation:type:path:reason:)``, which says where (`ingredients[2].name`).
public final class DecodeOperation<Value: Decodable & Sendable>: TransformOperation<HTTPResponse, Value>, @unchecked Sendable {
    private let makeDecoder: @Sendable () -> JSONDecoder

    /// A decode step.
    ///
    /// - Parameter decoder: Makes the decoder (a new one each time, as `JSONDecoder` is configured by
    ///   mutation). Default: a plain `JSONDecoder`.
    public init(decoder: @escaping @Sendable () -> JSONDecoder = { JSONDecoder() }) {
        makeDecoder = decoder
        super.init()
    }

    /// Decodes the input's body.
    public override func execute() {
        guard let response = input else {
            return finish(throwing: upstreamError ?? BatonError.missingInput(operation: OperationReference(self)))
        }
        do {
            finish(with: try makeDecoder().decode(Value.self, from: response.body))
        } catch let error as DecodingError {
            let (path, reason) = describe(error)
            finish(
                throwing: NetworkError.decodingFailed(
                    operation: OperationReference(self), type: String(describing: Value.self), path: path, reason: reason))
        } catch {
            finish(throwing: error)
        }
    }
}

/// Where a decoding error happened (`recipes[3].name`), and what it says.
func describe(_ error: DecodingError) -> (path: String, reason: String) {
    let context: DecodingError.Context
    var reason: String
    switch error {
    case .typeMismatch(let type, let found):
        context = found
        reason = "expected \(type)"
    case .valueNotFound(let type, let found):
        context = found
        reason = "no value for \(type)"
    case .keyNotFound(let key, let found):
        context = DecodingError.Context(codingPath: found.codingPath + [key], debugDescription: found.debugDescription)
        reason = "missing key '\(key.stringValue)'"
    case .dataCorrupted(let found):
        context = found
        reason = "not valid JSON"
    @unknown default:
        return ("(top level)", "\(error)")
    }
    if !context.debugDescription.isEmpty { reason += ": \(context.debugDescription)" }
    var path = ""
    for key in context.codingPath {
        // JSONDecoder names an array's elements "Index N"; a dictionary's key "42" also has an
        // `intValue`, but it is a key.
        if let index = key.intValue, key.stringValue == "Index \(index)" {
            path += "[\(index)]"
        } else {
            path += path.isEmpty ? key.stringValue : ".\(key.stringValue)"
        }
    }
    return (path.isEmpty ? "(top level)" : path, reason)
}
