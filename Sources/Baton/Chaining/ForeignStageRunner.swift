import Foundation

/// Runs a Foundation operation (not a Baton one) that is a stage of a chain, from inside the chain's
/// queue, so that the Foundation operation itself never waits in that queue.
///
/// The chain's queue is the user's, and may hold barriers. A Foundation operation waiting behind a
/// pending barrier that is cancelled (by `ChainHandle.cancel()`, say) is started by Foundation at once,
/// finishes, and can be freed while the barrier still points at it: Linux's queue then dereferences a
/// freed object. The runner is a Baton operation, whose cancellation Foundation never sees; it waits in
/// the queue in the stage's place (behind the same dependencies) and then starts the stage on its own
/// thread, where a cancelled stage simply finishes without running.
final class ForeignStageRunner: AsyncOperation, @unchecked Sendable {
    private let stage: Mutex<Operation?>

    init(_ stage: Operation) {
        self.stage = Mutex(stage)
        super.init()
        dependencyPolicy = .runRegardless
        for dependency in stage.dependencies { addDependency(dependency) }
    }

    override func execute() {
        guard let stage = stage.withLock({ state -> Operation? in
            defer { state = nil }
            return state
        }) else { return finish() }
        stage.observeCompletion {
            ForeignCustody.release(stage)
            self.finish()
        }
        if !stage.isFinished && !stage.isExecuting { stage.start() }
    }
}
