import Baton
import Dispatch
import Foundation

// baton-stress: a seeded, batched stress test of Baton's operation lifecycle.
//
//   swift run -c release baton-stress [--operations N] [--batch N] [--seed S] [--exclude a,b]
//                                     [--batch-timeout S] [--stall S] [--max-stuck N] [--rss-margin MiB]
//
// Every batch mixes plain operations, chains, groups (typed, limited, suspended), sequences (list and
// generator), retries, trees, nested composites and late children, with random failures, timeouts and
// cancellations from other threads. It checks that every operation ends in exactly one outcome, never
// executes after finishing, and is freed; that batches complete; and that resident memory stays flat.

let usage = """
    usage: baton-stress [options]
      --operations N     operations in total, leaves and composites (default 1000000)
      --batch N          operations per batch (default 10000)
      --seed S           seed (default: $BATON_STRESS_SEED, else random); always printed
      --exclude A,B      scenarios to leave out: \(Scenario.allCases.map(\.rawValue).joined(separator: ", "))
      --batch-timeout S  longest wait for a batch, in seconds (default 60)
      --stall S          a batch without any new outcome for S seconds is stuck (default 10)
      --max-stuck N      stop after N stuck batches (default 3; 0 = never stop)
      --rss-margin MiB   allowed RSS growth after the warm-up batch (default 64)
      --help             this text
    """

struct Options {
    var operations = 1_000_000
    var batch = 10_000
    var seed: UInt64?
    var excluded = Set<Scenario>()
    var batchTimeout = 60.0
    var stall = 10.0
    var maxStuck = 3
    var rssMargin = 64.0

    static func parse(_ arguments: [String]) -> Options {
        func fail(_ message: String) -> Never {
            FileHandle.standardError.write(Data("baton-stress: \(message)\n\(usage)\n".utf8))
            exit(2)
        }
        var options = Options()
        var iterator = arguments.dropFirst().makeIterator()
        func value(_ flag: String) -> String {
            guard let value = iterator.next() else { fail("\(flag) needs a value") }
            return value
        }
        func positive(_ flag: String) -> Int {
            guard let number = Int(value(flag).replacingOccurrences(of: "_", with: "")), number > 0 else {
                fail("\(flag) needs a positive integer")
            }
            return number
        }
        func seconds(_ flag: String) -> Double {
            guard let number = Double(value(flag)), number > 0 else { fail("\(flag) needs a positive number") }
            return number
        }
        while let argument = iterator.next() {
            switch argument {
            case "--operations": options.operations = positive(argument)
            case "--batch": options.batch = positive(argument)
            case "--seed":
                guard let seed = UInt64(value(argument)) else { fail("--seed needs an unsigned 64-bit integer") }
                options.seed = seed
            case "--exclude":
                for name in value(argument).split(separator: ",") {
                    guard let scenario = Scenario(rawValue: String(name)) else { fail("unknown scenario \(name)") }
                    options.excluded.insert(scenario)
                }
            case "--batch-timeout": options.batchTimeout = seconds(argument)
            case "--stall": options.stall = seconds(argument)
            case "--max-stuck":
                guard let number = Int(value(argument)), number >= 0 else { fail("--max-stuck needs an integer ≥ 0") }
                options.maxStuck = number
            case "--rss-margin": options.rssMargin = seconds(argument)
            case "--help", "-h":
                say(usage)
                exit(0)
            default:
                fail("unknown argument \(argument)")
            }
        }
        if options.seed == nil, let text = ProcessInfo.processInfo.environment["BATON_STRESS_SEED"] {
            guard let seed = UInt64(text) else { fail("BATON_STRESS_SEED must be an unsigned 64-bit integer") }
            options.seed = seed
        }
        if options.excluded.count == Scenario.allCases.count { fail("every scenario is excluded") }
        return options
    }
}

struct BatchReport {
    var created = 0
    var roots = 0
    var seconds = 0.0
    var stuck = false
    var violations: [Violation: Int] = [:]
    var details: [String: Int] = [:]
    var notes: [String: Int] = [:]
    var survivors = 0
    var abandoned = 0
    /// Seconds spent building, waiting for roots, for the rest, checking state, and for frees.
    var phases: [Double] = []
    var rss: UInt64 = 0
    var unfinished: (roots: [String: Int], all: [String: Int]) = ([:], [:])
    var scenarios: [Scenario: Int] = [:]
}

/// Waits for `group`; gives up when no outcome arrived for `stall` seconds or after `timeout`.
func wait(for group: DispatchGroup, ledger: Ledger, stall: Double, timeout: Double) -> Bool {
    let start = now()
    var lastProgress = ledger.progress
    var lastChange = start
    while true {
        // The main thread runs the work of the queues that run on it (the main-thread scenario) while
        // it waits.
        RunLoop.main.run(until: Date(timeIntervalSinceNow: 0.002))
        if group.wait(timeout: .now()) == .success { return true }
        let time = now()
        let progress = ledger.progress
        if progress != lastProgress {
            lastProgress = progress
            lastChange = time
        }
        if time - lastChange >= stall || time - start >= timeout { return false }
    }
}

