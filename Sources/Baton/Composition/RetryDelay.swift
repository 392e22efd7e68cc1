/// How long a ``RetryOperation`` waits before the next attempt.
public enum RetryDelay: Sendable, Hashable {
    /// Retry at once.
    case none
    /// Wait the same number of seconds before every retry.
    case fixed(seconds: Double)
    /// Wait `initial` seconds before the second attempt, then `multiplier` times longer each time,
    /// never more than `maximum` seconds.
    case exponential(initial: Double, multiplier: Double = 2, maximum: Double = 60)

    /// The wait before attempt number `attempt` (the second attempt is number 2).
    ///
    /// - Parameter attempt: The attempt about to start, 2 or more.
    /// - Returns: The wait in seconds.
    public func seconds(beforeAttempt attempt: Int) -> Double {
        switch self {
        case .none:
            return 0
        case .fixed(let seconds):
            return max(0, seconds)
        case .exponential(let initial, let multiplier, let maximum):
            let exponent = Double(max(0, attempt - 2))
            return min(max(0, maximum), max(0, initial) * pow(max(1, multiplier), exponent))
        }
    }
}

private func pow(_ base: Double, _ exponent: Double) -> Double {
    var result = 1.0
    var remaining = Int(exponent)
    while remaining > 0 {
        result *= base
        if result > 1e12 { return result }
        remaining -= 1
    }
    return result
}
