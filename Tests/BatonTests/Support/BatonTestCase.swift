import Dispatch
import Foundation
import XCTest

/// The base of every test class: it installs a watchdog that ends the test process, naming the test,
/// when one test runs longer than `Watchdog.limit`. Every wait in the suite is bounded that way, even
/// a Foundation `waitUntilFinished()` in a documentation example.
class BatonTestCase: XCTestCase {
    /// The diagnostics Baton reports during each test (the default handler would print them).
    var diagnostics: DiagnosticsRecorder!

    override class func setUp() {
        super.setUp()
        Watchdog.installOnce()
    }

    override func setUp() {
        super.setUp()
        diagnostics = DiagnosticsRecorder()
    }

    override func tearDown() {
        diagnostics.stop()
        super.tearDown()
    }
}

final class Watchdog: NSObject, XCTestObservation, @unchecked Sendable {
    /// Generous, because it is a hang guard and never a speed check: the slowest tests (10⁵ nested
    /// composites) take 5 s in a debug build, about 40 s under ThreadSanitizer on an idle 2-core
    /// machine, and two or three times that on a busy one.
    static let limit: Double = ProcessInfo.processInfo.environment["BATON_TEST_WATCHDOG_SECONDS"].flatMap(Double.init) ?? 420

    private static let shared = Watchdog()
    private static let installed = Locked(false)
    private let pending = Locked<DispatchWorkItem?>(nil)

    static func installOnce() {
        let first = installed.mutate { installed -> Bool in
            defer { installed = true }
            return !installed
        }
        if first { XCTestObservationCenter.shared.addTestObserver(shared) }
    }

    func testCaseWillStart(_ testCase: XCTestCase) {
        let name = testCase.name
        let alarm = DispatchWorkItem {
            FileHandle.standardError.write(
                Data("\nwatchdog: \(name) ran longer than \(Watchdog.limit) s; a wait is stuck. Exiting.\n".utf8))
            exit(3)
        }
        pending.mutate { $0 = alarm }
        DispatchQueue.global().asyncAfter(deadline: .now() + Watchdog.limit, execute: alarm)
    }

    func testCaseDidFinish(_ testCase: XCTestCase) {
        pending.mutate { alarm in
            alarm?.cancel()
            alarm = nil
        }
        if Self.probesPool { Self.probePool(after: testCase.name) }
    }

    /// `BATON_TEST_POOL_PROBE=1`: after each test, how long a block sent to `DispatchQueue.global()`
    /// waits to run, printed when it is more than half a second. On Linux the global pool adds about
    /// one thread a second while its workers are blocked (Docs/Concurrency.md), so a test that leaves
    /// blocks waiting on global workers slows every later test's queues; this names it.
    private static let probesPool = ProcessInfo.processInfo.environment["BATON_TEST_POOL_PROBE"] == "1"

    private static func probePool(after name: String) {
        let ran = DispatchSemaphore(value: 0)
        let sent = DispatchTime.now()
        DispatchQueue.global().async { ran.signal() }
        let answered = ran.wait(timeout: .now() + 10) == .success
        let waited = Double(DispatchTime.now().uptimeNanoseconds - sent.uptimeNanoseconds) / 1e9
        if !answered || waited > 0.5 {
            FileHandle.standardError.write(
                Data("pool probe: after \(name), a global block waited \(answered ? "\(waited) s" : "over 10 s")\n".utf8))
        }
    }
}

/// Waits (bounded) until `operation` has finished, at once if it already has: a Foundation
/// operation's completion block, set after it finished, never runs.
func waitFinished(_ operation: Operation, timeout: Double = testTimeout, file: StaticString = #filePath, line: UInt = #line) {
    let done = Gate()
    operation.observeCompletionOnceForTests { done.open() }
    done.wait(timeout: timeout, file: file, line: line)
}
