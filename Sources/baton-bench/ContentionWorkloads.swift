import Baton
import Foundation

// Contention (issue #26): T threads, each creating operations and adding them one by one, either to
// a queue of its own or all to one shared queue, `n` operations in all; or only creating them (no
// queue), which isolates what an operation's creation shares between threads. Per-operation cost is
// the wall time over `n`: with no process-wide lock on an operation's path, Baton's curve against T
// follows plain `BlockOperation`'s. Above this machine's core count, T oversubscribes the cores.

/// The thread counts the contention rows measure.
let contentionThreads = [1, 2, 4, 8, 16, 32]

/// Where the contention workload's threads put their operations.
enum ContentionMode: String, CaseIterable {
    /// A queue per thread.
    case own
    /// One queue for every thread.
    case shared
    /// Nowhere: each operation is created and dropped.
    case create
}

/// The workload name for `threads` threads making Baton operations (or `BlockOperation`s) in `mode`.
func contentionName(baton: Bool, mode: ContentionMode, threads: Int) -> String {
    "contention-\(baton ? "baton" : "BlockOperation")-\(mode.rawValue)-T\(threads)"
}

/// `threads` threads released together, each making `n / threads` operations (and adding them to a
/// queue, unless `mode` is `.create`).
func contention(threads: Int, mode: ContentionMode, baton: Bool) -> Workload {
    { n in
        let perThread = max(n / threads, 1)
        let sharedQueue = OperationQueue()
        let queues = (0..<threads).map { _ in mode == .shared ? sharedQueue : OperationQueue() }
        let start = DispatchSemaphore(value: 0)
        let added = DispatchGroup()
        for queue in queues {
            added.enter()
            let worker = Thread {
                start.wait()
                for _ in 0..<perThread {
                    let operation: Operation = baton ? AsyncBlockOperation { $0.finish() } : BlockOperation {}
                    if mode != .create { queue.addOperation(operation) }
                }
                added.leave()
            }
            worker.start()
        }
        for _ in 0..<threads { start.signal() }
        guard added.wait(timeout: .now() + 600) == .success else {
            throw BenchmarkFailure(description: "contention T=\(threads): adding timed out")
        }
        guard mode != .create else { return }
        for queue in mode == .shared ? [sharedQueue] : queues { try waitAll(queue, "contention T=\(threads)") }
    }
}

/// Every contention workload, by name.
func contentionWorkloads() -> [String: Workload] {
    var workloads = [String: Workload]()
    for baton in [true, false] {
        for mode in ContentionMode.allCases {
            for threads in contentionThreads {
                workloads[contentionName(baton: baton, mode: mode, threads: threads)] = contention(
                    threads: threads, mode: mode, baton: baton)
            }
        }
    }
    return workloads
}
