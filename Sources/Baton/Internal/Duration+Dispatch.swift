import Dispatch

extension Duration {
    /// The duration in seconds, as a `Double` (exact enough for timers: attoseconds are rounded).
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) * 1e-18
    }

    /// The moment this long from now; beyond about a century, never.
    var deadlineFromNow: DispatchTime {
        let seconds = self.seconds
        guard seconds < 3e9 else { return .distantFuture }
        return .now() + max(0, seconds)
    }
}
