import Baton
import Dispatch
import Foundation

// baton-bench: Baton against its Foundation baselines, in one run, medians over repetitions.
//
//   swift run -c release baton-bench [--n 1000,10000,100000] [--reps 3] [--csv] [--only NAME]
//                                    [--raw-limit 10000] [--independent-limit 100000] [--million]
//                                    [--demo-large-files 3]
//
// Every workload builds its operations, runs them on a fresh OperationQueue and waits (bounded)
// for the last one. Times exclude nothing but process start.

struct Options {
    var sizes = [1_000, 10_000, 100_000]
    var repetitions = 3
    var csv = false
    var only: String?
    var rawLimit = 10_000
    var independentLimit = 100_000
    var million = false
    var demoLargeFiles = 3

    init(_ arguments: [String]) {
        var iterator = arguments.dropFirst().makeIterator()
        while let argument = iterator.next() {
            switch argument {
            case "--n": sizes = (iterator.next() ?? "").split(separator: ",").compactMap { Int($0) }
            case "--reps": repetitions = max(1, Int(iterator.next() ?? "") ?? 3)
            case "--csv": csv = true
            case "--only": only = iterator.next()
            case "--raw-limit": rawLimit = Int(iterator.next() ?? "") ?? rawLimit
            case "--independent-limit": independentLimit = Int(iterator.next() ?? "") ?? independentLimit
            case "--million": million = true
            case "--demo-large-files": demoLargeFiles = max(0, Int(iterator.next() ?? "") ?? demoLargeFiles)
            case "--help", "-h":
                print(
                    """
                    usage: baton-bench [--n 1000,10000,100000] [--reps 3] [--csv] [--only WORKLOAD]
                                       [--raw-limit N] [--independent-limit N] [--million] [--demo-large-files N]
                      WORKLOAD is independent, chain, adapters, group, sequence, dsl, tree, wait, recording,
                      exclusivity, network, contention, memory or demo (network: 1,000 GETs and a 1 GiB download on
                      loopback, against Tests/BatonNetworkTests/Server/server.py, which needs python3)
                      --raw-limit N          largest n for the quadratic raw Foundation chains (default 10000)
                      --independent-limit N  largest n for independent BlockOperation baselines (default 100000)
                      --million              add chains of 1,000,000 operations (timed, and in the memory rows)
                      --demo-large-files N   200 MB files in the demo's generated tree (default 3)
                    """)
                exit(0)
            default:
                FileHandle.standardError.write(Data("unknown argument \(argument)\n".utf8))
                exit(2)
            }
        }
    }
}

/// Peak resident memory of this process since the last reset, in MiB (Linux: VmHWM).
enum PeakMemory {
    static func mebibytes() -> Double {
        #if os(Linux)
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return .nan }
        for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            let kibibytes = line.split(separator: " ").compactMap { Double($0) }.first ?? .nan
            return kibibytes / 1024
        }
        #endif
        return .nan
    }
}

func seconds(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.isEmpty ? .nan : sorted[sorted.count / 2]
}

struct BenchmarkFailure: Error, CustomStringConvertible {
    let description: String
}

// MARK: - Workloads

/// One timed run of a workload at size `n`.
typealias Workload = (_ n: Int) throws -> Void

/// Waits until `queue` is empty, at most ten minutes. Foundation's own wait, on a helper thread so
/// that it can be bounded; not a barrier block, which makes every operation a dependency of the
/// barrier and costs Linux's queue more than the operations themselves (1.7 s against 0.3 s for
/// 100,000 `BlockOperation`s).
func waitAll(_ queue: OperationQueue, _ what: String) throws {
    let done = DispatchSemaphore(value: 0)
    let waiter = Thread {
        queue.waitUntilAllOperationsAreFinished()
        done.signal()
    }
    waiter.start()
    guard done.wait(timeout: .now() + 600) == .success else { throw BenchmarkFailure(description: "\(what) timed out") }
}

let independentBlockOperations: Workload = { n in
    let queue = OperationQueue()
    queue.addOperations((0..<n).map { _ in BlockOperation {} }, waitUntilFinished: false)
    try waitAll(queue, "BlockOperation x\(n)")
}

