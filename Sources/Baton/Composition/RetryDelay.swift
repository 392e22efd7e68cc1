import Foundation

/// How long a ``RetryOperation`` waits before the next attempt.
///
/// ```swift
/// RetryOperation(maximumAttempts: 4, delay: .exponential(initial: .milliseconds(200))) { _ in Download(url) }
/// ```
public enum RetryDelay: Sendable, Hashable {
    /// Retry at once.
    case immediate
    /// Wait the same time before every retry.
    case fixed(Duration)
    /// Wait `initial` before the second attempt, then `multiplier` times longer each time, never
    /// longer than `maximum`.
    case exponential(initial: Duration, multiplier: Double = 2, maximum: Duration = .seconds(60))

    /// The wait before attempt number `attempt` (the second attempt is number 2). Negative durations
    /// count as zero, and a multiplier below 1 as 1.
    ///
    /// - Parameter attempt: The attempt about to start, 2 or more.
    /// - Returns: The wait.
    public func delay(beforeAttempt attempt: Int) -> Duration {
        switch self {
        case .immediate:
            return .zero
        case .fixed(let duration):
            return max(.zero, duration)
        case .exponential(let initial, let multiplier, let maximum):
            // In seconds as a Double, so that no product can overflow `Duration`; anything not finite
            // (an infinite multiplier, 0 × ∞) is the maximum.
            let ceiling = max(.zero, maximum)
            let factor = multiplier.isNaN ? 1 : max(1, multiplier)
            let exponent = attempt > 2 ? Double(attempt - 2) : 0   // no `attempt - 2` for Int.min
            let wait = max(0, initial.seconds) * Foundation.pow(factor, exponent)
            return wait.isFinite && wait < ceiling.seconds ? .seconds(wait) : ceiling
        }
    }
}
