import Baton
import BatonNetwork
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

struct Named: Decodable, Sendable, Equatable {
    let name: String
    let tags: [String]
}

final class DataOperationTests: NetworkTestCase, @unchecked Sendable {
    func testADataOperationProducesTheBodyAndTheResponse() throws {
        let fetch = client.data(server.request("/json?name=soup"))
        let response = try fetch.run(timeout: testTimeout)
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.response.value(forHTTPHeaderField: "Content-Type"), "application/json")
        XCTAssertEqual(try JSONDecoder().decode(Named.self, from: response.body), Named(name: "soup", tags: ["a", "b"]))
    }

    func testADecodeStepChainedAfterADataOperationDecodesTheBody() throws {
        let chain = try OperationQueue().addChain([client.data(server.request("/json?name=stew")), DecodeOperation<Named>()])
        let value = try chain.wait(timeout: testTimeout)
        XCTAssertEqual(value as? Named, Named(name: "stew", tags: ["a", "b"]))
    }

    func testADecodeStepGivenTheWrongJSONSaysWhereItFailed() throws {
        struct Tagged: Decodable, Sendable { let tags: [Int] }
        let chain = try OperationQueue().addChain([client.data(server.request("/json")), DecodeOperation<Tagged>()])
        XCTAssertThrowsError(try chain.wait(timeout: testTimeout)) { error in
            guard case NetworkError.decodingFailed(_, let type, let path, _)? = error as? NetworkError else {
                return XCTFail("\(error)")
            }
            XCTAssertEqual(type, "Tagged")
            XCTAssertEqual(path, "tags[0]")
        }
    }

    func testA404AndA500FailWithTheirStatusAndTheirBody() throws {
        for status in [404, 500] {
            let fetch = client.data(server.request("/status/\(status)?body=no+such+recipe"))
            let outcome = try fetch.runForOutcome(timeout: testTimeout)
            guard case .failed(NetworkError.unacceptableStatus(let culprit, let code, let response, let body)) = outcome else {
                return XCTFail("\(outcome)")
            }
            XCTAssertEqual(code, status)
            XCTAssertEqual(response.statusCode, status)
            XCTAssertEqual(String(decoding: body, as: UTF8.self), "no such recipe")
            XCTAssertEqual(culprit.operation, fetch)
        }
    }

    func testAcceptedStatusesCanBeWidened() throws {
        let fetch = client.data(server.request("/status/404?body=gone"))
        fetch.acceptableStatusCodes = 200..<500
        XCTAssertEqual(try fetch.run(timeout: testTimeout).text, "gone")
    }

    func testTheRequestCanComeFromTheOperationBeforeInAChainAndItsHostIsClaimed() throws {
        let request = server.request("/json?name=chained")
        let make = ResultBlockOperation<URLRequest> { $0.finish(with: request) }
        let fetch = client.data()
        XCTAssertTrue(fetch.categories.isEmpty)
        let chain = try OperationQueue().addChain([make, fetch, DecodeOperation<Named>()])
        XCTAssertEqual(try chain.wait(timeout: testTimeout) as? Named, Named(name: "chained", tags: ["a", "b"]))
        XCTAssertEqual(fetch.categories, [client.hostCategory(for: request.url)!])
    }

    func testAnUploadSendsItsBodyFromMemoryAndFromAFile() throws {
        var request = server.request("/echo")
        request.httpMethod = "PUT"
        let fromMemory = try client.upload(request, from: .data(Data("hello".utf8))).run(timeout: testTimeout)
        XCTAssertEqual(try JSONDecoder().decode(Echo.self, from: fromMemory.body), Echo(method: "PUT", length: 5, body: "hello"))

        let file = FileManager.default.temporaryDirectory.appendingPathComponent("baton-upload-\(UUID().uuidString)")
        try Data(repeating: 65, count: 100_000).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let fromFile = try client.upload(server.request("/echo"), from: .file(file)).run(timeout: testTimeout)
        let echoed = try JSONDecoder().decode(Echo.self, from: fromFile.body)
        XCTAssertEqual(echoed.method, "POST")
        XCTAssertEqual(echoed.length, 100_000)
    }

    struct Echo: Decodable, Equatable {
        let method: String
        let length: Int
        let body: String
    }
}