/// A `BlockOperation` carrying what a Baton operation carries beyond one: the 256-byte block of its
/// state and lock, and 32 bytes of its own fields. It runs the same empty block: what it costs beyond
/// `BlockOperation` is what the memory costs, which no change to Baton's steps can take away.
final class PaddedBlockOperation: BlockOperation, @unchecked Sendable {
    /// 224 bytes in a heap block of its own, as a Baton operation's state is.
    final class Block {
        var words: (SIMD16<UInt64>, SIMD8<UInt64>, SIMD4<UInt64>) = (.zero, .zero, .zero)
    }
    let block = Block()
    var fields: SIMD4<UInt64> = .zero
}

/// The same bytes as `PaddedBlockOperation`, all inline in the operation: no second heap block. Against
/// `PaddedBlockOperation` it says whether the cost is the bytes or the second allocation, that is,
/// whether keeping an operation's state inside the operation would take it away.
final class InlinePaddedBlockOperation: BlockOperation, @unchecked Sendable {
    var words: (SIMD16<UInt64>, SIMD8<UInt64>, SIMD4<UInt64>, SIMD4<UInt64>) = (.zero, .zero, .zero, .zero)
}

let inlinePaddedBlockOperations: Workload = { n in
    let queue = OperationQueue()
    queue.addOperations((0..<n).map { _ in InlinePaddedBlockOperation {} }, waitUntilFinished: false)
    try waitAll(queue, "InlinePaddedBlockOperation x\(n)")
}

let paddedBlockOperations: Workload = { n in
    let queue = OperationQueue()
    queue.addOperations((0..<n).map { _ in PaddedBlockOperation {} }, waitUntilFinished: false)
    try waitAll(queue, "PaddedBlockOperation x\(n)")
}

let independentBaton: Workload = { n in
    let queue = OperationQueue()
    queue.addOperations((0..<n).map { _ in AsyncBlockOperation { $0.finish() } }, waitUntilFinished: false)
    try waitAll(queue, "AsyncBlockOperation x\(n)")
}

let dispatchGroup: Workload = { n in
    let group = DispatchGroup()
    let queue = DispatchQueue.global()
    for _ in 0..<n { queue.async(group: group) {} }
    guard group.wait(timeout: .now() + 600) == .success else { throw BenchmarkFailure(description: "DispatchGroup timed out") }
}

let taskGroup: Workload = { n in
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<n { group.addTask {} }
        }
        done.signal()
    }
    guard done.wait(timeout: .now() + 600) == .success else { throw BenchmarkFailure(description: "TaskGroup timed out") }
}

let batonChain = chain(adapter: .default)

/// A chain of `n` steps, each adding one, with `adapter` between neighbours.
func chain(adapter: ChainAdapter) -> Workload {
    { n in try runChain(n, adapter: adapter) }
}

func runChain(_ n: Int, adapter: ChainAdapter) throws {
    let queue = OperationQueue()
    let first = ResultBlockOperation<Int> { $0.finish(with: 0) }
    var operations: [Operation] = [first]
    operations.reserveCapacity(n)
    for _ in 1..<max(n, 2) { operations.append(TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! + 1) }) }
    let handle = try queue.addChain(operations, adapter: adapter)
    operations = []
    let output = try handle.wait(timeout: .seconds(3_600))
    guard let value = output as? Int, value == max(n, 2) - 1 else {
        throw BenchmarkFailure(description: "chain of \(n) produced \(output)")
    }
}

func rawChain(oneByOne: Bool) -> Workload {
    { n in
        let queue = OperationQueue()
        var operations = [BlockOperation]()
        operations.reserveCapacity(n)
        for index in 0..<n {
            let operation = BlockOperation {}
            if index > 0 { operation.addDependency(operations[index - 1]) }
            operations.append(operation)
        }
        if oneByOne {
            for operation in operations { queue.addOperation(operation) }
        } else {
            queue.addOperations(operations, waitUntilFinished: false)
        }
        let last = operations[n - 1]
        try waitAll(queue, "raw chain x\(n)")
        guard last.isFinished else { throw BenchmarkFailure(description: "raw chain did not finish") }
        // Release without recursion (Foundation's dependency chain overflows the stack near 40,000).
        for operation in operations.reversed() {
            for dependency in operation.dependencies { operation.removeDependency(dependency) }
        }
    }
}

