import Baton
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// When a failed request is tried again, and after how long.
///
/// A failure is **transient** when trying again may succeed: a status in ``retryableStatusCodes``
/// (408, 429 and the 5xx statuses other than 501 and 505), a refused, reset or dropped connection, a
/// host not found, an idle timeout, or the attempt's own timeout. Anything else (a 404, an invalid
/// request, a body that does not decode) stops at once.
///
/// The wait before attempt *n* is `initialDelay × multiplier^(n−2)`, at most ``maximumDelay``, less
/// a random part of up to ``jitter`` of it (so that many clients do not come back in step). When the
/// response says `Retry-After` (seconds or an HTTP date), the wait is that instead; a `Retry-After`
/// longer than ``maximumRetryAfter`` stops the retry with the response's error rather than come back
/// early.
///
/// A request that may have reached the server is retried only when its method is idempotent (GET,
/// HEAD, OPTIONS, TRACE, PUT, DELETE) or ``retriesNonIdempotentRequests`` is set: a POST that timed
/// out may have been applied. A refused connection never reached the server and is retried whatever
/// the method.
///
/// ``decision(after:attempt:method:now:random:)`` says what the policy decides and why, so it can be
/// inspected and tested; ``adjust`` overrides it.
public struct HTTPRetryPolicy: Sendable {
    /// The total number of attempts, the first included. Default: 4.
    public var maximumAttempts = 4
    /// The wait before the second attempt. Default: 250 ms.
    public var initialDelay: Duration = .milliseconds(250)
    /// How much longer each following wait is. Default: 2.
    public var multiplier = 2.0
    /// The longest wait the backoff reaches. Default: 30 s.
    public var maximumDelay: Duration = .seconds(30)
    /// The fraction of each backoff wait that is random, 0 (none) to 1 (the whole wait). Default: 0.5.
    public var jitter = 0.5
    /// The longest `Retry-After` honoured; a longer one stops the retry. Default: 120 s.
    public var maximumRetryAfter: Duration = .seconds(120)
    /// The statuses worth another attempt.
    public var retryableStatusCodes: Set<Int> = Set(500...599).subtracting([501, 505]).union([408, 429])
    /// Whether a POST or PATCH that may have reached the server is tried again. Default: `false`.
    public var retriesNonIdempotentRequests = false
    /// Overrides a decision: given the error, the attempt that failed and what the policy decided,
    /// returns what to do. Default: `nil`, the policy's decision stands.
    public var adjust: (@Sendable (_ error: any Error, _ attempt: Int, _ proposed: Decision) -> Decision)?

    /// The default policy.
    public init() {}

    /// A policy that never retries.
    public static var never: HTTPRetryPolicy {
        var policy = HTTPRetryPolicy()
        policy.maximumAttempts = 1
        return policy
    }

    /// What the policy decided about one failure, and why.
    public struct Decision: Sendable, Equatable, CustomStringConvertible {
        /// What the retry does: try again after a wait, or stop.
        public var action: RetryDecision
        /// Why, in a few words (`"status 503, Retry-After 1 s"`).
        public var reason: String

        /// A decision.
        ///
        /// - Parameters:
        ///   - action: Retry after a wait, or stop.
        ///   - reason: Why.
        public init(_ action: RetryDecision, reason: String) {
            self.action = action
            self.reason = reason
        }

        /// `retry after 1 s: status 503` or `stop: status 404`.
        public var description: String {
            switch action {
            case .retry(let wait): return "retry after \(wait): \(reason)"
            case .stop: return "stop: \(reason)"
            }
        }
    }

    /// What the policy does after `error` ended attempt number `attempt` of a request with `method`.
    ///
    /// - Parameters:
    ///   - error: The attempt's error.
    ///   - attempt: The attempt that failed (1 for the first).
    ///   - method: The request's method.
    ///   - now: The time a `Retry-After` date counts from. Default: now.
    ///   - random: A number in 0...1 that picks the jitter. Default: a random one.
    /// - Returns: The decision, after ``adjust``.
    public func decision(
        after error: any Error, attempt: Int, method: String, now: Date = Date(), random: Double = .random(in: 0...1)
    ) -> Decision {
        let proposed = standardDecision(after: error, attempt: attempt, method: method, now: now, random: random)
        return adjust?(error, attempt, proposed) ?? proposed
    }

    private func standardDecision(after error: any Error, attempt: Int, method: String, now: Date, random: Double) -> Decision {
        guard attempt < maximumAttempts else { return Decision(.stop, reason: "attempt \(attempt) of \(maximumAttempts)") }
        guard let (why, reachedServer) = transience(of: error) else {
            return Decision(.stop, reason: "not transient: \(error)")
        }
        let idempotent = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"].contains(method.uppercased())
        if reachedServer && !idempotent && !retriesNonIdempotentRequests {
            return Decision(.stop, reason: "\(why), but \(method) is not idempotent")
        }
        if case .unacceptableStatus(_, _, let response, _)? = error as? NetworkError,
            let asked = RetryAfter.wait(in: response, now: now)
        {
            guard asked <= maximumRetryAfter else {
                return Decision(.stop, reason: "\(why), Retry-After \(asked) is longer than \(maximumRetryAfter)")
            }
            return Decision(.retry(after: asked), reason: "\(why), Retry-After \(asked)")
        }
        return Decision(.retry(after: backoff(beforeAttempt: attempt + 1, random: random)), reason: why)
    }

    /// The backoff wait before attempt number `attempt` (2 or more), given a random number in 0...1.
    ///
    /// - Parameters:
    ///   - attempt: The attempt about to start.
    ///   - random: Picks the jitter: 0 takes the whole jitter off, 1 none.
    /// - Returns: The wait.
    public func backoff(beforeAttempt attempt: Int, random: Double) -> Duration {
        let full = RetryDelay.exponential(initial: initialDelay, multiplier: multiplier, maximum: maximumDelay)
            .delay(beforeAttempt: attempt)
        let share = min(1, max(0, jitter.isNaN ? 0 : jitter)) * (1 - min(1, max(0, random.isNaN ? 1 : random)))
        return full * (1 - share)
    }

    /// Why `error` is worth another attempt, and whether the request may have reached the server;
    /// `nil` when it is not.
    private func transience(of error: any Error) -> (String, Bool)? {
        switch error {
        case NetworkError.unacceptableStatus(_, let status, _, _):
            return retryableStatusCodes.contains(status) ? ("status \(status)", true) : nil
        case NetworkError.idleTimeout:
            return ("idle timeout", true)
        case NetworkError.transport(_, _, let code, let reason):
            switch code {
            case .cannotConnectToHost, .cannotFindHost, .dnsLookupFailed, .notConnectedToInternet:
                return (reason, false)
            case .networkConnectionLost, .timedOut, .badServerResponse, .unknown:
                return (reason, true)
            default:
                return nil
            }
        case BatonError.timedOut:
            return ("the attempt timed out", true)
        default:
            return nil
        }
    }
}
