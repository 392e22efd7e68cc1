import Baton
import BatonNetwork
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

final class CancellationTests: NetworkTestCase, @unchecked Sendable {
    /// Starts `operation` on a queue, waits until the server has its request, cancels, and checks that
    /// it ended cancelled and that the server saw the connection close.
    private func cancelWhileTheServerIsBusy(_ operation: HTTPOperation<some Sendable>, key: String) throws {
        OperationQueue().addOperation(operation)
        XCTAssertEqual(try server.awaitStats(key, requests: 1).requests, 1)
        operation.cancel()
        XCTAssertEqual(try finished(operation).isCancelled, true)
        XCTAssertEqual(try server.awaitStats(key, closed: true).closedEarly, true, "the server never saw the connection close")
    }

    func testCancellingDuringTheHeadersClosesTheConnection() throws {
        let key = key()
        try cancelWhileTheServerIsBusy(client.data(server.request("/delay-headers?ms=20000&key=\(key)")), key: key)
    }

    func testCancellingDuringTheBodyClosesTheConnection() throws {
        let key = key()
        try cancelWhileTheServerIsBusy(
            client.data(server.request("/slow-body?bytes=100000&chunk=100&interval_ms=50&key=\(key)")), key: key)
    }

    func testCancellingADownloadDuringTheBodyLeavesNoFile() throws {
        let key = key()
        let destination = FileManager.default.temporaryDirectory.appendingPathComponent("baton-\(key)")
        let download = client.download(
            server.request("/slow-body?bytes=100000&chunk=1000&interval_ms=50&key=\(key)"), to: destination)
        try cancelWhileTheServerIsBusy(download, key: key)
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))
    }

    func testACancelBeforeStartMakesNoTaskAndSendsNothing() throws {
        let key = key()
        let fetch = client.data(server.request("/status/200?key=\(key)"))
        fetch.cancel()
        XCTAssertEqual(try fetch.runForOutcome(timeout: testTimeout).isCancelled, true)
        XCTAssertNil(fetch.task)
        XCTAssertEqual(try server.stats(key).requests, 0)
    }

    func testTheOperationsTimeoutBoundsTheWholeTransfer() throws {
        let key = key()
        // Data arrives every 50 ms, so the request's idle timeout never fires; the whole takes 5 s.
        var request = server.request("/slow-body?bytes=10000&chunk=100&interval_ms=50&key=\(key)")
        request.timeoutInterval = 10
        let fetch = client.data(request)
        fetch.timeout = .milliseconds(300)
        let outcome = try fetch.runForOutcome(timeout: testTimeout)
        guard case .failed(BatonError.timedOut(let culprit, .milliseconds(300))) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(culprit.operation, fetch)
        XCTAssertEqual(try server.awaitStats(key, closed: true).closedEarly, true)
    }

    func testTheRequestsTimeoutBoundsTheTimeWithoutData() throws {
        var request = server.request("/delay-headers?ms=20000&key=\(key())")
        request.timeoutInterval = 0.3
        let fetch = client.data(request)
        let outcome = try fetch.runForOutcome(timeout: testTimeout)
        guard case .failed(NetworkError.idleTimeout(let culprit, _, .milliseconds(300))) = outcome else {
            return XCTFail("\(outcome)")
        }
        XCTAssertEqual(culprit.operation, fetch)
    }

    func testCancellingARetryWhileItWaitsEndsItAtOnce() throws {
        var policy = HTTPRetryPolicy()
        policy.initialDelay = .seconds(600)
        policy.jitter = 0
        // A gate: the policy has decided to wait 600 s; the cancel lands as the retry begins the wait
        // (or just before, which ends it cancelled too).
        let decided = DispatchSemaphore(value: 0)
        policy.adjust = { _, _, proposed in
            decided.signal()
            return proposed
        }
        let fetch = client.fetch(server.request("/status/503?key=\(key())"), policy: policy)
        OperationQueue().addOperation(fetch)
        XCTAssertEqual(decided.wait(timeout: .now() + 30), .success)
        fetch.cancel()
        XCTAssertEqual(try finished(fetch).isCancelled, true)
    }

    /// Cancels operations at every moment of their life, many times: each ends exactly once, either
    /// cancelled or with its response, and nothing hangs.
    func testCancelsRacingTransfersEndEachOperationOnce() throws {
        let queue = OperationQueue()
        for trial in 0..<200 {
            let fetch = client.data(server.request("/bytes?n=\(trial * 97)"))
            let ends = Mutex(0)
            let ended = DispatchSemaphore(value: 0)
            fetch.onFinish { _ in
                ends.withLock { $0 += 1 }
                ended.signal()
            }
            queue.addOperation(fetch)
            // The cancel lands at a different moment of the transfer each trial, without sleeping.
            spin(trial % 7 * 20_000)
            fetch.cancel()
            let outcome = try finished(fetch)
            switch outcome {
            case .cancelled: break
            case .succeeded(let response): XCTAssertEqual(response.body.count, trial * 97)
            case .failed(let error): XCTFail("trial \(trial): \(error)")
            }
            XCTAssertEqual(ended.wait(timeout: .now() + 30), .success)
            XCTAssertEqual(ends.withLock { $0 }, 1, "trial \(trial)")
        }
    }
}

/// Spreads the moment of an event over an operation's life without sleeping.
func spin(_ rounds: Int) {
    var sum = 0
    for value in 0..<rounds { sum &+= value }
    if sum == -1 { print(sum) }
}

/// The outcome of an operation already added to a queue, once it has finished (or a failure after
/// `testTimeout`).
func finished<Output>(_ operation: ResultOperation<Output>) throws -> Outcome<Output> {
    _ = try? operation.wait(timeout: testTimeout)
    return try XCTUnwrap(operation.outcome, "\(operation) did not finish within \(testTimeout)")
}

extension Outcome {
    var isSucceeded: Bool {
        if case .succeeded = self { return true }
        return false
    }

    var isCancelled: Bool {
        if case .cancelled = self { return true }
        return false
    }
}
