import Baton
import BatonNetwork
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The defects an independent adversarial round found in BatonNetwork (F1–F12), each pinned by the
/// test that reproduced it.
final class AttackRoundOneTests: NetworkTestCase, @unchecked Sendable {
    /// F1: a download that ends cancelled or timed out leaves the previous file at its destination.
    func testADownloadThatDoesNotSucceedNeverReplacesTheDestination() throws {
        let queue = OperationQueue()
        var ended = (cancelled: 0, timedOut: 0, succeeded: 0)
        // A directory of its own: the check below lists it, and another process's downloads in the
        // shared temporary directory would be counted as left behind.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-f1-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: directory) }
        for trial in 0..<300 {
            let destination = directory.appendingPathComponent("file-\(trial)")
            defer { try? FileManager.default.removeItem(at: destination) }
            try Data("OLD".utf8).write(to: destination)
            let download = client.download(
                server.request("/bytes?n=\(1000 + trial * 37)"), to: destination, reportsProgress: trial % 2 == 0)
            if trial % 3 == 2 { download.timeout = .microseconds(200 + (trial * 37) % 3000) }
            queue.addOperation(download)
            if trial % 3 != 2 {
                spin((trial * 7919) % 3000 * 100)
                download.cancel()
            }
            let outcome = try finished(download)
            let contents = try Data(contentsOf: destination)
            switch outcome {
            case .succeeded(let file):
                ended.succeeded += 1
                XCTAssertEqual(contents.count, Int(file.byteCount), "trial \(trial)")
            case .cancelled:
                ended.cancelled += 1
                XCTAssertEqual(contents, Data("OLD".utf8), "trial \(trial): a cancelled download replaced the file")
            case .failed(BatonError.timedOut):
                ended.timedOut += 1
                XCTAssertEqual(contents, Data("OLD".utf8), "trial \(trial): a timed-out download replaced the file")
            case .failed(let error):
                XCTFail("trial \(trial): \(error)")
            }
            let hidden = try FileManager.default.contentsOfDirectory(atPath: destination.deletingLastPathComponent().path)
                .filter { $0.hasPrefix(".baton-") }
            XCTAssertEqual(hidden, [], "trial \(trial): a staging or kept file was left behind")
        }
        XCTAssertGreaterThan(ended.cancelled + ended.timedOut, 0, "no trial ended before its file was placed")
    }

    /// F2: an infinite or huge idle timeout means no limit (Linux's Foundation trapped on it); NaN is refused.
    func testAnIdleTimeoutWithoutALimitWorksAndANaNIsRefused() throws {
        for interval in [TimeInterval.infinity, 1e300] {
            var request = server.request("/bytes?n=10")
            request.timeoutInterval = interval
            XCTAssertEqual(try client.data(request).run(timeout: testTimeout).body.count, 10)
        }
        let configuration = URLSessionConfiguration.default
        configuration.timeoutIntervalForRequest = .infinity
        XCTAssertEqual(
            try HTTPClient(configuration: configuration).data(server.request("/bytes?n=10")).run(timeout: testTimeout).body.count,
            10)

        var request = server.request("/bytes?n=10")
        request.timeoutInterval = .nan
        let outcome = try client.data(request).runForOutcome(timeout: testTimeout)
        guard case .failed(NetworkError.invalidRequest(_, let reason)) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(reason, "its timeoutInterval is not a number")
        configuration.timeoutIntervalForRequest = .nan
        let broken = HTTPClient(configuration: configuration)
        guard
            case .failed(NetworkError.invalidConfiguration)? = try? broken.data(server.request("/bytes?n=1")).runForOutcome(
                timeout: testTimeout)
        else {
            return XCTFail("a NaN request timeout in the configuration was not refused")
        }
    }

    /// F3: an upload sends a GET as a POST, and a retry decides on the POST it sent.
    func testARetriedUploadIsAPostAndIsNotRetriedWithoutPermission() throws {
        let key = key()
        var policy = HTTPRetryPolicy()
        policy.initialDelay = .milliseconds(10)
        let client = self.client!
        let retry = client.retrying(server.request("/status/503?times=1&then=200&key=\(key)"), policy: policy) {
            client.upload($0, from: .data(Data("pay".utf8)))
        }
        let outcome = try retry.runForOutcome(timeout: testTimeout)
        XCTAssertEqual((outcome.error as? NetworkError)?.status, 503)
        XCTAssertEqual(try server.stats(key).requests, 1)
    }