/// The floor of a chain in one `OperationQueue`, without Foundation's quadratic dependencies: `n`
/// `BlockOperation`s, each adding the next to the queue from its block. Every step is one
/// `addOperation` from a worker and one hand-off to the thread that runs it, which is what a Baton
/// chain's steps cost Foundation too.
let handOffBlockOperations: Workload = { n in
    let queue = OperationQueue()
    let done = DispatchSemaphore(value: 0)
    HandOff(queue: queue, remaining: n, done: done).next()
    guard done.wait(timeout: .now() + 600) == .success else {
        throw BenchmarkFailure(description: "hand-off x\(n) timed out")
    }
}

/// A chain's floor in Foundation with a chain's two traits that `handOffBlockOperations` lacks: its `n`
/// `BlockOperation`s are all made before the first runs (as `addChain` takes them, so they are alive
/// at once), and each adds the next to the queue from its `completionBlock` when `afterFinish`, which
/// Foundation calls once the operation has finished (as a chain hands on only after `isFinished`), or
/// else from its block, while it still runs. With `padded`, each step is a `PaddedBlockOperation`, the
/// size of a Baton operation.
func madeHandOffBlockOperations(afterFinish: Bool, padded: Bool = false) -> Workload {
    { n in
        let queue = OperationQueue()
        let done = DispatchSemaphore(value: 0)
        // The steps reach one another through `MadeSteps`, unowned, not through the next step itself: a
        // step keeps its blocks once run, so a list of steps each holding the next would be freed
        // recursively, 100,000 deep. The workload keeps `steps` until the last has run.
        let steps = MadeSteps(count: max(n, 1), padded: padded)
        for (index, operation) in steps.operations.enumerated() {
            let handOn: @Sendable () -> Void = { [unowned(unsafe) steps] in
                if index + 1 < steps.operations.count {
                    queue.addOperation(steps.operations[index + 1])
                } else {
                    done.signal()
                }
            }
            if afterFinish {
                operation.addExecutionBlock {}
                operation.completionBlock = handOn
            } else {
                operation.addExecutionBlock(handOn)
            }
        }
        queue.addOperation(steps.operations[0])
        guard done.wait(timeout: .now() + 600) == .success else {
            throw BenchmarkFailure(description: "made hand-off x\(n) timed out")
        }
        withExtendedLifetime(steps) {}
    }
}

/// The steps of `madeHandOffBlockOperations`, made before the first runs.
final class MadeSteps: Sendable {
    let operations: [BlockOperation]

    init(count: Int, padded: Bool) {
        operations = (0..<count).map { _ in padded ? PaddedBlockOperation() : BlockOperation() }
    }
}

/// The steps of `handOffBlockOperations`.
struct HandOff: Sendable {
    let queue: OperationQueue
    let remaining: Int
    let done: DispatchSemaphore

    func next() {
        guard remaining > 0 else {
            done.signal()
            return
        }
        let following = HandOff(queue: queue, remaining: remaining - 1, done: done)
        queue.addOperation(BlockOperation { following.next() })
    }
}

let batonGroup: Workload = { n in
    let group = GroupOperation(operations: (0..<n).map { _ in AsyncBlockOperation { $0.finish() } })
    try group.run(timeout: .seconds(600))
}

let batonSequence = sequence(claiming: false)

/// A sequence of `n` steps, each handing on its input plus one; with `claiming`, every step claims one
/// category (of a scope of the run's own): the steps run one after another, so the category is never
/// contended, and the claim is the usual one, on a category free when asked, in a table that stays small.
func sequence(claiming: Bool) -> Workload {
    { n in
        let category = claiming ? OperationCategory("database", in: ExclusivityScope("sequential")) : nil
        var steps: [Operation] = []
        steps.reserveCapacity(n)
        for index in 0..<max(n, 2) {
            let step: AsyncOperation =
                index == 0
                ? ResultBlockOperation<Int> { $0.finish(with: 0) }
                : TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! + 1) }
            if let category { try step.addExclusivity(category) }
            steps.append(step)
        }
        let sequence = SequenceOperation<Int>(operations: steps)
        steps = []
        let value = try sequence.run(timeout: .seconds(3_600))
        guard value == max(n, 2) - 1 else { throw BenchmarkFailure(description: "sequence of \(n) produced \(value)") }
    }
}

