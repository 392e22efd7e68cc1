import Baton
import BatonNetwork
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Bad input fails at start with an error that names the operation and the problem; nothing is sent.
final class BadInputTests: NetworkTestCase, @unchecked Sendable {
    private func reason(of operation: HTTPOperation<some Sendable>) throws -> String {
        let outcome = try operation.runForOutcome(timeout: testTimeout)
        guard case .failed(NetworkError.invalidRequest(let culprit, let reason)) = outcome else {
            XCTFail("\(outcome)")
            return ""
        }
        XCTAssertEqual(culprit.operation, operation)
        XCTAssertNil(operation.task, "a task was made for an invalid request")
        return reason
    }

    func testAURLThatIsNotHTTPIsRefusedBeforeAnyTask() throws {
        XCTAssertEqual(
            try reason(of: client.data(URLRequest(url: URL(string: "ftp://127.0.0.1/x")!))),
            "'ftp://127.0.0.1/x' is not an http or https URL")
        XCTAssertEqual(
            try reason(of: client.data(URLRequest(url: URL(fileURLWithPath: "/etc/hosts")))),
            "'file:///etc/hosts' is not an http or https URL")
    }

    func testAMalformedURLIsRefused() throws {
        XCTAssertEqual(try reason(of: client.data("http://exa mple.com/")), "'http://exa mple.com/' is not a URL")
        XCTAssertEqual(
            try reason(of: client.data(URLRequest(url: URL(string: "http:///recipes")!))), "'http:///recipes' has no host")
    }

    func testABodyOnAGetIsRefused() throws {
        var request = server.request("/echo")
        request.httpBody = Data("x".utf8)
        XCTAssertEqual(try reason(of: client.data(request)), "a GET request cannot carry a body")
        request.httpBody = nil
        request.httpMethod = "HEAD"
        XCTAssertEqual(try reason(of: client.upload(request, from: .data(Data("x".utf8)))), "a HEAD request cannot carry a body")
    }

    func testAnUploadFromAFileThatCannotBeReadIsRefused() throws {
        let missing = URL(fileURLWithPath: "/no/such/file-\(UUID().uuidString)")
        XCTAssertEqual(
            try reason(of: client.upload(server.request("/echo"), from: .file(missing))), "cannot read the file \(missing.path)")
    }

    func testADownloadToAFolderThatDoesNotExistFailsAtStartAndLeavesNoFile() throws {
        let destination = URL(fileURLWithPath: "/no/such/folder-\(UUID().uuidString)/file")
        let download = client.download(server.request("/bytes?n=10"), to: destination)
        let outcome = try download.runForOutcome(timeout: testTimeout)
        guard case .failed(NetworkError.destinationNotWritable(let culprit, let url, let reason)) = outcome else {
            return XCTFail("\(outcome)")
        }
        XCTAssertEqual(culprit.operation, download)
        XCTAssertEqual(url, destination)
        XCTAssertEqual(reason, "its folder does not exist")
        XCTAssertNil(download.task)
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))
    }

    func testAPerHostLimitBelowOneIsRefused() {
        XCTAssertThrowsError(try client.setLimit(0, forHost: server.url("/"))) { error in
            guard case BatonError.invalidLimit(let category, 0)? = error as? BatonError else { return XCTFail("\(error)") }
            XCTAssertTrue(category.contains("127.0.0.1:\(server.port)"), category)
        }
    }

    func testAClientWithALimitBelowOneFailsEachOperationAtStartAndSendsNothing() throws {
        let key = key()
        let client = HTTPClient(maximumRequestsPerHost: 0)
        let fetch = client.data(server.request("/status/200?key=\(key)"))
        let outcome = try fetch.runForOutcome(timeout: testTimeout)
        guard case .failed(NetworkError.invalidConfiguration(let reason)) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(reason, "maximumRequestsPerHost must be at least 1, got 0")
        XCTAssertEqual(client.configurationError?.description, "HTTPClient: maximumRequestsPerHost must be at least 1, got 0")
        XCTAssertNil(fetch.task)
        XCTAssertEqual(try server.stats(key).requests, 0)
    }

    func testTheErrorsDescriptionsNameTheOperation() throws {
        let fetch = client.data(server.request("/status/503?body=busy"))
        fetch.name = "fetch recipe 7"
        let outcome = try fetch.runForOutcome(timeout: testTimeout)
        guard case .failed(let error) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual("\(error)", "fetch recipe 7: status 503 from \(server.url("/status/503?body=busy").absoluteString): busy")
    }
}
