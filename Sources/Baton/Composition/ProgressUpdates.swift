import Dispatch
import Foundation

/// Every `Progress` update Baton makes runs on one serial queue.
///
/// Foundation's `Progress` is not thread-safe on Linux, and composites link their children's progress
/// into their own, so updates from different threads would race. The queue is not a lock: nothing
/// waits on it while holding Baton's lock, and a composite flushes it before it finishes, so its
/// progress is complete by the time it is.
enum ProgressUpdates {
    private static let key = DispatchSpecificKey<Bool>()
    private static let queue: DispatchQueue = {
        let queue = DispatchQueue(label: "Baton.ProgressUpdates")
        queue.setSpecific(key: key, value: true)
        return queue
    }()

    /// Applies `update` after every update submitted before it.
    static func apply(_ update: @escaping @Sendable () -> Void) {
        queue.async(execute: update)
    }

    /// Waits until every update submitted so far has been applied. Called from an update itself (a
    /// progress observer on Apple platforms that cancels a composite, say), it returns at once instead
    /// of waiting for itself.
    static func flush() {
        guard DispatchQueue.getSpecific(key: key) != true else { return }
        queue.sync {}
    }
}

/// A `Progress` that Baton mutates only on ``ProgressUpdates``.
struct SerializedProgress: @unchecked Sendable {
    let progress: Progress

    init() {
        progress = Progress(totalUnitCount: 0)
    }

    /// Counts one more child; a child that reports its own progress is linked in instead of counted.
    func addChild(_ child: Operation) {
        let childProgress = (child as? ProgressReporting)?.progress
        let progress = self.progress
        let box = UncheckedSendable(value: childProgress)
        ProgressUpdates.apply {
            progress.totalUnitCount += 1
            if let childProgress = box.value {
                progress.addChild(childProgress, withPendingUnitCount: 1)
            }
        }
    }

    /// Counts a finished child. A linked child's progress is completed, whatever it had reached: a
    /// child that was cancelled or skipped is done too.
    func childFinished(_ child: Operation) {
        let progress = self.progress
        if let childProgress = (child as? ProgressReporting)?.progress {
            let box = UncheckedSendable(value: childProgress)
            ProgressUpdates.apply {
                let linked = box.value
                if linked.totalUnitCount <= 0 { linked.totalUnitCount = 1 }
                linked.completedUnitCount = linked.totalUnitCount
            }
        } else {
            ProgressUpdates.apply { progress.completedUnitCount += 1 }
        }
    }

    /// Sets the totals directly (operations that count their own units, such as retries).
    func set(total: Int64? = nil, completed: Int64? = nil) {
        let progress = self.progress
        ProgressUpdates.apply {
            if let total { progress.totalUnitCount = total }
            if let completed { progress.completedUnitCount = completed }
        }
    }
}