/// The same sequence written with the DSL: a `Cascade` whose steps a `for` loop writes.
let batonCascade: Workload = { n in
    let cascade = Cascade {
        ResultBlockOperation<Int> { $0.finish(with: 0) }
        for _ in 1..<max(n, 2) { TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! + 1) } }
    }
    let value = try cascade.run(timeout: .seconds(3_600))
    guard value == max(n, 2) - 1 else { throw BenchmarkFailure(description: "cascade of \(n) produced \(value)") }
}

/// `n` operations run one after another, each with a blocking `run(on:timeout:)`: what a wait costs.
let batonWait: Workload = { n in
    let queue = OperationQueue()
    for index in 0..<n {
        let value = try ResultBlockOperation<Int> { $0.finish(with: index) }.run(on: queue, timeout: .seconds(60))
        guard value == index else { throw BenchmarkFailure(description: "run \(index) produced \(value)") }
    }
}

/// The same with Foundation: each `BlockOperation` added, then `waitUntilFinished()`.
let blockOperationWait: Workload = { n in
    let queue = OperationQueue()
    for _ in 0..<n {
        let operation = BlockOperation {}
        queue.addOperation(operation)
        operation.waitUntilFinished()
    }
}

/// `workload` with a global `FlightRecorder` that keeps every record (`capacity` nil) or the most
/// recent `capacity`: the same work, recorded.
func recorded(_ workload: @escaping Workload, capacity: Int? = nil) -> Workload {
    { n in
        FlightRecorder.global = try FlightRecorder(capacity: capacity ?? n + 16)
        defer { FlightRecorder.global = nil }
        try workload(n)
        // Only a cheap check inside the timed run: the tests check the records themselves.
        guard capacity != nil || FlightRecorder.global?.droppedCount == 0 else {
            throw BenchmarkFailure(description: "the recorder dropped records it had room for")
        }
    }
}

/// The number of nodes in a tree of fan-out 10 whose depth makes it closest to `n` (depth 4: 11,111).
func treeDepth(for n: Int) -> Int {
    var depth = 0
    var nodes = 1
    var level = 1
    while nodes < n {
        level *= 10
        nodes += level
        depth += 1
    }
    return depth
}

let batonTree: Workload = { n in
    let depth = treeDepth(for: n)
    let count = Counter()
    let root = TreeNode<Int, Int>("level0") { level in
        ResultBlockOperation {
            count.add()
            $0.finish(with: level)
        }
    }
    var parent = root
    for level in 1...max(depth, 1) {
        let node = TreeNode<Int, Int>("level\(level)", items: { _ in Array(repeating: level, count: 10) }) { level in
            ResultBlockOperation {
                count.add()
                $0.finish(with: level)
            }
        }
        parent.addChild(node)
        parent = node
    }
    try TreeOperation(root: root, input: 0).run(timeout: .seconds(600))
    let expected = (0...max(depth, 1)).reduce(0) { total, level in total + Int(pow(10, Double(level))) }
    guard count.value == expected else {
        throw BenchmarkFailure(description: "tree ran \(count.value) of \(expected) nodes")
    }
}

/// The same tree shape with GCD alone: each node is a block that dispatches its children.
let dispatchTree: Workload = { n in
    let depth = treeDepth(for: n)
    let group = DispatchGroup()
    let queue = DispatchQueue.global()
    @Sendable func node(_ level: Int) {
        guard level < depth else { return }
        for _ in 0..<10 { queue.async(group: group) { node(level + 1) } }
    }
    queue.async(group: group) { node(0) }
    guard group.wait(timeout: .now() + 600) == .success else { throw BenchmarkFailure(description: "GCD tree timed out") }
}

