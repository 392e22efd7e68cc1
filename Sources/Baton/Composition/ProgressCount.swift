import Foundation

/// A composite's progress, counted in its own locked state: units to do and units done.
///
/// Linux's `Progress` has no lock: an object that Baton updates while readers on other threads read
/// it gives torn reads (`fractionCompleted` going backwards). So composites keep the counts
/// themselves and hand out a fresh `Progress` for each read, made from one consistent pair of
/// counts. `completed` only grows; `total` grows when children are added (the fraction then drops,
/// which is news, not a torn read).
struct ProgressCount: Sendable {
    var total: Int64 = 0
    var completed: Int64 = 0

    /// A new `Progress` with these counts, attached to no parent.
    func snapshot() -> Progress {
        let progress = Progress.discreteProgress(totalUnitCount: total)
        progress.completedUnitCount = min(completed, total)
        return progress
    }
}
