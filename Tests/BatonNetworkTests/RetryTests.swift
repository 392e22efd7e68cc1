import Baton
import BatonNetwork
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

final class RetryTests: NetworkTestCase, @unchecked Sendable {
    /// A policy whose backoff is short, so that tests do not wait.
    private var quick: HTTPRetryPolicy {
        var policy = HTTPRetryPolicy()
        policy.initialDelay = .milliseconds(10)
        return policy
    }

    func testA503TwiceThen200IsRetriedAndEachAttemptIsRecorded() throws {
        let key = key()
        let fetch = client.fetch(server.request("/status/503?times=2&then=200&key=\(key)"), policy: quick)
        let recorder = FlightRecorder()
        recorder.attach(to: fetch)
        let response = try fetch.run(timeout: testTimeout)
        XCTAssertEqual(response.text, "status 200, request 3")
        XCTAssertEqual(fetch.attemptCount, 3)
        XCTAssertEqual(try server.stats(key).requests, 3)
        let attempts = recorder.records.filter { $0.attempt != nil }.sorted { $0.attempt! < $1.attempt! }
        XCTAssertEqual(attempts.map(\.attempt), [1, 2, 3])
        XCTAssertEqual(attempts.map(\.status.isFinished), [true, true, true])
        XCTAssertEqual(attempts.last?.status, .succeeded)
    }

    func testRetryAfterInSecondsIsRespected() throws {
        let key = key()
        let fetch = client.fetch(server.request("/status/503?times=1&then=200&retry_after=1&key=\(key)"), policy: quick)
        let recorder = FlightRecorder()
        recorder.attach(to: fetch)
        XCTAssertEqual(try fetch.run(timeout: testTimeout).statusCode, 200)
        // The second attempt started no sooner than the server asked: measured by the recorder's
        // times, a lower bound that a slow machine cannot break.
        let attempts = recorder.records.filter { $0.attempt != nil }.sorted { $0.attempt! < $1.attempt! }
        XCTAssertEqual(attempts.count, 2)
        let gap = try XCTUnwrap(attempts[1].startedAt) - XCTUnwrap(attempts[0].finishedAt)
        XCTAssertGreaterThanOrEqual(gap, .milliseconds(990), "the retry came back after \(gap)")
    }

    func testTheDecisionReadsRetryAfterAsSecondsOrAsAnHTTPDate() throws {
        let policy = quick
        for (query, expected) in [("retry_after=7", Duration.seconds(7)), ("retry_after=date:30", .seconds(30))] {
            let outcome = try client.data(server.request("/status/429?\(query)")).runForOutcome(timeout: testTimeout)
            guard case .failed(let error) = outcome else { return XCTFail("\(outcome)") }
            let decision = policy.decision(after: error, attempt: 1, method: "GET")
            guard case .retry(let wait) = decision.action else { return XCTFail("\(decision)") }
            // An HTTP date has a resolution of one second, and time passed since the server wrote it.
            XCTAssertLessThanOrEqual(abs((wait - expected) / .seconds(1)), 2, "\(decision)")
            XCTAssertTrue(decision.reason.contains("status 429, Retry-After"), decision.reason)
        }
        XCTAssertEqual(RetryAfter.wait(for: "120"), .seconds(120))
        XCTAssertEqual(
            RetryAfter.wait(for: "Wed, 21 Oct 2015 07:28:00 GMT", now: Date(timeIntervalSince1970: 1_445_412_470)), .seconds(10))
        XCTAssertEqual(
            RetryAfter.wait(for: "Wednesday, 21-Oct-15 07:28:00 GMT", now: Date(timeIntervalSince1970: 1_445_412_470)),
            .seconds(10))
        XCTAssertEqual(
            RetryAfter.wait(for: "Wed Oct 21 07:28:00 2015", now: Date(timeIntervalSince1970: 1_445_412_470)), .seconds(10))
        XCTAssertEqual(
            RetryAfter.wait(for: "Wed, 21 Oct 2015 07:28:00 GMT", now: Date(timeIntervalSince1970: 1_445_412_490)), .zero)
        XCTAssertNil(RetryAfter.wait(for: "soon"))
        XCTAssertNil(RetryAfter.wait(for: "-5"))
    }