/// A thread-safe counter for the tree workload.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    var value: Int { lock.withLock { count } }
    func add() { lock.withLock { count += 1 } }
}

// MARK: - Runner

let workloads: [String: Workload] = [
    "baton-independent": independentBaton,
    "BlockOperation": independentBlockOperations,
    "BlockOperation-padded": paddedBlockOperations,
    "BlockOperation-inline-padded": inlinePaddedBlockOperations,
    "DispatchGroup": dispatchGroup,
    "TaskGroup": taskGroup,
    "baton-chain": batonChain,
    "raw-chain-one-call": rawChain(oneByOne: false),
    "BlockOperation-hand-off": handOffBlockOperations,
    "BlockOperation-hand-off-made": madeHandOffBlockOperations(afterFinish: false),
    "BlockOperation-hand-off-after-finish": madeHandOffBlockOperations(afterFinish: true),
    "BlockOperation-hand-off-after-finish-padded": madeHandOffBlockOperations(afterFinish: true, padded: true),
    "raw-chain-one-by-one": rawChain(oneByOne: true),
    "baton-chain-recovering": chain(adapter: .recovering { _, _, _ in .forward }),
    "baton-chain-adapter-operations": chain(
        adapter: .operation { AdapterBlockOperation { _, _, _ in .forward } }),
    "baton-group": batonGroup,
    "baton-sequence": batonSequence,
    "baton-cascade": batonCascade,
    "baton-tree": batonTree,
    "baton-wait": batonWait,
    "BlockOperation-wait": blockOperationWait,
    "GCD-tree": dispatchTree,
    "empty-process": emptyProcess,
    "baton-chain-generated": batonGeneratedChain,
    "baton-group-1MiB-outputs": batonGroupOfLargeOutputs,
    "baton-chain-recorded": recorded(batonChain),
    "baton-group-recorded": recorded(batonGroup),
    "baton-sequence-recorded": recorded(batonSequence),
    "baton-sequence-claimed": sequence(claiming: true),
    "baton-chain-generated-recorded-cap-10000": recorded(batonGeneratedChain, capacity: 10_000),
    "baton-chain-generated-recorded-cap-100000": recorded(batonGeneratedChain, capacity: 100_000),
    "baton-group-claimed": batonGroupClaimed,
    "baton-group-categories-made": batonGroupWithCategoriesMade,
    "baton-independent-claimed": batonIndependentClaimed,
    "baton-group-exclusive": batonGroupContending(limit: 1),
    "baton-group-limit-4": batonGroupContending(limit: 4),
    "baton-queue-exclusive": batonQueueContending,
    "baton-groups-conditioned": batonGroupsInRounds(conditioned: true),
    "baton-groups": batonGroupsInRounds(conditioned: false),
    "baton-serial-queue": batonOnQueue(width: 1),
    "baton-4-wide-queue": batonOnQueue(width: 4),
    "baton-http-get": batonHTTPGets,
    "URLSession-http-get": urlSessionHTTPGets,
    "baton-http-download-MiB": batonHTTPDownload(reportsProgress: false),
    "baton-http-download-progress-MiB": batonHTTPDownload(reportsProgress: true),
    "URLSession-http-download-MiB": urlSessionHTTPDownload,
].merging(contentionWorkloads()) { first, _ in first }

// A child process runs one workload once and prints "seconds peak_mib": each measurement gets a
// fresh heap, so the peak memory is that workload's own.
if CommandLine.arguments.count == 4, CommandLine.arguments[1] == "--child",
    let workload = workloads[CommandLine.arguments[2]], let n = Int(CommandLine.arguments[3])
{
    do {
        let elapsed = try seconds { try workload(n) }
        print(elapsed, PeakMemory.mebibytes())
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("baton-bench: \(error)\n".utf8))
        exit(1)
    }
}

let options = Options(CommandLine.arguments)

func runChild(_ name: String, n: Int) throws -> (seconds: Double, peak: Double) {
    let process = Process()
    process.executableURL = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
    process.arguments = ["--child", name, String(n)]
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let fields = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isWhitespace).compactMap { Double($0) }
    guard process.terminationStatus == 0, fields.count == 2 else {
        throw BenchmarkFailure(description: "\(name) n=\(n) exited with status \(process.terminationStatus)")
    }
    return (fields[0], fields[1])
}

