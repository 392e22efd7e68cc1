import Baton
import BatonNetwork
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A test case with one real server for the whole class, and a fresh client for every test.
class NetworkTestCase: XCTestCase, @unchecked Sendable {
    nonisolated(unsafe) static var server: TestServer!
    var server: TestServer { Self.server }
    var client: HTTPClient!

    override class func setUp() {
        super.setUp()
        server = try! TestServer()
    }

    override class func tearDown() {
        server.stop()
        super.tearDown()
    }

    override func setUp() {
        super.setUp()
        client = HTTPClient()
    }

    /// A key no other test uses, so the server's counts are this test's own.
    func key(_ function: String = #function) -> String {
        "\(type(of: self))-\(function)-\(UUID().uuidString)".filter { $0.isLetter || $0.isNumber || $0 == "-" }
    }
}
