import Baton
import BatonNetwork
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Lifecycle races, hammered from many threads: each operation ends exactly once, however cancels,
/// timeouts and responses interleave, and nothing hangs.
final class NetworkAttackTests: NetworkTestCase, @unchecked Sendable {
    func testCancelsAndTimeoutsFromManyThreadsRacingResponsesEndEachOperationOnce() throws {
        let queue = OperationQueue()
        let tally = EndTally<HTTPOperation<HTTPResponse>, HTTPResponse>()
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for trial in 0..<40 {
                let size = (thread * 40 + trial) * 131
                let operation: HTTPOperation<HTTPResponse> =
                    trial % 2 == 0
                    ? client.data(server.request("/bytes?n=\(size)"))
                    : client.upload(server.request("/echo"), from: .data(Data(count: size)))
                // Some time out at once, some are cancelled, some finish: all at about the same moment.
                if trial % 5 == 0 { operation.timeout = .microseconds(trial * 20) }
                tally.watch(operation)
                queue.addOperation(operation)
                if trial % 3 == 1 { operation.cancel() }
            }
        }
        let all = tally.allEnded()
        XCTAssertEqual(tally.endCounts, [1], "an operation ended more than once")
        for operation in all {
            switch operation.outcome {
            case .succeeded?, .cancelled?, .failed(BatonError.timedOut)?: break
            case let other: XCTFail("\(operation): \(String(describing: other))")
            }
        }
    }

    func testCancellingARetryDuringAnAttemptsTransferEndsItCancelledAndClosesTheConnection() throws {
        for trial in 0..<20 {
            let key = "\(key())-\(trial)"
            let fetch = client.fetch(server.request("/delay-headers?ms=20000&key=\(key)"))
            OperationQueue().addOperation(fetch)
            XCTAssertEqual(try server.awaitStats(key, requests: 1).requests, 1)
            fetch.cancel()
            XCTAssertEqual(try finished(fetch).isCancelled, true)
            XCTAssertEqual(fetch.attemptCount, 1)
            XCTAssertEqual(try server.awaitStats(key, closed: true).closedEarly, true)
        }
    }

    /// A limit set for a host while the client first gives that host its default is never undone by
    /// the default. The gate holds the first use just before it sets the default, until the other
    /// thread's `setLimit` has run (or 200 ms, when the client's lock keeps it out, as it should).
    func testALimitSetWhileTheHostIsFirstUsedStays() throws {
        for trial in 0..<5 {
            let client = HTTPClient(maximumRequestsPerHost: 6)
            let url = URL(string: "http://host-\(trial).invalid/")!
            let reached = DispatchSemaphore(value: 0)
            let limited = DispatchSemaphore(value: 0)
            client.beforeDefaultLimit.withLock {
                $0 = {
                    reached.signal()
                    _ = limited.wait(timeout: .now() + 0.2)
                }
            }
            DispatchQueue.concurrentPerform(iterations: 2) { side in
                if side == 0 {
                    _ = client.hostCategory(for: url)
                } else {
                    reached.wait()
                    try? client.setLimit(2, forHost: url)
                    limited.signal()
                }
            }
            XCTAssertEqual(client.hosts.limit(of: "http://host-\(trial).invalid:80"), 2, "trial \(trial)")
        }
    }

    /// A retry's next attempt racing a cancel, from many threads: each retry ends once, succeeded or
    /// cancelled, after at most two attempts.
    func testCancelsRacingARetrysNextAttemptEndEachRetryOnce() throws {
        var quick = HTTPRetryPolicy()
        quick.initialDelay = .microseconds(100)
        quick.jitter = 0
        let policy = quick
        let tally = EndTally<RetryOperation<HTTPResponse>, HTTPResponse>()
        let queue = OperationQueue()
        let base = key()
        DispatchQueue.concurrentPerform(iterations: 6) { thread in
            for trial in 0..<30 {
                let fetch = client.fetch(
                    server.request("/status/503?times=1&then=200&key=\(base)-\(thread)-\(trial)"), policy: policy)
                tally.watch(fetch)
                queue.addOperation(fetch)
                spin((thread * 30 + trial) % 11 * 30_000)
                fetch.cancel()
            }
        }
        let all = tally.allEnded()
        XCTAssertEqual(tally.endCounts, [1], "a retry ended more than once")
        for fetch in all {
            XCTAssertLessThanOrEqual(fetch.attemptCount, 2)
            switch fetch.outcome {
            case .succeeded(let response)?: XCTAssertEqual(response.statusCode, 200)
            case .cancelled?: break
            case let other: XCTFail("\(String(describing: other))")
            }
        }
    }

    /// A request stored from another thread just as the operation starts: it is either claimed and
    /// sent, or refused as replaced; never sent under another host's claim. Both threads are released
    /// by one gate.
    func testARequestReplacedAsTheOperationStartsIsNeverSentUnderAnotherHostsClaim() throws {
        let first = server.request("/bytes?n=3")
        // The same server under another host name: another host, another category.
        let second = URLRequest(url: URL(string: "http://localhost:\(server.port)/bytes?n=5")!)
        let queue = OperationQueue()
        var outcomes = (sent: 0, refused: 0)
        for _ in 0..<200 {
            let fetch = client.data(first)
            let go = DispatchSemaphore(value: 0)
            let ready = DispatchGroup()
            DispatchQueue.concurrentPerform(iterations: 2) { side in
                ready.enter()
                ready.leave()
                if side == 0 {
                    go.wait()
                    fetch.input = second
                } else {
                    ready.wait()
                    go.signal()
                    queue.addOperation(fetch)
                }
            }
            switch try finished(fetch) {
            case .succeeded(let response):
                outcomes.sent += 1
                let host = response.body.count == 5 ? second : first
                XCTAssertEqual(fetch.categories, [client.hostCategory(for: host.url)!], "sent under another host's claim")
            case .failed(NetworkError.invalidRequest(_, let reason)):
                outcomes.refused += 1
                XCTAssertTrue(reason.hasPrefix("its request was replaced as it started"), reason)
            case let other:
                XCTFail("\(other)")
            }
        }
        XCTAssertGreaterThan(outcomes.sent, 0)
    }

    /// A failure whose body holds what exports interpret (quotes, newlines, entity codes, HTML) is
    /// recorded and exported as valid JSON.
    func testAFailureBodyWithHostileCharactersExportsCleanly() throws {
        var components = URLComponents(url: server.url("/status/500"), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "body", value: "say \"hi\"\n#9829; <b>x</b> \\ \u{1}")]
        let fetch = client.data(URLRequest(url: components.url!))
        let recorder = FlightRecorder()
        recorder.attach(to: fetch)
        guard case .failed = try fetch.runForOutcome(timeout: testTimeout) else { return XCTFail("it did not fail") }
        let trace = Data(recorder.export(.chromeTrace).utf8)
        XCTAssertNoThrow(try JSONSerialization.jsonObject(with: trace))
        for format in [FlightRecorder.ExportFormat.graphviz, .mermaid, .textTree] {
            XCTAssertFalse(recorder.export(format).isEmpty)
        }
    }
}