func measure(_ name: String, n: Int) throws -> (seconds: Double, peak: Double) {
    var times = [Double]()
    var peaks = [Double]()
    for _ in 0..<options.repetitions {
        let run = try runChild(name, n: n)
        times.append(run.seconds)
        peaks.append(run.peak)
    }
    return (median(times), median(peaks))
}

struct Row {
    let workload: String
    let n: Int
    let baton: (seconds: Double, peak: Double)
    let baseline: String
    let base: (seconds: Double, peak: Double)
    var ratio: Double { baton.seconds / base.seconds }
}

struct Comparison {
    let workload: String
    let baton: String
    let baselines: [(name: String, limit: Int)]
}

let comparisons = [
    Comparison(
        workload: "independent", baton: "baton-independent",
        baselines: [
            ("BlockOperation", options.independentLimit), ("BlockOperation-padded", options.independentLimit),
            ("BlockOperation-inline-padded", options.independentLimit), ("DispatchGroup", .max), ("TaskGroup", .max),
        ]),
    Comparison(
        workload: "chain", baton: "baton-chain",
        baselines: [
            ("BlockOperation", options.independentLimit), ("BlockOperation-hand-off", options.independentLimit),
            ("BlockOperation-hand-off-made", options.independentLimit),
            ("BlockOperation-hand-off-after-finish", options.independentLimit),
            ("BlockOperation-hand-off-after-finish-padded", options.independentLimit),
            ("raw-chain-one-call", options.rawLimit), ("raw-chain-one-by-one", options.rawLimit),
        ]),
    // The adapter forms: an adapter operation per step against the closure hand-ons.
    Comparison(
        workload: "adapters", baton: "baton-chain-adapter-operations",
        baselines: [("baton-chain", .max), ("baton-chain-recovering", .max)]),
    Comparison(
        workload: "group", baton: "baton-group",
        baselines: [("BlockOperation", options.independentLimit), ("DispatchGroup", .max)]),
    Comparison(
        workload: "sequence", baton: "baton-sequence",
        baselines: [("BlockOperation", options.independentLimit), ("baton-chain", .max)]),
    // The DSL builds the same sequence: it should cost what the sequence costs.
    Comparison(workload: "dsl", baton: "baton-cascade", baselines: [("baton-sequence", .max)]),
    Comparison(
        workload: "tree", baton: "baton-tree",
        baselines: [("GCD-tree", .max), ("BlockOperation", options.independentLimit)]),
    Comparison(workload: "wait", baton: "baton-wait", baselines: [("BlockOperation-wait", .max)]),
    // Recording everything (a global FlightRecorder that drops nothing) against the same work unrecorded.
    Comparison(workload: "rec-chain", baton: "baton-chain-recorded", baselines: [("baton-chain", .max)]),
    Comparison(workload: "rec-group", baton: "baton-group-recorded", baselines: [("baton-group", .max)]),
    Comparison(workload: "rec-sequence", baton: "baton-sequence-recorded", baselines: [("baton-sequence", .max)]),
    // Exclusivity and limits: an uncontended claim on each path, then one contended category against
    // the queue it imitates. Waiters in a plain OperationQueue cost Linux's queue a walk per schedule,
    // so those rows stop at --raw-limit.
    Comparison(
        workload: "excl-uncontended", baton: "baton-group-claimed",
        baselines: [("baton-group", .max), ("baton-group-categories-made", .max)]),
    Comparison(
        workload: "excl-uncontended-queue", baton: "baton-independent-claimed",
        baselines: [("baton-independent", .max)]),
    Comparison(workload: "excl-sequence", baton: "baton-sequence-claimed", baselines: [("baton-sequence", .max)]),
    Comparison(workload: "excl-one", baton: "baton-group-exclusive", baselines: [("baton-serial-queue", .max)]),
    Comparison(
        workload: "excl-one-queue", baton: "baton-queue-exclusive", baselines: [("baton-serial-queue", .max)]),
    Comparison(workload: "excl-limit-4", baton: "baton-group-limit-4", baselines: [("baton-4-wide-queue", .max)]),
    // A condition satisfied at once on every operation, groups of 1,000 in a row, against the same
    // groups without: its cost, and in the peak what finished operations' timeouts keep.
    Comparison(workload: "excl-condition", baton: "baton-groups-conditioned", baselines: [("baton-groups", .max)]),
    // Network, on loopback against the tests' Python server: n small GETs, six in flight on both sides;
    // one download of n MiB (the peak column is the download's memory).
    Comparison(workload: "net-get", baton: "baton-http-get", baselines: [("URLSession-http-get", .max)]),
    Comparison(
        workload: "net-download", baton: "baton-http-download-MiB", baselines: [("URLSession-http-download-MiB", .max)]),
    Comparison(
        workload: "net-download-progress", baton: "baton-http-download-progress-MiB",
        baselines: [("URLSession-http-download-MiB", .max)]),
]

