/// Calls a closure once a number of events have happened, whichever thread reports the last one.
///
/// It is created with one extra "arming" event, which the creator reports with ``tick()`` once it has
/// registered every other source: so a countdown whose events all happen at once (or that has none)
/// still fires exactly once, and only after the creator is done.
final class Countdown: Sendable {
    private let remaining: Mutex<Int>
    private let completion: @Sendable () -> Void

    /// - Parameters:
    ///   - events: How many events to wait for, not counting the arming one.
    ///   - completion: Called once, by the thread that reports the last event.
    init(events: Int, completion: @escaping @Sendable () -> Void) {
        remaining = Mutex(events + 1)
        self.completion = completion
    }

    /// Reports one event.
    func tick() {
        let fire = remaining.withLock { remaining -> Bool in
            remaining -= 1
            return remaining == 0
        }
        if fire { completion() }
    }
}
