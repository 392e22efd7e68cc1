import Baton
import Dispatch
import Foundation

// Workloads whose figure is the peak memory (each runs in a process of its own).

/// Nothing at all: the peak memory of the process itself, the baseline of the memory rows.
func emptyProcess(_ n: Int) throws {}

/// A chain whose operations are made as it goes (`addChain(first:next:)`): the caller keeps no array,
/// and the handle holds only the operation running. Each step adds one; the last output is `n - 1`.
func batonGeneratedChain(_ n: Int) throws {
    let last = max(n, 2) - 1
    let handle = try OperationQueue().addChain(first: ResultBlockOperation<Int> { $0.finish(with: 0) }) { previous in
        guard let value = (previous as? ResultOperation<Int>)?.output, value < last else { return nil }
        return TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! + 1) }
    }
    let output = try handle.wait(timeout: .seconds(3_600))
    guard let value = output as? Int, value == last else {
        throw BenchmarkFailure(description: "generated chain of \(n) produced \(output)")
    }
}

/// A group of `n` children that each produce a 1 MiB output, consumed (summed) in `childDidFinish`.
func batonGroupOfLargeOutputs(_ n: Int) throws {
    let group = SummingGroup()
    for _ in 0..<n {
        try group.addChild(ResultBlockOperation<[UInt8]> { $0.finish(with: [UInt8](repeating: 1, count: 1 << 20)) })
    }
    try group.run(timeout: .seconds(600))
    guard group.total == n << 20 else { throw BenchmarkFailure(description: "group consumed \(group.total) bytes") }
}

/// Adds up the sizes of its children's outputs as they finish.
final class SummingGroup: GroupOperation, @unchecked Sendable {
    private let lock = NSLock()
    private var sum = 0
    var total: Int { lock.withLock { sum } }
    override func childDidFinish(_ child: Operation) {
        let size = (child as? ResultOperation<[UInt8]>)?.output?.count ?? 0
        lock.withLock { sum += size }
    }
}

// MARK: - The demo against cksum

/// A generated tree for the demo: `smallFiles` files of 1–4 KiB in directories of 100, plus
/// `largeFiles` files of `largeSize` bytes. Written once per bench run and removed at the end.
struct DemoTree {
    let root: URL
    let tinyRoot: URL

    static func make(smallFiles: Int, largeFiles: Int, largeSize: Int) throws -> DemoTree {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("baton-bench-demo-\(getpid())")
        try? FileManager.default.removeItem(at: root)
        let tiny = root.appendingPathComponent("tiny")
        var generator = SplitMix(seed: 20_261_123)
        for index in 0..<smallFiles {
            let directory = tiny.appendingPathComponent("d\(index / 100)")
            if index % 100 == 0 { try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true) }
            let size = 1_024 + Int(generator.next() % 3_072)
            let bytes = (0..<size).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            try Data(bytes).write(to: directory.appendingPathComponent("f\(index).bin"))
        }
        let large = root.appendingPathComponent("large")
        try FileManager.default.createDirectory(at: large, withIntermediateDirectories: true)
        var block = [UInt8](repeating: 0, count: 1 << 20)
        for index in 0..<largeFiles {
            _ = FileManager.default.createFile(atPath: large.appendingPathComponent("l\(index).bin").path, contents: nil)
            let handle = try FileHandle(forWritingTo: large.appendingPathComponent("l\(index).bin"))
            var written = 0
            while written < largeSize {
                for offset in stride(from: 0, to: block.count, by: 8) {
                    block[offset] = UInt8(truncatingIfNeeded: generator.next())
                }
                let count = min(block.count, largeSize - written)
                try handle.write(contentsOf: block[0..<count])
                written += count
            }
            try handle.close()
        }
        return DemoTree(root: root, tinyRoot: tiny)
    }

    func remove() { try? FileManager.default.removeItem(at: root) }
}

/// A small deterministic generator for the tree's contents.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var value = state
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}

/// One run of a command: its wall time, and the peak memory it printed (`peak memory: N MiB`), if any.
func timeCommand(_ executable: String, _ arguments: [String]) throws -> (seconds: Double, peak: Double) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle.nullDevice
    let start = DispatchTime.now().uptimeNanoseconds
    try process.run()
    let output = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    guard process.terminationStatus == 0 else {
        throw BenchmarkFailure(
            description: "\(executable) \(arguments.joined(separator: " ")) exited with \(process.terminationStatus)")
    }
    let peak =
        String(decoding: output, as: UTF8.self).split(separator: "\n")
        .first { $0.contains("peak memory:") }
        .flatMap { line in line.split(separator: " ").compactMap { Double($0) }.first } ?? .nan
    return (elapsed, peak)
}

/// The demo and `cksum` over the same files, alternately, `repetitions` times each: medians.
func measureDemo(tree: URL, concurrency: Int, repetitions: Int) throws -> (demo: Double, peak: Double, cksum: Double) {
    let demo = (Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0]))
        .deletingLastPathComponent().appendingPathComponent("baton-demo").path
    guard FileManager.default.isExecutableFile(atPath: demo) else {
        throw BenchmarkFailure(description: "no baton-demo next to baton-bench (build both: swift build -c release)")
    }
    // Every file, as the demo sees them (no hidden entries), in one cksum invocation batch by xargs.
    let script = "find '\(tree.path)' -name '.*' -prune -o -type f -print0 | xargs -0 cksum > /dev/null"
    _ = try timeCommand("/bin/sh", ["-c", script])   // warm the cache for both
    var demoTimes = [Double]()
    var peaks = [Double]()
    var cksumTimes = [Double]()
    for _ in 0..<repetitions {
        let run = try timeCommand(demo, [tree.path, "--concurrency", String(concurrency)])
        demoTimes.append(run.seconds)
        peaks.append(run.peak)
        cksumTimes.append(try timeCommand("/bin/sh", ["-c", script]).seconds)
    }
    return (median(demoTimes), median(peaks), median(cksumTimes))
}
