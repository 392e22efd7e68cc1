import Foundation

/// Stands in the chain's queue for a Foundation operation (not a Baton one) that is a stage of a chain,
/// so that the Foundation operation itself never waits in that queue.
///
/// The chain's queue is the user's, and may hold barriers. A Foundation operation waiting there behind
/// a pending barrier that is cancelled (by `ChainHandle.cancel()`, say) is started by Foundation at
/// once, finishes, and can be freed while the barrier still points at it: Linux's queue then
/// dereferences a freed object. The runner is a Baton operation, whose cancellation Foundation never
/// sees; it waits in the user's queue in the stage's place (with its priority and quality of service),
/// so barriers, the queue's width and its suspension still apply. When it runs, it hands the stage to
/// a queue of Baton's own, which never has a barrier: there Foundation starts the stage once it is
/// ready (dependencies added late included), or at once when it is cancelled. The runner finishes
/// when the stage has.
///
/// Cancelling the runner (the user's `cancelAllOperations()`) cancels the stage instead: the runner
/// always runs, so the stage always finishes and the chain goes on.
final class ForeignStageRunner: AsyncOperation, @unchecked Sendable {
    /// Its `dependencies` are those added with `addDependency` (see `AsyncOperation.listsOnlyAddedDependencies`).
    override class var listsOnlyAddedDependencies: Bool { true }

    /// Baton's queue for Foundation stages: nothing else is ever added to it, so it has no barrier.
    private static let stages: OperationQueue = {
        let queue = OperationQueue()
        queue.name = "Baton chain stages"
        return queue
    }()

    private let stage: Operation

    init(_ stage: Operation) {
        self.stage = stage
        super.init()
        dependencyPolicy = .runRegardless
        queuePriority = stage.queuePriority
        qualityOfService = stage.qualityOfService
        name = stage.name.map { "runner of \($0)" }
        // Baton's own from birth: only the chain launches it. Recorded only through the chain's record,
        // which ends the runner's record when the Foundation operation finishes: a recorder set or
        // attached since the chain began would record the runner's start and never its end.
        core.withLock { state in
            _ = state.life.claim()
            state.recorderLink = .none
        }
    }

    override var recordedType: Any.Type { type(of: stage) }
    override var recordedName: String? { stage.name }
    /// The chain finishes the runner's record when the Foundation operation finishes, before the chain
    /// goes on; the runner's own finish comes later.
    override var recordsItsFinish: Bool { false }

    override var cancellationTarget: Operation? {
        stage
    }

    override func execute() {
        let stage = self.stage
        stage.observeCompletionOnce {
            ForeignCustody.release(stage)
            self.finish()
        }
        guard !stage.isFinished && !stage.isExecuting else { return }
        Self.stages.addOperation(stage)
        // Linux's `addOperation` reads `isReady` before it takes the operation in; a dependency that
        // finishes in between leaves it marked ready but never scheduled. Any later scheduling pass
        // dispatches it, and resuming a queue runs one.
        Self.stages.isSuspended = false
    }
}