/// Counts each watched operation's ends (from its `onFinish`) and waits, bounded, until every one has
/// ended and announced `isFinished` (which `onFinish` precedes).
final class EndTally<Watched: ResultOperation<Output>, Output>: Sendable {
    private let state = Mutex((operations: [Watched](), ends: [ObjectIdentifier: Int]()))
    private let ended = DispatchGroup()

    func watch(_ operation: Watched) {
        let id = ObjectIdentifier(operation)
        ended.enter()
        state.withLock { $0.operations.append(operation) }
        operation.onFinish { [state, ended] _ in
            state.withLock { $0.ends[id, default: 0] += 1 }
            ended.leave()
        }
    }

    /// The watched operations, in the order watched, once every one has ended and is finished (the test
    /// fails when one has not within 60 s).
    func allEnded() -> [Watched] {
        XCTAssertEqual(ended.wait(timeout: .now() + 60), .success, "operations still running")
        let all = state.withLock { $0.operations }
        XCTAssertTrue(eventually { all.allSatisfy(\.isFinished) }, "an operation told its outcome but never finished")
        XCTAssertEqual(state.withLock { $0.ends.count }, all.count, "an operation never ended")
        return all
    }

    /// How many times operations ended: `[1]` when each ended exactly once.
    var endCounts: Set<Int> {
        state.withLock { Set($0.ends.values) }
    }
}
