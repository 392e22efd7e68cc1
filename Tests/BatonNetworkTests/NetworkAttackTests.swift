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
        let operations = Mutex([HTTPOperation<HTTPResponse>]())
        let ends = Mutex([ObjectIdentifier: Int]())
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for trial in 0..<40 {
                let size = (thread * 40 + trial) * 131
                let operation: HTTPOperation<HTTPResponse> =
                    trial % 2 == 0
                    ? client.data(server.request("/bytes?n=\(size)"))
                    : client.upload(server.request("/echo"), from: .data(Data(count: size)))
                // Some time out at once, some are cancelled, some finish: all at about the same moment.
                if trial % 5 == 0 { operation.timeout = .microseconds(trial * 20) }
                let id = ObjectIdentifier(operation)
                operation.onFinish { _ in ends.withLock { $0[id, default: 0] += 1 } }
                operations.withLock { $0.append(operation) }
                queue.addOperation(operation)
                if trial % 3 == 1 { operation.cancel() }
            }
        }
        let all = operations.withLock { $0 }
        XCTAssertTrue(
            eventually { all.allSatisfy(\.isFinished) }, "operations still running: \(all.filter { !$0.isFinished }.count)")
        XCTAssertTrue(eventually { ends.withLock { $0.count } == all.count })
        XCTAssertEqual(ends.withLock { Set($0.values) }, [1], "an operation ended more than once")
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
            XCTAssertTrue(try eventually { try server.stats(key).requests == 1 })
            fetch.cancel()
            XCTAssertEqual(try finished(fetch).isCancelled, true)
            XCTAssertEqual(fetch.attemptCount, 1)
            XCTAssertTrue(try eventually { try server.stats(key).closedEarly == true })
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
}