if options.csv {
    print("workload,n,baton_seconds,baseline,baseline_seconds,ratio,peak_rss_mib,operations")
} else {
    print("median of \(options.repetitions); each run in its own process; peak = that process's VmHWM")
}
do {
    let selected = comparisons.filter { comparison in
        options.only == nil || options.only == comparison.workload
            || (options.only == "recording" && comparison.workload.hasPrefix("rec-"))
            || (options.only == "exclusivity" && comparison.workload.hasPrefix("excl-"))
            || (options.only == "network" && comparison.workload.hasPrefix("net-"))
    }
    // The network rows need the server; the children find it through BATON_BENCH_SERVER_PORT.
    let server = try selected.contains { $0.workload.hasPrefix("net-") } ? BenchServer() : nil
    defer { server?.stop() }
    for comparison in selected {
        var sizes: [Int]
        switch comparison.workload {
        case "tree": sizes = [11_111]
        case "net-get": sizes = [1_000]
        case "net-download", "net-download-progress": sizes = [1_024]
        default: sizes = options.sizes
        }
        if options.million && comparison.workload == "chain" { sizes.append(1_000_000) }
        for n in sizes where !comparison.workload.hasSuffix("-queue") || n <= options.rawLimit {
            let baton = try measure(comparison.baton, n: n)
            for baseline in comparison.baselines {
                let base = n <= baseline.limit ? try measure(baseline.name, n: n) : (Double.nan, Double.nan)
                // The tree's BlockOperation baseline has as many operations as the tree has nodes.
                let row = Row(workload: comparison.workload, n: n, baton: baton, baseline: baseline.name, base: base)
                if options.csv {
                    print(
                        "\(row.workload),\(n),\(row.baton.seconds),\(row.baseline),\(row.base.seconds),\(row.ratio),\(row.baton.peak),\(n)"
                    )
                } else {
                    let perOperation = row.baton.seconds / Double(n) * 1e6
                    print(
                        String(
                            format: "%-11@ n=%-8d baton %8.4f s %6.2f µs/op %7.1f MiB | %-20@ %9.4f s %7.1f MiB | ratio %6.2f",
                            row.workload as NSString, n, row.baton.seconds, perOperation, row.baton.peak,
                            row.baseline as NSString, row.base.seconds, row.base.peak, row.ratio))
                }
            }
        }
    }

    // Contention: per-operation cost against the number of threads creating operations (and running
    // them on a queue each, on one shared queue, or not at all), Baton and BlockOperation side by
    // side; n (the largest --n) operations in all, split between the threads.
    if options.only == nil || options.only == "contention" {
        let total = options.sizes.max() ?? 100_000
        for mode in ContentionMode.allCases {
            let workload = "contention-\(mode.rawValue)"
            for threads in contentionThreads {
                let baton = try measure(contentionName(baton: true, mode: mode, threads: threads), n: total)
                let base = try measure(contentionName(baton: false, mode: mode, threads: threads), n: total)
                let row = Row(workload: workload, n: threads, baton: baton, baseline: "BlockOperation", base: base)
                if options.csv {
                    print(
                        "\(workload),\(threads),\(baton.seconds),BlockOperation,\(base.seconds),\(row.ratio),\(baton.peak),\(total)"
                    )
                } else {
                    print(
                        String(
                            format: "%-17@ T=%-3d baton %7.3f µs/op | BlockOperation %7.3f µs/op | ratio %5.2f  (%d operations)",
                            workload as NSString, threads, baton.seconds / Double(total) * 1e6,
                            base.seconds / Double(total) * 1e6, row.ratio, total))
                }
            }
        }
    }

    // Memory: peak resident memory of one process per run (medians), against a process that does nothing.
    if options.only == nil || options.only == "memory" {
        let empty = try measure("empty-process", n: 0)
        var rows: [(label: String, workload: String, n: Int)] = [
            ("group of N children, 1 MiB output each, consumed in childDidFinish", "baton-group-1MiB-outputs", 10_000),
            ("sequence of N steps", "baton-sequence", 100_000),
        ]
        if options.million {
            let generated = "chain of N, made as it goes (addChain(first:next:)), caller keeps no array"
            rows.insert((generated, "baton-chain-generated", 1_000_000), at: 0)
            rows.insert(("chain of N from an array the caller drops", "baton-chain", 1_000_000), at: 1)
            rows.insert(
                (
                    "the generated chain, recorded by a FlightRecorder capped at 10,000",
                    "baton-chain-generated-recorded-cap-10000", 1_000_000
                ), at: 1)
            rows.insert(
                (
                    "the generated chain, recorded by a FlightRecorder capped at 100,000",
                    "baton-chain-generated-recorded-cap-100000", 1_000_000
                ), at: 2)
        }
        for row in rows {
            let run = try measure(row.workload, n: row.n)
            if options.csv {
                print("memory:\(row.workload),\(row.n),\(run.seconds),empty-process,\(empty.seconds),,\(run.peak),\(row.n)")
            } else {
                print(
                    String(
                        format:
                            "memory      n=%-8d peak %7.1f MiB (%7.1f MiB above an empty process's %5.1f) %8.3f s %6.2f µs/op | %@",
                        row.n, run.peak, run.peak - empty.peak, empty.peak, run.seconds, run.seconds / Double(row.n) * 1e6,
                        row.label as NSString))
            }
        }
    }

    // The demo against cksum over the same generated tree, and over its tiny files alone.
    if options.only == nil || options.only == "demo" {
        let smallFiles = 20_000
        let tree = try DemoTree.make(smallFiles: smallFiles, largeFiles: options.demoLargeFiles, largeSize: 200_000_000)
        defer { tree.remove() }
        let whole = try measureDemo(tree: tree.root, concurrency: 4, repetitions: options.repetitions)
        let tiny = try measureDemo(tree: tree.tinyRoot, concurrency: 4, repetitions: options.repetitions)
        let label = "\(smallFiles) files of 1-4 KiB + \(options.demoLargeFiles) of 200 MB"
        if options.csv {
            print(
                "demo,\(smallFiles + options.demoLargeFiles),\(whole.demo),cksum,\(whole.cksum),\(whole.demo / whole.cksum),\(whole.peak),\(smallFiles + options.demoLargeFiles)"
            )
            print("demo-tiny,\(smallFiles),\(tiny.demo),cksum,\(tiny.cksum),\(tiny.demo / tiny.cksum),\(tiny.peak),\(smallFiles)")
        } else {
            print(
                String(
                    format: "demo        %@: baton-demo -j 4 %7.3f s, peak %6.1f MiB | cksum %7.3f s | ratio %5.2f",
                    label as NSString, whole.demo, whole.peak, whole.cksum, whole.demo / whole.cksum))
            print(
                String(
                    format:
                        "demo        %d tiny files alone: baton-demo -j 4 %7.3f s = %5.1f µs per file, peak %6.1f MiB | cksum %7.3f s | ratio %5.2f",
                    smallFiles, tiny.demo, tiny.demo / Double(smallFiles) * 1e6, tiny.peak, tiny.cksum, tiny.demo / tiny.cksum))
        }
    }
} catch {
    FileHandle.standardError.write(Data("baton-bench: \(error)\n".utf8))
    exit(1)
}
