import Baton
import BatonNetwork
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

final class DownloadAndLimitTests: NetworkTestCase, @unchecked Sendable {
    private func temporaryFile(_ name: String) -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("baton-\(name)-\(UUID().uuidString)")
    }

    func testADownloadWritesTheWholeBodyToItsDestinationAndReportsProgress() throws {
        let destination = temporaryFile("download")
        defer { try? FileManager.default.removeItem(at: destination) }
        try Data("an older file".utf8).write(to: destination)
        let size = 5 * 1024 * 1024 + 17
        let download = client.download(server.request("/bytes?n=\(size)"), to: destination)
        let file = try download.run(timeout: testTimeout)
        XCTAssertEqual(file.url, destination)
        XCTAssertEqual(file.byteCount, Int64(size))
        XCTAssertEqual(file.response.statusCode, 200)
        let data = try Data(contentsOf: destination)
        XCTAssertEqual(data.count, size)
        XCTAssertEqual(Array(data.prefix(4)), [0, 1, 2, 3])
        XCTAssertEqual(data[size - 1], UInt8((size - 1) % 256))
        XCTAssertEqual(download.progress.completedUnitCount, Int64(size))
        XCTAssertEqual(download.progress.totalUnitCount, Int64(size))
    }

    func testADownloadOfAFailedResponseLeavesNoFileAndKeepsTheBodysStart() throws {
        let destination = temporaryFile("missing")
        let download = client.download(server.request("/status/404?body=no+such+image"), to: destination)
        let outcome = try download.runForOutcome(timeout: testTimeout)
        guard case .failed(NetworkError.unacceptableStatus(_, 404, _, let body)) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(String(decoding: body, as: UTF8.self), "no such image")
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))
    }

    func testADownloadCutShortLeavesNoFile() throws {
        let destination = temporaryFile("dropped")
        let outcome = try client.download(server.request("/drop?bytes=1000000&after=50000"), to: destination)
            .runForOutcome(timeout: testTimeout)
        guard case .failed(NetworkError.transport) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))
    }

    func testAThousandConcurrentRequestsUnderALimitOfFourNeverPutMoreThanFourOnTheServer() throws {
        let client = HTTPClient(maximumRequestsPerHost: 4)
        try server.reset()
        let fetches = (0..<1000).map { _ in client.data(server.request("/concurrent?ms=2")) }
        let group = GroupOperation(operations: fetches)
        try group.run(timeout: .seconds(120))
        XCTAssertTrue(fetches.allSatisfy { $0.output?.text == "ok" })
        let stats = try server.stats()
        XCTAssertLessThanOrEqual(stats.maxConcurrent, 4)
        // The limit is reached, not merely respected by running one at a time.
        XCTAssertGreaterThan(stats.maxConcurrent, 1)
        XCTAssertEqual(client.hosts.limit(of: "http://127.0.0.1:\(server.port)"), 4)
    }

    func testAHostsLimitCanBeSetOnItsOwn() throws {
        let client = HTTPClient(maximumRequestsPerHost: 8)
        try client.setLimit(2, forHost: server.url("/anything"))
        try server.reset()
        let fetches = (0..<40).map { _ in client.data(server.request("/concurrent?ms=20")) }
        try GroupOperation(operations: fetches).run(timeout: testTimeout)
        XCTAssertLessThanOrEqual(try server.stats().maxConcurrent, 2)
        XCTAssertEqual(fetches[0].categories.map(\.name), ["http://127.0.0.1:\(server.port)"])
    }
}
