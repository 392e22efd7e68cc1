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
        let download = client.download(server.request("/bytes?n=\(size)"), to: destination, reportsProgress: true)
        XCTAssertEqual(download.progress.completedUnitCount, 0)
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

    func testProgressReportedWhileTheBodyArrives() throws {
        let key = key()
        let destination = temporaryFile("progress")
        defer { try? FileManager.default.removeItem(at: destination) }
        let download = client.download(
            server.request("/slow-body?bytes=20000&chunk=1000&interval_ms=20&key=\(key)"), to: destination,
            reportsProgress: true)
        OperationQueue().addOperation(download)
        // Part of the body, not yet all of it: progress moves while the transfer runs.
        XCTAssertTrue(eventually { (1..<20_000).contains(download.bytesReceived) || download.isFinished })
        XCTAssertFalse(download.isFinished, "the slow body ended before any progress was seen")
        XCTAssertEqual(download.progress.totalUnitCount, 20_000)
        XCTAssertEqual(try finished(download).isSucceeded, true)
        XCTAssertEqual(download.progress.completedUnitCount, 20_000)
    }

    func testADownloadThatDoesNotReportProgressIsCompleteWhenItEnds() throws {
        let destination = temporaryFile("quiet")
        defer { try? FileManager.default.removeItem(at: destination) }
        let download = client.download(server.request("/bytes?n=3000"), to: destination)
        _ = try download.run(timeout: testTimeout)
        XCTAssertEqual(download.progress.completedUnitCount, 3000)
        XCTAssertEqual(download.progress.totalUnitCount, 3000)
    }

    func testADownloadOfAFailedResponseLeavesNoFileAndKeepsTheBodysStart() throws {
        let destination = temporaryFile("missing")
        // A body no other test sends, to find Foundation's temporary copy of it.
        let marker = "no-such-image-\(UUID().uuidString)"
        let download = client.download(server.request("/status/404?body=\(marker)"), to: destination)
        let outcome = try download.runForOutcome(timeout: testTimeout)
        guard case .failed(NetworkError.unacceptableStatus(_, 404, _, let body)) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(String(decoding: body, as: UTF8.self), marker)
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))
        // The body Foundation wrote to a temporary file is gone too (Linux's Foundation leaves it).
        let folder = FileManager.default.temporaryDirectory
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { name in
            guard name.hasSuffix(".tmp"),
                let data = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path)
            else { return false }
            return data == Data(marker.utf8)
        }
        XCTAssertEqual(leftovers, [])
    }

    func testADownloadCutShortLeavesNoFile() throws {
        let destination = temporaryFile("dropped")
        let outcome = try client.download(server.request("/drop?bytes=1000000&after=50000"), to: destination)
            .runForOutcome(timeout: testTimeout)
        guard case .failed(NetworkError.transport) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))
    }

    func testAThousandConcurrentRequestsUnderALimitOfFourNeverPutMoreThanFourOnTheServer() throws {
        // The server counts requests in flight and connections open at once (beyond those open before).
        let client = HTTPClient(maximumRequestsPerHost: 4)
        try server.reset()
        let fetches = (0..<1000).map { _ in client.data(server.request("/concurrent?ms=2")) }
        let group = GroupOperation(operations: fetches)
        try group.run(timeout: .seconds(120))
        XCTAssertTrue(fetches.allSatisfy { $0.output?.text == "ok" })
        let stats = try server.stats()
        XCTAssertLessThanOrEqual(stats.maxConcurrent, 4)
        // The limit's four, and the connection this very read of the stats may have opened.
        XCTAssertLessThanOrEqual(stats.maxConnections, 4 + 1)
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

final class ClientLifetimeTests: NetworkTestCase, @unchecked Sendable {
    /// The last reference to a client can go with its last operation, on the session's own queue: the
    /// client must let its session go without waiting for that queue (Linux's Foundation traps on it).
    func testAClientReleasedWithItsLastOperationIsFreedWithoutTrapping() throws {
        let queue = OperationQueue()
        for trial in 0..<20 {
            weak var weakClient: HTTPClient?
            do {
                // Nothing here outlives the scope: the server answers after it has ended, so the last
                // reference to the operations (and through them the client) is the session's.
                let client = HTTPClient()
                weakClient = client
                let destination = FileManager.default.temporaryDirectory.appendingPathComponent("baton-lifetime-\(trial)")
                queue.addOperations(
                    [
                        client.data(server.request("/delay-headers?ms=50")),
                        client.download(server.request("/delay-headers?ms=50"), to: destination),
                        client.download(
                            server.request("/delay-headers?ms=50"), to: destination.appendingPathExtension("progress"),
                            reportsProgress: true),
                    ], waitUntilFinished: false)
            }
            XCTAssertTrue(eventually { weakClient == nil }, "trial \(trial): the client was not freed")
            let destination = FileManager.default.temporaryDirectory.appendingPathComponent("baton-lifetime-\(trial)")
            try? FileManager.default.removeItem(at: destination)
            try? FileManager.default.removeItem(at: destination.appendingPathExtension("progress"))
        }
    }
}
