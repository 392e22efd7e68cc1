import Baton
import Foundation
import XCTest

@testable import BatonNetwork

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Linux's FoundationNetworking writes every download's body to `<UUID>.tmp` in the temporary folder
/// and removes it on no path: a download that ended without its body (cancelled, timed out, cut short,
/// refused) left the file behind, an empty one even when nothing arrived. A run of the test suite left
/// about 70 of them. The download removes it now; each test checks that Foundation made one (so the
/// check could fail) and that it is gone.
final class FoundationBodyFileTests: NetworkTestCase, @unchecked Sendable {
    private func destination() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("baton-body-file-\(UUID().uuidString)")
    }

    /// `whenTheTaskEnds`: the operation ended first (its timeout), and the task ends after it.
    private func assertFoundationsFileIsGone(
        _ download: DownloadOperation, whenTheTaskEnds: Bool = false, file: StaticString = #filePath, line: UInt = #line
    ) {
        if whenTheTaskEnds { _ = eventually { download.removedBodyFile.withLock { $0 } != nil } }
        guard let made = download.removedBodyFile.withLock({ $0 }) else {
            return XCTFail("no file of Foundation's was found for the download", file: file, line: line)
        }
        XCTAssertTrue(made.lastPathComponent.hasSuffix(".tmp"), "\(made)", file: file, line: line)
        XCTAssertFalse(FileManager.default.fileExists(atPath: made.path), "\(made) is still there", file: file, line: line)
    }

    func testACancelledDownloadLeavesNoFileOfFoundations() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation removes its own file")
        #else
        let key = key()
        let download = client.download(
            server.request("/slow-body?bytes=100000&chunk=1000&interval_ms=50&key=\(key)"), to: destination())
        OperationQueue().addOperation(download)
        XCTAssertEqual(try server.awaitStats(key, requests: 1).requests, 1)
        download.cancel()
        XCTAssertEqual(try finished(download).isCancelled, true)
        assertFoundationsFileIsGone(download)
        #endif
    }

    func testADownloadCutShortOrTimedOutLeavesNoFileOfFoundations() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation removes its own file")
        #else
        let cut = client.download(server.request("/drop?bytes=1000000&after=50000"), to: destination())
        guard case .failed(NetworkError.transport) = try cut.runForOutcome(timeout: testTimeout) else {
            return XCTFail("\(String(describing: cut.outcome))")
        }
        assertFoundationsFileIsGone(cut)
        var request = server.request("/slow-body?bytes=10000&chunk=100&interval_ms=50&key=\(key())")
        request.timeoutInterval = 10
        let timed = client.download(request, to: destination())
        timed.timeout = .milliseconds(300)
        guard case .failed(BatonError.timedOut) = try timed.runForOutcome(timeout: testTimeout) else {
            return XCTFail("\(String(describing: timed.outcome))")
        }
        assertFoundationsFileIsGone(timed, whenTheTaskEnds: true)
        #endif
    }

    func testARefusedDownloadLeavesNoFileOfFoundations() throws {
        #if !canImport(Glibc)
        throw XCTSkip("Apple's Foundation removes its own file")
        #else
        // A port nobody listens on: one the system gave a socket that is then closed.
        let port = try closedPort()
        let refused = client.download(URLRequest(url: URL(string: "http://127.0.0.1:\(port)/x")!), to: destination())
        guard case .failed = try refused.runForOutcome(timeout: testTimeout) else {
            return XCTFail("\(String(describing: refused.outcome))")
        }
        assertFoundationsFileIsGone(refused)
        #endif
    }

    /// Downloads refused at once, many together: a task whose connection is refused ends within
    /// microseconds, often before `resume()` has returned. Each download must still find and remove
    /// Foundation's file (before the session's queue watched resuming tasks, 1 to 9 of 300 kept it).
    func testDownloadsRefusedAtOnceAllLeaveNoFileOfFoundations() throws {
        #if !canImport(Glibc)
        throw XCTSkip("Apple's Foundation removes its own file")
        #else
        let port = try closedPort()
        let queue = OperationQueue()
        let downloads = (0..<300).map { _ in
            client.download(URLRequest(url: URL(string: "http://127.0.0.1:\(port)/x")!), to: destination())
        }
        queue.addOperations(downloads, waitUntilFinished: false)
        for download in downloads { _ = try finished(download) }
        let kept = downloads.filter { $0.removedBodyFile.withLock { $0 } == nil }.count
        XCTAssertEqual(kept, 0, "\(kept) of \(downloads.count) refused downloads found no file of Foundation's to remove")
        XCTAssertEqual(downloads.filter { $0.endKnewLoader != true }.count, 0)
        for download in downloads where download.removedBodyFile.withLock({ $0 }) != nil { assertFoundationsFileIsGone(download) }
        #endif
    }

    /// The caller cancels each download's task the moment it appears (the task is public): the task
    /// ends as it resumes, and Foundation's file must still go.
    func testDownloadsWhoseTaskIsCancelledAsItAppearsLeaveNoFileOfFoundations() throws {
        #if !canImport(Glibc)
        throw XCTSkip("Apple's Foundation removes its own file")
        #else
        let key = key()
        let downloads = (0..<300).map { _ in
            client.download(server.request("/slow-body?bytes=100000&chunk=1000&interval_ms=50&key=\(key)"), to: destination())
        }
        let queue = OperationQueue()
        for download in downloads {
            queue.addOperation(download)
            let deadline = ContinuousClock.now + testTimeout
            while download.task == nil && !download.isFinished && ContinuousClock.now < deadline {}
            download.task?.cancel()
        }
        for download in downloads { _ = try finished(download) }
        // A task cancelled before it started loading made no file: what must never happen is an end
        // that did not know the loader, and so could not tell.
        let blind = downloads.filter { $0.endKnewLoader != true }.count
        XCTAssertEqual(blind, 0, "\(blind) of \(downloads.count) downloads cancelled as they resumed ended without their loader")
        for download in downloads where download.removedBodyFile.withLock({ $0 }) != nil { assertFoundationsFileIsGone(download) }
        #endif
    }

    /// The end and a late look race (the queue's look, or `resumed`, landing after the end ran): once
    /// the end has been handled, a look keeps nothing, even when the task still has its loader.
    func testALookAfterTheEndKeepsNothing() throws {
        #if !canImport(Glibc)
        throw XCTSkip("Apple's Foundation removes its own file")
        #else
        let download = client.download(server.request("/bytes?n=10"), to: destination())
        let failure = URLError(.cancelled)
        download.complete(URLRequest(url: URL(string: "http://127.0.0.1:1/x")!), location: nil, response: nil, error: failure)
        XCTAssertEqual(download.endKnewLoader, false)
        // A task of a slow body, resumed: it has its loader while the body comes.
        let slow = server.request("/slow-body?bytes=10000&chunk=100&interval_ms=50&key=\(key())")
        let task = client.session.downloadTask(with: slow)
        task.resume()
        defer { task.cancel() }
        download.takeLoader(of: task)
        XCTAssertEqual(download.endKnewLoader, false, "a look after the end kept the loader")
        #endif
    }

    /// Many threads watch tasks, add blocks to the session's queue and stop watching, all at once:
    /// every block runs once, and nothing stays watched.
    func testTheSessionQueueUnderWatchesAndAddsFromManyThreads() throws {
        #if !canImport(FoundationNetworking)
        throw XCTSkip("only Linux's sessions watch")
        #else
        let queue = try XCTUnwrap(client.session.delegateQueue as? FoundationBodyFile.WatchingQueue)
        let ran = Mutex(0)
        let trials = 2_000
        DispatchQueue.concurrentPerform(iterations: trials) { _ in
            let download = client.download(server.request("/bytes?n=1"), to: destination())
            let task = client.session.downloadTask(with: server.request("/bytes?n=1"))
            queue.watch(task, for: download)
            queue.addOperation { ran.withLock { $0 += 1 } }
            download.takeLoader(of: task)
            queue.stopWatching(task)
        }
        XCTAssertTrue(eventually { ran.withLock { $0 } == trials }, "\(ran.withLock { $0 }) of \(trials) blocks ran")
        XCTAssertEqual(queue.watchedCount, 0)
        XCTAssertEqual(queue.maxConcurrentOperationCount, 1)
        #endif
    }

    func testASuccessfulDownloadKeepsItsBodyAndRemovesNothing() throws {
        let target = destination()
        let download = client.download(server.request("/bytes?n=3000"), to: target)
        let file = try download.run(timeout: testTimeout)
        XCTAssertEqual(try Data(contentsOf: file.url).count, 3000)
        XCTAssertNil(download.removedBodyFile.withLock { $0 })
        try? FileManager.default.removeItem(at: target)
    }

    /// A protocol class of the user's that keeps a file of its own under the name Foundation's uses:
    /// a download it fails must leave that file alone (an independent review's test: the first
    /// version of the removal looked for the name in any class, and removed the user's file).
    func testAProtocolOfTheUsersKeepsItsOwnFile() throws {
        let fixture = FileManager.default.temporaryDirectory.appendingPathComponent("baton-user-fixture-\(UUID().uuidString)")
        XCTAssertTrue(FileManager.default.createFile(atPath: fixture.path, contents: Data("precious".utf8)))
        defer { try? FileManager.default.removeItem(at: fixture) }
        UsersProtocol.fixture.withLock { $0 = fixture }
        let configuration = URLSessionConfiguration.ephemeral
        configuration.protocolClasses = [UsersProtocol.self]
        let client = HTTPClient(configuration: configuration)
        let download = client.download(URLRequest(url: URL(string: "http://users-protocol.invalid/x")!), to: destination())
        guard case .failed = try download.runForOutcome(timeout: testTimeout) else {
            return XCTFail("\(String(describing: download.outcome))")
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: fixture.path), "the user's file was removed")
        XCTAssertNil(download.removedBodyFile.withLock { $0 })
    }

    #if canImport(Glibc)
    /// A loopback port that was free a moment ago: bound, read back and closed.
    private func closedPort() throws -> UInt16 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw XCTSkip("no socket") }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(socket, raw, length) == 0 && getsockname(socket, raw, &length) == 0
            }
        }
        guard bound else { throw XCTSkip("no port") }
        return UInt16(bigEndian: address.sin_port)
    }
    #endif
}

/// A protocol of the user's whose lazy `tempFileURL` names a file of the user's; every load fails.
private final class UsersProtocol: URLProtocol {
    static let fixture = Mutex<URL?>(nil)
    lazy var tempFileURL: URL = UsersProtocol.fixture.withLock { $0! }

    override class func canInit(with request: URLRequest) -> Bool { request.url?.host == "users-protocol.invalid" }
    override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }

    override func startLoading() {
        _ = tempFileURL
        client?.urlProtocol(self, didFailWithError: URLError(.cannotConnectToHost))
    }

    override func stopLoading() {}
}
