import Baton
import BatonNetwork
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A test case with one real server for the whole class, and a fresh client for every test.
class NetworkTestCase: XCTestCase, @unchecked Sendable {
    nonisolated(unsafe) static var started: Result<TestServer, any Error>?
    var server: TestServer!
    var client: HTTPClient!

    override class func setUp() {
        super.setUp()
        started = Result { try TestServer() }
    }

    override class func tearDown() {
        (try? started?.get())?.stop()
        started = nil
        super.tearDown()
    }

    /// Fails every test of the class with the reason when the server could not start (no python3,
    /// say), rather than crash the test process.
    override func setUpWithError() throws {
        try super.setUpWithError()
        server = try XCTUnwrap(Self.started).get()
        client = HTTPClient()
    }

    /// A key no other test uses, so the server's counts are this test's own.
    func key(_ function: String = #function) -> String {
        "\(type(of: self))-\(function)-\(UUID().uuidString)".filter { $0.isLetter || $0.isNumber || $0 == "-" }
    }
}