func runBatch(seed: UInt64, target: Int, queue: OperationQueue, options: Options, scenarios: [Scenario]) -> BatchReport {
    var report = BatchReport()
    let ledger = Ledger()
    let start = now()
    do {
        let builder = BatchBuilder(seed: seed, ledger: ledger, queue: queue, scenarios: scenarios)
        builder.build(target: target)
        report.phases.append(now() - start)
        report.scenarios = builder.scenarioCounts
        report.roots = ledger.rootCount
        let rootsDone = wait(for: ledger.rootsPending, ledger: ledger, stall: options.stall, timeout: options.batchTimeout)
        report.phases.append(now() - start)
        if rootsDone {
            // Every root is done: what is still without an outcome now is orphaned, not slow.
            let left = max(1, options.batchTimeout - (now() - start))
            _ = wait(for: ledger.allPending, ledger: ledger, stall: min(options.stall, 2), timeout: left)
        } else {
            report.stuck = true
            report.unfinished = ledger.unfinishedReport()
        }
        report.phases.append(now() - start)
        ledger.checkFinishedState(timeout: report.stuck ? 0.5 : 5)
        report.phases.append(now() - start)
        builder.release()
    }
    if report.stuck {
        // Abandoned: whatever hangs keeps its operations; count them, do not wait for them.
        report.abandoned = ledger.waitForSurvivors(timeout: 0.5)
        ledger.count(.stuckBatch)
    } else {
        report.survivors = ledger.waitForSurvivors(timeout: 10)
        ledger.count(.survivor, report.survivors)
    }
    report.phases.append(now() - start)
    ledger.checkCounts(stuck: report.stuck)
    report.created = ledger.created
    report.seconds = now() - start
    report.violations = ledger.violationCounts.filter { $0.value > 0 }
    report.details = ledger.violationDetails
    report.notes = ledger.orderingNotes
    report.rss = ResidentMemory.bytes()
    return report
}

func describe(_ violations: [Violation: Int]) -> String {
    let parts = Violation.allCases.compactMap { kind -> String? in
        guard let count = violations[kind], count > 0 else { return nil }
        return "\(kind.label): \(count)"
    }
    return parts.isEmpty ? "none" : parts.joined(separator: "; ")
}

/// Writes a line at once (unbuffered), so that progress shows while the run goes on.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func mib(_ bytes: UInt64) -> String { String(format: "%.1f MiB", ResidentMemory.mebibytes(bytes)) }

// MARK: - Run

let options = Options.parse(CommandLine.arguments)
let seed = options.seed ?? UInt64.random(in: 0...UInt64.max)
let scenarios = Scenario.allCases.filter { !options.excluded.contains($0) }
let batchCount = (options.operations + options.batch - 1) / options.batch

let diagnostics = Locked([String: Int]())
Diagnostics.handler = { diagnostic in diagnostics.withLock { $0["\(diagnostic.kind)", default: 0] += 1 } }

say("baton-stress: seed \(seed) (replay with --seed \(seed) or BATON_STRESS_SEED=\(seed))")
say(
    "baton-stress: \(options.operations) operations in about \(batchCount) batches of \(options.batch); scenarios: \(scenarios.map(\.rawValue).joined(separator: ", "))"
)

var queue = OperationQueue()
queue.name = "baton-stress shared"
var totalCreated = 0
var totalRoots = 0
var totals = [Violation: Int]()
var passed = 0
var failed = 0
var stuckBatches = 0
var survivorsTotal = 0
var abandonedTotal: Int = 0
var rssSamples = [UInt64]()
var scenarioTotals = [Scenario: Int]()
var detailTotals = [String: Int]()
var noteTotals = [String: Int]()
var firstBadBatch = [String: Int]()
var stoppedEarly = false
let runStart = now()
var batchIndex = 0