    func testARetryAfterLongerThanThePolicyAllowsStopsWithTheResponsesError() throws {
        let key = key()
        var policy = quick
        policy.maximumRetryAfter = .seconds(5)
        let fetch = client.fetch(server.request("/status/503?retry_after=3600&key=\(key)"), policy: policy)
        let outcome = try fetch.runForOutcome(timeout: testTimeout)
        XCTAssertEqual((outcome.error as? NetworkError)?.status, 503)
        XCTAssertEqual(fetch.attemptCount, 1)
        let error = try XCTUnwrap(outcome.error)
        XCTAssertEqual(policy.decision(after: error, attempt: 1, method: "GET").action, .stop)
    }

    func testOnlyTransientFailuresAreRetriedAndPostsOnlyWhenAllowed() throws {
        let policy = quick
        let notFound = try XCTUnwrap(try client.data(server.request("/status/404")).runForOutcome(timeout: testTimeout).error)
        XCTAssertEqual(policy.decision(after: notFound, attempt: 1, method: "GET").action, .stop)
        let busy = try XCTUnwrap(try client.data(server.request("/status/502")).runForOutcome(timeout: testTimeout).error)
        XCTAssertNotEqual(policy.decision(after: busy, attempt: 1, method: "GET").action, .stop)
        XCTAssertEqual(policy.decision(after: busy, attempt: 1, method: "POST").action, .stop)
        var posting = policy
        posting.retriesNonIdempotentRequests = true
        XCTAssertNotEqual(posting.decision(after: busy, attempt: 1, method: "POST").action, .stop)
        XCTAssertEqual(policy.decision(after: busy, attempt: policy.maximumAttempts, method: "GET").action, .stop)

        // A refused connection never reached the server: retried whatever the method.
        let refused = try XCTUnwrap(
            try client.data(URLRequest(url: URL(string: "http://127.0.0.1:1/")!)).runForOutcome(timeout: testTimeout).error)
        guard case NetworkError.transport(_, _, .cannotConnectToHost, _) = refused else { return XCTFail("\(refused)") }
        XCTAssertNotEqual(policy.decision(after: refused, attempt: 1, method: "POST").action, .stop)
    }

    func testTheBackoffGrowsIsCappedAndJittered() {
        var policy = HTTPRetryPolicy()
        policy.initialDelay = .seconds(1)
        policy.maximumDelay = .seconds(5)
        policy.jitter = 0.5
        XCTAssertEqual(policy.backoff(beforeAttempt: 2, random: 1), .seconds(1))
        XCTAssertEqual(policy.backoff(beforeAttempt: 3, random: 1), .seconds(2))
        XCTAssertEqual(policy.backoff(beforeAttempt: 9, random: 1), .seconds(5))
        XCTAssertEqual(policy.backoff(beforeAttempt: 3, random: 0), .seconds(1))
        XCTAssertEqual(policy.backoff(beforeAttempt: 3, random: 0.5), .milliseconds(1500))
    }

    func testADecisionCanBeOverridden() throws {
        let key = key()
        var policy = quick
        policy.adjust = { error, attempt, proposed in
            (error as? NetworkError)?.status == 404 && attempt < 3
                ? .init(.retry(after: .zero), reason: "404s come and go here") : proposed
        }
        let fetch = client.fetch(server.request("/status/404?times=2&then=200&key=\(key)"), policy: policy)
        XCTAssertEqual(try fetch.run(timeout: testTimeout).statusCode, 200)
        XCTAssertEqual(fetch.attemptCount, 3)
    }

    func testADroppedConnectionMidBodyIsATransientTransportError() throws {
        let outcome = try client.data(server.request("/drop?bytes=100000&after=1000")).runForOutcome(timeout: testTimeout)
        guard case .failed(let error) = outcome, case NetworkError.transport = error else { return XCTFail("\(outcome)") }
        XCTAssertNotEqual(quick.decision(after: error, attempt: 1, method: "GET").action, .stop, "\(error)")
    }
}

extension Outcome {
    var error: (any Error)? {
        if case .failed(let error) = self { return error }
        return nil
    }
}