    /// F4: a request that replaces another (through a chain, or `input`) moves the claim to its host.
    func testARequestThatReplacesAnotherClaimsItsOwnHost() throws {
        let client = HTTPClient(maximumRequestsPerHost: 1)
        try server.reset()
        let queue = OperationQueue()
        let url = server.url("/concurrent?ms=100")
        var fetches: [DataOperation] = []
        for index in 0..<6 {
            let make = ResultBlockOperation<URLRequest> { $0.finish(with: URLRequest(url: url)) }
            let fetch = client.data(URLRequest(url: URL(string: "http://placeholder-\(index).invalid/")!))
            fetches.append(fetch)
            _ = try queue.addChain([make, fetch])
        }
        for fetch in fetches { _ = try fetch.wait(timeout: testTimeout) }
        XCTAssertEqual(try server.stats().maxConcurrent, 1)
        XCTAssertEqual(fetches[0].categories, [client.hostCategory(for: url)!])
    }

    /// F5: a destination whose name is as long as a name may be downloads like any other.
    func testADownloadToALongNameSucceeds() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("baton-f5-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let destination = folder.appendingPathComponent(String(repeating: "n", count: 250))
        XCTAssertTrue(FileManager.default.createFile(atPath: destination.path, contents: Data("old".utf8)))
        XCTAssertEqual(
            try client.download(server.request("/bytes?n=1000"), to: destination).run(timeout: testTimeout).byteCount, 1000)
        XCTAssertEqual(try Data(contentsOf: destination).count, 1000)
    }

    /// F6, F7: an upload from a folder or a FIFO is refused at start: Foundation would hang on the one
    /// and send nothing from the other.
    func testAnUploadFromSomethingOtherThanARegularFileIsRefused() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("baton-f6-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let fifo = folder.appendingPathComponent("fifo")
        XCTAssertEqual(mkfifo(fifo.path, 0o644), 0)
        for source in [folder, fifo] {
            let outcome = try client.upload(server.request("/echo"), from: .file(source)).runForOutcome(timeout: testTimeout)
            guard case .failed(NetworkError.invalidRequest(_, let reason)) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertEqual(reason, "\(source.path) is not a regular file")
        }
    }

    /// F8: a dictionary's key that is a number is shown as a key, not as an index.
    func testADecodingPathShowsADictionaryKeyAsAKey() throws {
        struct Item: Decodable, Sendable { let name: String }
        struct Root: Decodable, Sendable { let items: [String: Item] }
        var components = URLComponents(url: server.url("/status/200"), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "body", value: #"{"items": {"42": {"nome": "x"}}}"#)]
        let outcome = try client.json(Root.self, URLRequest(url: components.url!)).runForOutcome(timeout: testTimeout)
        guard case .failed(NetworkError.decodingFailed(_, _, let path, _)) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(path, "items.42.name")
    }

    /// F9: an operation that runs regardless of a failed upstream reports the upstream's error.
    func testARunRegardlessFetchReportsTheUpstreamError() throws {
        struct Upstream: Error {}
        let make = ResultBlockOperation<URLRequest> { $0.finish(throwing: Upstream()) }
        let fetch = client.data()
        fetch.dependencyPolicy = .runRegardless
        _ = try OperationQueue().addChain([make, fetch])
        XCTAssertTrue(try finished(fetch).error is Upstream)
    }

    /// F10: `onFinish` does not run on the session's queue, so it may wait for another request of the
    /// same client.
    func testAWaitInsideOnFinishForAnotherRequestOfTheClientCompletes() throws {
        let client = self.client!
        let server = self.server!
        let inner = Mutex<Outcome<HTTPResponse>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let first = client.data(server.request("/bytes?n=10"))
        first.onFinish { _ in
            inner.withLock { $0 = try? client.data(server.request("/bytes?n=20")).runForOutcome(timeout: testTimeout) }
            done.signal()
        }
        OperationQueue().addOperation(first)
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(inner.withLock { $0?.isSucceeded }, true)
    }

    /// F11, F12: absurd arguments neither trap nor invert.
    func testAbsurdAttemptNumbersAndRetryAfterValuesStayInRange() {
        let policy = HTTPRetryPolicy()
        XCTAssertEqual(policy.backoff(beforeAttempt: .min, random: 1), policy.initialDelay)
        XCTAssertEqual(RetryDelay.exponential(initial: .seconds(1)).delay(beforeAttempt: .min), .seconds(1))
        let huge = RetryAfter.wait(for: "9223372036854775808")
        XCTAssertNotNil(huge)
        XCTAssertGreaterThanOrEqual(huge!, RetryAfter.wait(for: "9223372036854775807")!)
    }
}