while totalCreated < options.operations {
    let target = min(options.batch, options.operations - totalCreated)
    let batchSeed = SplitMix64.batchSeed(run: seed, batch: batchIndex)
    var report = runBatch(seed: batchSeed, target: target, queue: queue, options: options, scenarios: scenarios)
    batchIndex += 1
    totalCreated += report.created
    totalRoots += report.roots
    survivorsTotal += report.survivors
    abandonedTotal += report.abandoned
    rssSamples.append(report.rss)
    for (scenario, count) in report.scenarios { scenarioTotals[scenario, default: 0] += count }

    let isLast =
        totalCreated >= options.operations || (report.stuck && options.maxStuck > 0 && stuckBatches + 1 >= options.maxStuck)
    if isLast, ResidentMemory.isMeasured, rssSamples.count >= 2 {
        // Flat: the last batch may not exceed the batch after warm-up (the second, or the first of two) by the margin.
        let baseline = rssSamples[min(1, rssSamples.count - 2)]
        let margin = UInt64(options.rssMargin * 1_048_576)
        if report.rss > baseline + margin { report.violations[.rssGrowth, default: 0] += 1 }
    }
    for (kind, count) in report.violations { totals[kind, default: 0] += count }
    for (note, count) in report.notes { noteTotals[note, default: 0] += count }
    for (detail, count) in report.details {
        detailTotals[detail, default: 0] += count
        if firstBadBatch[detail] == nil { firstBadBatch[detail] = batchIndex }
    }
    let bad = !report.violations.isEmpty
    if bad { failed += 1 } else { passed += 1 }

    let rate = Double(report.created) / max(report.seconds, 1e-9)
    let marks = report.phases.map { String(format: "%.2f", $0) }.joined(separator: "/")
    say(
        String(
            format:
                "batch %d: %d ops (%d roots) in %.2f s (%.0f ops/s; built/roots/all/checked/freed at %@ s), RSS %@, violations: %@%@",
            batchIndex, report.created, report.roots, report.seconds, rate, marks, mib(report.rss),
            describe(report.violations), report.stuck ? " — STUCK" : ""))
    if report.stuck {
        stuckBatches += 1
        say(
            "  stuck batch \(batchIndex) (seed \(seed), batch seed \(batchSeed)): no new outcome for \(options.stall) s or over \(options.batchTimeout) s; abandoned with \(report.abandoned) live operations"
        )
        for (key, count) in report.unfinished.roots.sorted(by: { $0.key < $1.key }) {
            say("    unfinished root: \(count) × \(key)")
        }
        for (key, count) in report.unfinished.all.sorted(by: { $0.key < $1.key }) { say("    unfinished: \(count) × \(key)") }
        // The stuck operations stay in the old queue; the next batch gets a fresh one.
        queue = OperationQueue()
        queue.name = "baton-stress shared"
        if options.maxStuck > 0 && stuckBatches >= options.maxStuck {
            stoppedEarly = true
            say("  stopping: \(stuckBatches) stuck batch(es) (--max-stuck \(options.maxStuck))")
            break
        }
    }
}

let elapsed = now() - runStart
let first = rssSamples.first ?? 0
let last = rssSamples.last ?? 0
let peak = rssSamples.max() ?? 0
let baseline = rssSamples.count >= 2 ? rssSamples[min(1, rssSamples.count - 2)] : first
let violationTotal = totals.values.reduce(0, +)

say("")
say("== baton-stress summary")
say("seed:               \(seed)")
say(
    "operations run:     \(totalCreated) (leaves and composites; \(totalRoots) roots on the shared queue or chains)\(stoppedEarly ? " — stopped early" : "")"
)
say("batches:            \(batchIndex) (\(stuckBatches) stuck)")
say(String(format: "elapsed:            %.2f s", elapsed))
say(String(format: "operations/s:       %.0f", Double(totalCreated) / max(elapsed, 1e-9)))
say(
    "scenarios:          "
        + Scenario.allCases.compactMap { scenario in
            scenarioTotals[scenario].map { "\(scenario.rawValue) \($0)" }
        }.joined(separator: ", "))
say("violations:         \(violationTotal)")
for kind in Violation.allCases { say("  \(kind.label): \(totals[kind] ?? 0)") }
if !detailTotals.isEmpty {
    say("details (first seen in batch N of seed \(seed)):")
    for (detail, count) in detailTotals.sorted(by: { $0.value > $1.value }).prefix(25) {
        say("  \(count) × \(detail) [batch \(firstBadBatch[detail] ?? 0)]")
    }
}
if !noteTotals.isEmpty {
    say("notes (informational, not violations):")
    for (note, count) in noteTotals.sorted(by: { $0.value > $1.value }).prefix(10) { say("  \(count) × \(note)") }
}
say("survivors:          \(survivorsTotal) (plus \(abandonedTotal) left alive in abandoned stuck batches)")
if ResidentMemory.isMeasured {
    let verdict = last <= baseline + UInt64(options.rssMargin * 1_048_576) ? "flat" : "GREW"
    say(
        "RSS:                first \(mib(first)), after warm-up \(mib(baseline)), last \(mib(last)), peak \(mib(peak)); \(verdict) (margin \(Int(options.rssMargin)) MiB)"
    )
} else {
    say("RSS:                not measured on this platform (0)")
}
let diagnosticCounts = diagnostics.withLock { $0 }
say(
    "diagnostics:        "
        + (diagnosticCounts.isEmpty
            ? "none" : diagnosticCounts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        + " (informational)")
say("baton-stress: \(passed) passed, \(failed) failed")
exit(violationTotal == 0 ? 0 : 1)
