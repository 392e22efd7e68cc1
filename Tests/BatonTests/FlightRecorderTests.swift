import Dispatch
import Foundation
import XCTest

@testable import Baton

final class FlightRecorderTests: BatonTestCase {
    // MARK: - Helpers

    /// The trace's events, parsed.
    private func traceEvents(
        _ recorder: FlightRecorder, file: StaticString = #filePath, line: UInt = #line
    ) throws
        -> [[String: Any]]
    {
        let data = Data(recorder.export(.chromeTrace).utf8)
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any], file: file, line: line)
        return try XCTUnwrap(object["traceEvents"] as? [[String: Any]], file: file, line: line)
    }

    private struct Span {
        let id: Int
        let start: Double
        let end: Double
        let enqueued: Double?
    }

    /// The complete spans of the trace, by record id (each id must appear once).
    private func spans(_ events: [[String: Any]], file: StaticString = #filePath, line: UInt = #line) -> [Int: Span] {
        var spans = [Int: Span]()
        for event in events where event["ph"] as? String == "X" {
            let args = event["args"] as? [String: Any] ?? [:]
            guard let id = args["id"] as? Int, let ts = event["ts"] as? Double, let dur = event["dur"] as? Double else {
                XCTFail("a span without id, ts or dur: \(event)", file: file, line: line)
                continue
            }
            XCTAssertNil(spans[id], "two spans for record \(id)", file: file, line: line)
            spans[id] = Span(id: id, start: ts, end: ts + dur, enqueued: args["enqueued_us"] as? Double)
        }
        return spans
    }

    /// The node and edge lines of a DOT graph.
    private func dotCounts(_ dot: String) -> (nodes: Int, edges: Int) {
        let lines = dot.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        let nodes = lines.filter { $0.range(of: #"^n\d+ \["#, options: .regularExpression) != nil }.count
        let edges = lines.filter { $0.contains(" -> ") }.count
        return (nodes, edges)
    }

    // MARK: - Chrome trace

    func testTheTraceHasOneCompleteSpanPerOperationThatRanAndCompositesEncloseTheirChildren() throws {
        let recorder = FlightRecorder()
        let inner = SequenceOperation<Int>(operations: [ImmediateOperation(.success(1)), ImmediateOperation(.success(2))])
        let failing = ImmediateOperation(.failure(TestError(code: 7)), name: "failing")
        let group = GroupOperation(operations: [ImmediateOperation(.success(3)), inner, failing, JitterOperation(4)])
        recorder.attach(to: group)
        XCTAssertThrowsError(try group.run(timeout: .seconds(testTimeout)))

        let records = recorder.records
        XCTAssertEqual(records.count, 7)   // group, 3 leaves, the sequence and its 2 steps
        XCTAssertTrue(records.allSatisfy { $0.status.isFinished && $0.startedAt != nil })
        let spans = self.spans(try traceEvents(recorder))
        XCTAssertEqual(Set(spans.keys), Set(records.map(\.id)))
        for record in records {
            let span = try XCTUnwrap(spans[record.id])
            XCTAssertLessThanOrEqual(span.start, span.end)
            if let enqueued = span.enqueued { XCTAssertLessThanOrEqual(enqueued, span.start, "\(record.label)") }
            if let parent = record.parentID {
                let enclosing = try XCTUnwrap(spans[parent])
                XCTAssertLessThanOrEqual(enclosing.start, span.start, "\(record.label) starts before its parent")
                XCTAssertGreaterThanOrEqual(enclosing.end, span.end, "\(record.label) ends after its parent")
            }
        }
        let failed = try XCTUnwrap(records.first { $0.name == "failing" })
        guard case .failed(let description) = failed.status else { return XCTFail("\(failed.status)") }
        XCTAssertTrue(description.contains("7"), description)
        XCTAssertEqual(failed.parentID, records.first { $0.kind == .composite && $0.typeName == "GroupOperation" }?.id)
        XCTAssertEqual(failed.position, 2)
    }

    func testAChainIsASpanWithItsOperationsAtTheirPositionsLinkedByAdapters() throws {
        let recorder = FlightRecorder()
        let operations: [Operation] = [
            ImmediateOperation(.success(1), name: "a"), BlockOperation {}, ImmediateOperation(.success(3), name: "c"),
        ]
        recorder.attach(to: operations)
        let handle = try OperationQueue().addChain(operations)
        try handle.wait(timeout: .seconds(testTimeout))

        let records = recorder.records
        let chain = try XCTUnwrap(records.first { $0.kind == .chain })
        XCTAssertEqual(chain.status, .succeeded)
        let stages = records.filter { $0.parentID == chain.id }.sorted { $0.position! < $1.position! }
        XCTAssertEqual(stages.map(\.position), [0, 1, 2])
        XCTAssertEqual(stages.map(\.typeName), ["ImmediateOperation", "BlockOperation", "ImmediateOperation"])
        XCTAssertEqual(stages.map(\.predecessorID), [nil, stages[0].id, stages[1].id])
        XCTAssertEqual(stages.map(\.link), [nil, .adapter, .adapter])

        let spans = self.spans(try traceEvents(recorder))
        let chainSpan = try XCTUnwrap(spans[chain.id])
        for stage in stages {
            let span = try XCTUnwrap(spans[stage.id], "no span for \(stage.label)")
            XCTAssertTrue(chainSpan.start <= span.start && span.end <= chainSpan.end, "\(stage.label)")
        }
        let counts = dotCounts(recorder.export(.graphviz))
        XCTAssertEqual(counts.nodes, 3)   // the chain is a cluster, not a node
        XCTAssertEqual(counts.edges, 2)
    }

    func testAChainOrSequenceEndingInAFoundationOperationFinishesAfterItsRecord() throws {
        for _ in 0..<20 {
            let recorder = FlightRecorder()
            let operations: [Operation] = [ImmediateOperation(.success(1)), BlockOperation {}]
            recorder.attach(to: operations)
            try OperationQueue().addChain(operations).wait(timeout: .seconds(testTimeout))
            let steps: [Operation] = [ImmediateOperation(.success(1)), BlockOperation {}]
            let sequence = SequenceOperation<Int>(operations: steps)
            recorder.attach(to: sequence)
            XCTAssertThrowsError(try sequence.run(timeout: .seconds(testTimeout)))   // a Foundation step has no output
            // Every record is finished when the waits return, and each parent finished after its children.
            let records = recorder.records
            XCTAssertEqual(records.count, 3 + 3)
            let byID = Dictionary(uniqueKeysWithValues: records.map { ($0.id, $0) })
            for record in records {
                XCTAssertTrue(record.status.isFinished, "\(record.label) \(record.status)")
                if let parent = record.parentID.flatMap({ byID[$0] }) {
                    XCTAssertLessThanOrEqual(record.finishedAt!, parent.finishedAt!, "\(record.label)")
                }
            }
        }
    }

    func testSpansOnOneTrackNeverOverlapWithoutNesting() throws {
        let recorder = FlightRecorder()
        let group = GroupOperation(operations: (0..<64).map { JitterOperation($0) }, maxConcurrentOperationCount: 2)
        recorder.attach(to: group)
        try group.run(timeout: .seconds(testTimeout))
        var byTrack = [Int: [(Double, Double)]]()
        for event in try traceEvents(recorder) where event["ph"] as? String == "X" {
            let (start, duration) = (event["ts"] as! Double, event["dur"] as! Double)
            byTrack[event["tid"] as! Int, default: []].append((start, start + duration))
        }
        for (track, spans) in byTrack {
            for (index, first) in spans.enumerated() {
                for second in spans[(index + 1)...] {
                    let disjoint = first.1 <= second.0 || second.1 <= first.0
                    let nested = (first.0 <= second.0 && second.1 <= first.1) || (second.0 <= first.0 && first.1 <= second.1)
                    XCTAssertTrue(disjoint || nested, "track \(track): \(first) and \(second) overlap")
                }
            }
        }
    }

    func testNamesAreEscapedInEveryExport() throws {
        let recorder = FlightRecorder()
        let odd = ImmediateOperation(.success(1), name: "q\"\u{301} back\\slash\nline\r\u{0}nul <&>")
        recorder.attach(to: odd)
        try odd.run(timeout: .seconds(testTimeout))
        XCTAssertNoThrow(try traceEvents(recorder))
        let dot = recorder.export(.graphviz)
        XCTAssertTrue(dot.contains(#"q\"\#u{301} back\\slash\nline"#), dot)
        XCTAssertFalse(dot.contains("\u{0}") || dot.contains("\r"), dot)
        let mermaid = recorder.export(.mermaid)
        XCTAssertTrue(mermaid.contains("q#quot;\u{301} back\\slash line"), mermaid)
        XCTAssertFalse(mermaid.contains("\r"), mermaid)
    }

    // MARK: - Graphs

    func testTheGraphHasOneNodePerOperationAndOneEdgePerDependencyOrLink() throws {
        let recorder = FlightRecorder()
        let queue = OperationQueue()
        recorder.attach(to: queue)
        defer { recorder.detach(from: queue) }
        let first = ImmediateOperation(.success(1), name: "first")
        let second = ImmediateOperation(.success(2), name: "second")
        let third = ImmediateOperation(.success(3), name: "third")
        second.addDependency(first)
        third.addDependency(first)
        third.addDependency(second)
        let retry = RetryOperation<Int>(maximumAttempts: 3) { attempt in
            ImmediateOperation(attempt < 3 ? .failure(TestError(code: attempt)) : .success(attempt))
        }
        queue.addOperations([first, second, third, retry], waitUntilFinished: false)
        for operation in [first, second, third, retry] as [Operation] { waitFinished(operation) }

        let records = recorder.records
        XCTAssertEqual(records.count, 7)   // three, the retry and its three attempts
        let byName = Dictionary(uniqueKeysWithValues: records.compactMap { record in record.name.map { ($0, record) } })
        XCTAssertEqual(byName["third"]?.dependencyIDs.sorted(), [byName["first"]!.id, byName["second"]!.id].sorted())
        let attempts = records.filter { $0.attempt != nil }.sorted { $0.attempt! < $1.attempt! }
        XCTAssertEqual(attempts.map(\.attempt), [1, 2, 3])
        XCTAssertEqual(attempts.map(\.link), [nil, .retry, .retry])
        XCTAssertEqual(attempts.map(\.status), [.failed("TestError(code: 1)"), .failed("TestError(code: 2)"), .succeeded])

        let dot = recorder.export(.graphviz)
        let counts = dotCounts(dot)
        XCTAssertEqual(counts.nodes, 7, dot)
        XCTAssertEqual(counts.edges, 3 + 2, dot)   // three dependencies, two retry links
        XCTAssertTrue(dot.contains("subgraph cluster_"), dot)
        let mermaid = recorder.export(.mermaid)
        XCTAssertEqual(mermaid.split(separator: "\n").filter { $0.contains("-->") || $0.contains("-.->") }.count, 5)
    }

    // MARK: - Text tree

    func testTheTextTreeShowsTheStatesOfACompositeCaughtMidRun() throws {
        let recorder = FlightRecorder()
        let manual = ManualOperation(name: "manual")
        let group = GroupOperation(
            operations: [
                ImmediateOperation(.success(1), name: "done"), manual, ImmediateOperation(.success(3), name: "waiting"),
            ],
            maxConcurrentOperationCount: 1)
        group.name = "group"
        recorder.attach(to: group)
        let queue = OperationQueue()
        queue.addOperation(group)
        manual.started.wait()

        XCTAssertEqual(
            recorder.textTree(of: group),
            """
            GroupOperation "group" executing
            ├─ ImmediateOperation "done" finished(succeeded)
            ├─ ManualOperation "manual" executing
            └─ ImmediateOperation "waiting" pending

            """)
        manual.finish(with: 2)
        waitFinished(group)
        XCTAssertEqual(
            recorder.export(.textTree),
            """
            GroupOperation "group" finished(succeeded)
            ├─ ImmediateOperation "done" finished(succeeded)
            ├─ ManualOperation "manual" finished(succeeded)
            └─ ImmediateOperation "waiting" finished(succeeded)

            """)
    }

    func testTheTextTreeOfAChainMidRunShowsWhatItHandedOnSoFar() throws {
        let recorder = FlightRecorder()
        let manual = ManualOperation(name: "manual", finishesOnCancel: true)
        let operations: [Operation] = [ImmediateOperation(.success(1), name: "first"), manual, ImmediateOperation(.success(3))]
        recorder.attach(to: operations)
        let handle = try OperationQueue().addChain(operations)
        manual.started.wait()
        XCTAssertEqual(
            recorder.textTree(of: handle),
            """
            Chain executing
            ├─ ImmediateOperation "first" finished(succeeded)
            └─ ManualOperation "manual" executing

            """)
        handle.cancel()
        XCTAssertThrowsError(try handle.wait(timeout: .seconds(testTimeout)))
        XCTAssertEqual(
            recorder.textTree(of: handle),
            """
            Chain finished(cancelled)
            ├─ ImmediateOperation "first" finished(succeeded)
            ├─ ManualOperation "manual" finished(cancelled)
            └─ ImmediateOperation finished(cancelled)

            """)
    }

    // MARK: - Attaching

    func testAGlobalRecorderRecordsOperationsCreatedWhileItIsSet() throws {
        let recorder = FlightRecorder()
        FlightRecorder.global = recorder
        let recorded = ImmediateOperation(.success(1), name: "recorded")
        FlightRecorder.global = nil
        let unrecorded = ImmediateOperation(.success(2), name: "unrecorded")
        try recorded.run(timeout: .seconds(testTimeout))
        try unrecorded.run(timeout: .seconds(testTimeout))
        XCTAssertEqual(recorder.records.map(\.name), ["recorded"])
        XCTAssertEqual(recorder.records.first?.status, .succeeded)
        XCTAssertNil(FlightRecorder.global)
    }

    /// The global recorder is read without a lock at creation: operations created on many threads
    /// while another thread keeps changing it (to two kept recorders, to nil, and to recorders freed
    /// at once) each record into at most one recorder, whole, and their serial numbers never repeat.
    func testTheGlobalRecorderChangingWhileOperationsAreCreatedOnManyThreads() throws {
        let kept = [FlightRecorder(), FlightRecorder()]
        let creators = 4
        let perCreator = 400
        let made = Locked([ImmediateOperation]())
        let creating = Locked(creators)
        // The changer stops only once every creator is done.
        let changed = keepChanging(while: creating) { round in
            switch round % 4 {
            case 0, 1: FlightRecorder.global = kept[round % 2]
            case 2: FlightRecorder.global = nil
            default: FlightRecorder.global = FlightRecorder()   // freed by the next change
            }
        } finally: {
            FlightRecorder.global = nil
        }
        DispatchQueue.concurrentPerform(iterations: creators) { thread in
            var mine = [ImmediateOperation]()
            for index in 0..<perCreator { mine.append(ImmediateOperation(.success(index), name: "\(thread)-\(index)")) }
            made.mutate { $0 += mine }
            creating.mutate { $0 -= 1 }
        }
        XCTAssertEqual(changed.wait(timeout: .now() + testTimeout), .success)
        let operations = made.value
        let queue = OperationQueue()
        queue.addOperations(operations, waitUntilFinished: false)
        XCTAssertTrue(eventually { operations.allSatisfy(\.isFinished) })
        XCTAssertEqual(Set(operations.map(\.serialNumber)).count, creators * perCreator, "a serial number repeated")
        let names = kept.flatMap { $0.records.map { $0.name ?? "?" } }
        XCTAssertEqual(Set(names).count, names.count, "an operation recorded twice")
        XCTAssertTrue(Set(names).isSubset(of: Set(operations.compactMap(\.name))))
        XCTAssertTrue(kept.allSatisfy { $0.records.allSatisfy { $0.status == .succeeded } })
        XCTAssertNil(FlightRecorder.global)
    }

    func testAFoundationChildIsRecordedWithoutAStart() throws {
        let recorder = FlightRecorder()
        let block = BlockOperation {}
        block.name = "block"
        let group = GroupOperation(operations: [block])
        recorder.attach(to: group)
        try group.run(timeout: .seconds(testTimeout))
        let record = try XCTUnwrap(recorder.records.first { $0.name == "block" })
        XCTAssertFalse(record.observesStart)
        XCTAssertEqual(record.status, .succeeded)
        XCTAssertNotNil(record.enqueuedAt)
        XCTAssertNotNil(record.finishedAt)
        XCTAssertEqual(self.spans(try traceEvents(recorder)).count, 2)
    }

    func testAnOperationSkippedAtStartIsAnInstantEvent() throws {
        let recorder = FlightRecorder()
        let skipped = ImmediateOperation(.success(1), name: "skipped")
        recorder.attach(to: skipped)
        skipped.cancel()
        XCTAssertThrowsError(try skipped.run(timeout: .seconds(testTimeout)))
        XCTAssertEqual(recorder.records.first?.status, .cancelled)
        XCTAssertNil(recorder.records.first?.startedAt)
        let events = try traceEvents(recorder).filter { ($0["args"] as? [String: Any])?["id"] != nil }
        XCTAssertEqual(events.map { $0["ph"] as? String }, ["i"])
    }

    // MARK: - Bounds

    func testACappedRecorderKeepsTheMostRecentRecordsAndCountsTheDropped() throws {
        let recorder = try FlightRecorder(capacity: 10)
        let group = GroupOperation(operations: (0..<100).map { ImmediateOperation(.success($0)) })
        recorder.attach(to: group)
        try group.run(timeout: .seconds(testTimeout))
        let records = recorder.records
        XCTAssertEqual(records.count, 10)
        XCTAssertEqual(recorder.droppedCount, 91)
        XCTAssertEqual(records.map(\.id), Array(92...101))
        // Their parent was dropped: they are top-level in every export.
        XCTAssertEqual(recorder.export(.textTree).split(separator: "\n").count, 10)
        XCTAssertEqual(self.spans(try traceEvents(recorder)).count, 10)
    }

    func testACapacityBelowOneIsATypedError() {
        XCTAssertThrowsError(try FlightRecorder(capacity: 0)) { error in
            XCTAssertEqual(error as? FlightRecorder.CapacityError, FlightRecorder.CapacityError(capacity: 0))
        }
    }

    func testRecordingFromManyThreadsAtOnceKeepsEveryRecordWhole() throws {
        let recorder = FlightRecorder()
        let groups = (0..<8).map { _ in GroupOperation(operations: (0..<50).map { JitterOperation($0) }) }
        for group in groups { recorder.attach(to: group) }
        DispatchQueue.concurrentPerform(iterations: groups.count) { index in
            do { try groups[index].run(timeout: .seconds(testTimeout)) } catch { XCTFail("\(error)") }
        }
        let records = recorder.records
        XCTAssertEqual(records.count, 8 * 51)
        XCTAssertEqual(Set(records.map(\.id)).count, records.count)
        XCTAssertTrue(records.allSatisfy { $0.status == .succeeded && $0.startedAt != nil && $0.thread != nil })
        let groupIDs = Set(records.filter { $0.kind == .composite }.map(\.id))
        XCTAssertEqual(groupIDs.count, 8)
        XCTAssertTrue(records.filter { $0.kind == .operation }.allSatisfy { groupIDs.contains($0.parentID ?? -1) })
    }
    // MARK: - Kinds and threads, found without a lookup

    /// Each of Baton's composites (and a subclass of one) records as a composite; a plain operation,
    /// a subclass of it, and a Foundation operation in a group record as operations.
    func testEveryCompositeRecordsAsACompositeAndEveryOtherOperationAsAnOperation() throws {
        final class Subgroup: GroupOperation, @unchecked Sendable {}
        final class Doubling: TransformOperation<Int, Int>, @unchecked Sendable {
            override func execute() { finish(with: input! * 2) }
        }
        let recorder = FlightRecorder()
        let leaf = { (name: String) -> AsyncBlockOperation in
            let operation = AsyncBlockOperation { $0.finish() }
            operation.name = name
            return operation
        }
        let tree = TreeOperation(
            root: TreeNode<Int, Int>("root", items: { _ in [1] }) { value in ResultBlockOperation { $0.finish(with: value) } },
            input: 0)
        let composites: [(String, AsyncOperation)] = [
            ("GroupOperation", GroupOperation(operations: [leaf("g")])),
            ("Subgroup", Subgroup(operations: [leaf("s")])),
            ("SequenceOperation", SequenceOperation<Void>(operations: [leaf("q")])),
            ("ResultGroupOperation", ResultGroupOperation<Int>(operations: [ResultBlockOperation { $0.finish(with: 1) }])),
            (
                "RetryOperation",
                RetryOperation<Void>(maximumAttempts: 1) { _ in ResultBlockOperation<Void> { $0.finish(with: ()) } }
            ),
            ("TreeOperation", tree),
            ("Parallel", Parallel(input: 1) { Doubling() }),
        ]
        for (label, composite) in composites {
            composite.name = label
            recorder.attach(to: composite)
            try composite.run(timeout: .seconds(testTimeout))
        }
        let plain = leaf("plain")
        recorder.attach(to: plain)
        try plain.run(timeout: .seconds(testTimeout))

        let records = recorder.records
        for (label, _) in composites {
            let record = try XCTUnwrap(records.first { $0.name == label }, label)
            XCTAssertEqual(record.kind, .composite, label)
            XCTAssertTrue(records.contains { $0.parentID == record.id }, "\(label) records its children")
            for child in records where child.parentID == record.id {
                XCTAssertEqual(child.kind, .operation, "\(label)'s child \(child.label)")
            }
        }
        XCTAssertEqual(records.first { $0.name == "plain" }?.kind, .operation)
    }

    /// Threads are numbered in the order they first start an operation, one number each, also when
    /// more threads take turns than the recorder keeps at hand (8): each keeps its number.
    func testEachThreadKeepsOneNumberWhenManyTakeTurns() throws {
        let recorder = FlightRecorder()
        let threads = 12
        let rounds = 5
        let operations = (0..<threads).map { _ in (0..<rounds).map { _ in AsyncBlockOperation { $0.finish() } } }
        for row in operations { for operation in row { recorder.attach(to: operation) } }
        // Twelve threads alive throughout, each starting one operation per round, the rounds one after
        // another: every round brings back threads the recorder has not seen recently.
        let go = (0..<threads).map { _ in DispatchSemaphore(value: 0) }
        let started = DispatchSemaphore(value: 0)
        for thread in 0..<threads {
            Thread {
                for round in 0..<rounds {
                    guard go[thread].wait(timeout: .now() + testTimeout) == .success else { return }
                    operations[thread][round].start()
                    started.signal()
                }
            }.start()
        }
        for round in 0..<rounds {
            for thread in (0..<threads).shuffled() {
                go[thread].signal()
                XCTAssertEqual(started.wait(timeout: .now() + testTimeout), .success, "round \(round)")
            }
        }
        let records = Dictionary(uniqueKeysWithValues: recorder.records.map { ($0.id, $0) })
        var numbers = [Int]()
        for (thread, row) in operations.enumerated() {
            let seen = Set(row.map { records[$0.recording!.id]?.thread })
            XCTAssertEqual(seen.count, 1, "thread \(thread) had numbers \(seen)")
            numbers.append(try XCTUnwrap(seen.first ?? nil))
        }
        XCTAssertEqual(Set(numbers), Set(1...threads), "one number a thread, none given to two")
    }
}
