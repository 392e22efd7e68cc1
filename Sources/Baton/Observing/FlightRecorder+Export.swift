import Foundation

extension FlightRecorder {
    /// The pictures a recorder makes of what it recorded.
    public enum ExportFormat: Sendable, CaseIterable {
        /// Chrome's Trace Event format (JSON): open it in Perfetto (ui.perfetto.dev) or
        /// `chrome://tracing` to see the run as a timeline. Each operation that ran is a complete span
        /// on the track of the thread it started on; composites and chains are spans on tracks of their
        /// own that enclose their children's; an operation skipped at start is an instant event. The
        /// colour (`cname`) and the `args` say how it ended.
        case chromeTrace
        /// A Graphviz graph (render it with `dot -Tsvg`): one node per operation, coloured by outcome
        /// and labelled with its duration; composites and chains as clusters; dependency edges solid,
        /// chain adapters, sequence steps, retries and tree links dashed and labelled.
        case graphviz
        /// The same graph as ``graphviz`` in Mermaid's `flowchart` syntax, which Markdown renderers
        /// (GitHub among them) draw.
        case mermaid
        /// An indented tree, one line per operation with its state: `pending`, `executing` or
        /// `finished(outcome)`; a pending operation waiting at its gate says what for (`pending,
        /// waiting for 'database', held by nightly`). For a log or a debugger when something
        /// seems stuck.
        case textTree
    }

    /// What the recorder holds, in `format`.
    ///
    /// - Parameter format: The format.
    /// - Returns: The export, as text.
    public func export(_ format: ExportFormat) -> String {
        let structure = RecordStructure(records, exportedAt: now())
        switch format {
        case .chromeTrace: return structure.chromeTrace()
        case .graphviz: return structure.graphviz()
        case .mermaid: return structure.mermaid()
        case .textTree: return structure.textTree(roots: structure.roots, notes: waitingNotes())
        }
    }

    /// Writes what the recorder holds, in `format`, to a file (replacing it).
    ///
    /// - Parameters:
    ///   - format: The format.
    ///   - url: The file.
    /// - Throws: The error writing the file failed with.
    public func write(_ format: ExportFormat, to url: URL) throws {
        try Data(export(format).utf8).write(to: url, options: .atomic)
    }

    /// The text tree (``ExportFormat/textTree``) of one recorded operation and what it ran: a live
    /// composite's children with their states, say.
    ///
    /// - Parameter operation: An operation recorded by this recorder.
    /// - Returns: The tree, or an empty string when the recorder has no record of `operation`.
    public func textTree(of operation: AsyncOperation) -> String {
        guard let recording = operation.recording, recording.recorder === self else { return "" }
        return textTree(ofRecord: recording.id)
    }

    /// The text tree (``ExportFormat/textTree``) of a recorded chain: its operations handed to the
    /// queue so far, in order, with their states.
    ///
    /// - Parameter chain: A chain recorded by this recorder.
    /// - Returns: The tree, or an empty string when the recorder has no record of `chain`.
    public func textTree<Output>(of chain: ChainHandle<Output>) -> String {
        guard let recording = chain.recording, recording.recorder === self else { return "" }
        return textTree(ofRecord: recording.id)
    }

    private func textTree(ofRecord id: Int) -> String {
        let structure = RecordStructure(records, exportedAt: now())
        guard structure.byID[id] != nil else { return "" }
        return structure.textTree(roots: [id], notes: waitingNotes())
    }
}

/// The records of one snapshot, arranged as a forest: who ran whom.
struct RecordStructure {
    let records: [FlightRecord]
    let byID: [Int: FlightRecord]
    /// Each record's children, by position (then id).
    let children: [Int: [Int]]
    /// Records whose parent is not kept (or who have none), by id.
    let roots: [Int]
    let exportedAt: Duration

    init(_ records: [FlightRecord], exportedAt: Duration) {
        self.records = records
        self.exportedAt = exportedAt
        var byID = [Int: FlightRecord]()
        for record in records { byID[record.id] = record }
        var children = [Int: [Int]]()
        var roots = [Int]()
        for record in records {
            if let parent = record.parentID, byID[parent] != nil {
                children[parent, default: []].append(record.id)
            } else {
                roots.append(record.id)
            }
        }
        for (parent, list) in children {
            children[parent] = list.sorted { lhs, rhs in
                let (left, right) = (byID[lhs]!.position ?? .max, byID[rhs]!.position ?? .max)
                return left != right ? left < right : lhs < rhs
            }
        }
        self.byID = byID
        self.children = children
        self.roots = roots
    }

    /// Visits the forest below `roots` in order: `enter` for each record (with its depth and whether
    /// it is the last of its siblings), `leave` after its children. Iterative, for trees of any depth.
    func walk(
        roots: [Int], enter: (FlightRecord, _ ancestorsLast: [Bool], _ isLast: Bool) -> Void,
        leave: (FlightRecord) -> Void = { _ in }
    ) {
        enum Step {
            case enter(Int, ancestorsLast: [Bool], isLast: Bool)
            case leave(Int)
        }
        var stack: [Step] = roots.enumerated().reversed().map {
            .enter($0.element, ancestorsLast: [], isLast: $0.offset == roots.count - 1)
        }
        while let step = stack.popLast() {
            switch step {
            case .enter(let id, let ancestorsLast, let isLast):
                guard let record = byID[id] else { continue }
                enter(record, ancestorsLast, isLast)
                stack.append(.leave(id))
                let kids = children[id] ?? []
                for (offset, kid) in kids.enumerated().reversed() {
                    stack.append(.enter(kid, ancestorsLast: ancestorsLast + [isLast], isLast: offset == kids.count - 1))
                }
            case .leave(let id):
                if let record = byID[id] { leave(record) }
            }
        }
    }

    // MARK: - Text tree

    /// The tree below `roots`; `notes` says what operations still waiting at their gate wait for.
    func textTree(roots: [Int], notes: [Int: String] = [:]) -> String {
        var lines = [String]()
        walk(roots: roots) { record, ancestorsLast, isLast in
            // The top level has no branch; below it, each ancestor but the top draws a rail.
            var prefix = ""
            if !ancestorsLast.isEmpty {
                for last in ancestorsLast.dropFirst() { prefix += last ? "   " : "│  " }
                prefix += isLast ? "└─ " : "├─ "
            }
            let note = record.status == .pending ? notes[record.id].map { ", \($0)" } ?? "" : ""
            lines.append("\(prefix)\(record.label) \(record.status)\(note)")
        }
        return lines.map { $0 + "\n" }.joined()
    }

    // MARK: - Chrome trace

    func chromeTrace() -> String {
        enum Track {
            case thread(Int)
            case lane
            case skipped
        }
        struct Event {
            let record: FlightRecord
            let start: Duration
            /// `nil` for an instant event.
            let end: Duration?
            let track: Track
        }
        var events = [Event]()
        for record in records {
            if record.kind == .operation && record.observesStart {
                if let started = record.startedAt, let thread = record.thread {
                    events.append(
                        Event(
                            record: record, start: started, end: max(started, record.finishedAt ?? exportedAt),
                            track: .thread(thread)))
                } else if let finished = record.finishedAt {
                    events.append(Event(record: record, start: finished, end: nil, track: .skipped))
                }
            } else if let start = record.startedAt ?? (record.observesStart ? nil : record.enqueuedAt) {
                events.append(
                    Event(record: record, start: start, end: max(start, record.finishedAt ?? exportedAt), track: .lane))
            } else if let finished = record.finishedAt {
                events.append(Event(record: record, start: finished, end: nil, track: .skipped))
            }
        }
        // Spans are packed into lanes where they never overlap (a viewer nests the spans of one track):
        // composites, chains and Foundation operations (whose thread is unknown) on lanes of their
        // own; operations on their thread's lanes, a second lane when one started while the one
        // before it on that thread was still running (an asynchronous operation frees its thread).
        var laneEnds = [Duration]()
        var lanes = [Int: Int]()
        var threadLaneEnds = [Int: [Duration]]()
        func pack(_ start: Duration, _ end: Duration, into ends: inout [Duration]) -> Int {
            let lane = ends.firstIndex { $0 <= start } ?? ends.count
            if lane == ends.count { ends.append(end) } else { ends[lane] = end }
            return lane
        }
        for event in events.sorted(by: { ($0.start, $0.record.id) < ($1.start, $1.record.id) }) {
            guard let end = event.end else { continue }
            switch event.track {
            case .lane: lanes[event.record.id] = pack(event.start, end, into: &laneEnds)
            case .thread(let thread): lanes[event.record.id] = pack(event.start, end, into: &threadLaneEnds[thread, default: []])
            case .skipped: break
            }
        }
        var trace = [TraceEvent.metadata("process_name", tid: 0, TraceArgs(name: "Baton"))]
        func track(_ tid: Int, _ name: String, sortIndex: Int) {
            trace.append(.metadata("thread_name", tid: tid, TraceArgs(name: name)))
            trace.append(.metadata("thread_sort_index", tid: tid, TraceArgs(sort_index: sortIndex)))
        }
        for lane in laneEnds.indices { track(Self.laneBase + lane, "composites and chains \(lane + 1)", sortIndex: lane) }
        for (thread, ends) in threadLaneEnds.sorted(by: { $0.key < $1.key }) {
            for lane in ends.indices {
                track(
                    Self.threadTrack(thread, lane), lane == 0 ? "thread \(thread)" : "thread \(thread), lane \(lane + 1)",
                    sortIndex: Self.threadTrack(thread, lane))
            }
        }
        if events.contains(where: { if case .skipped = $0.track { return true } else { return false } }) {
            track(Self.laneBase - 1, "skipped at start", sortIndex: Self.laneBase)
        }
        for event in events {
            let record = event.record
            let tid: Int
            switch event.track {
            case .thread(let thread): tid = Self.threadTrack(thread, lanes[record.id] ?? 0)
            case .lane: tid = Self.laneBase + (lanes[record.id] ?? 0)
            case .skipped: tid = Self.laneBase - 1
            }
            trace.append(
                TraceEvent(
                    name: record.label, ph: event.end == nil ? "i" : "X", pid: 1, tid: tid, ts: micros(event.start),
                    dur: event.end.map { micros($0 - event.start) }, s: event.end == nil ? "t" : nil,
                    cat: category(record), cname: colour(record), args: traceArgs(record)))
        }
        // Waits at gates (conditions, categories): spans on tracks of their own, packed the same way.
        var waitEnds = [Duration]()
        var waitSpans = [(record: FlightRecord, wait: FlightRecord.Wait, lane: Int)]()
        let waits = records.flatMap { record in record.waits.map { (record: record, wait: $0) } }
        for (record, wait) in waits.sorted(by: { ($0.wait.began, $0.record.id) < ($1.wait.began, $1.record.id) }) {
            waitSpans.append((record, wait, pack(wait.began, wait.ended, into: &waitEnds)))
        }
        for lane in waitEnds.indices {
            track(Self.waitBase + lane, "waiting at gates \(lane + 1)", sortIndex: Self.waitBase + lane)
        }
        for span in waitSpans {
            var args = TraceArgs(id: span.record.id, type: span.record.typeName)
            args.waited = span.wait.what
            trace.append(
                TraceEvent(
                    name: "\(span.record.label) waiting for \(span.wait.what)", ph: "X", pid: 1,
                    tid: Self.waitBase + span.lane, ts: micros(span.wait.began), dur: micros(span.wait.ended - span.wait.began),
                    s: nil, cat: "wait", cname: "grey", args: args))
        }
        // Foundation's encoder writes the JSON: it escapes every string, so no name can break the file.
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(TraceFile(traceEvents: trace))) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    /// Track ids: a thread's lanes from `1_000 × (thread + 1)` (Perfetto calls the track whose id is
    /// the process's the main thread), lanes of composites and chains from `laneBase`.
    static func threadTrack(_ thread: Int, _ lane: Int) -> Int { 1_000 * (thread + 1) + lane }
    static let laneBase = 100_000_000
    /// Track ids of the waits at gates.
    static let waitBase = 90_000_000

    private func category(_ record: FlightRecord) -> String {
        switch record.kind {
        case .operation: return "operation"
        case .composite: return "composite"
        case .chain: return "chain"
        }
    }

    private func colour(_ record: FlightRecord) -> String {
        switch record.status {
        case .succeeded: return "good"
        case .failed: return "terrible"
        case .cancelled: return "grey"
        case .executing: return "yellow"
        case .pending: return "white"
        }
    }

    private func traceArgs(_ record: FlightRecord) -> TraceArgs {
        var args = TraceArgs(id: record.id, type: record.typeName, status: record.status.description)
        if case .failed(let error) = record.status { args.error = error }
        args.parent = record.parentID
        args.position = record.position
        args.attempt = record.attempt
        args.after = record.predecessorID
        if !record.dependencyIDs.isEmpty { args.dependencies = record.dependencyIDs }
        args.enqueued_us = record.enqueuedAt.map(micros)
        if let enqueued = record.enqueuedAt, let started = record.startedAt { args.queued_us = micros(started - enqueued) }
        if !record.observesStart {
            args.start = "not observed (a Foundation operation): the span starts when it was enqueued"
        }
        return args
    }

    // MARK: - Graphs

    /// An edge of the graph: from, to, and its label (`nil` for a dependency).
    private var edges: [(from: Int, to: Int, link: FlightRecord.Link?)] {
        var edges = [(from: Int, to: Int, link: FlightRecord.Link?)]()
        for record in records {
            for dependency in record.dependencyIDs where byID[dependency] != nil {
                edges.append((dependency, record.id, nil))
            }
            if let predecessor = record.predecessorID, byID[predecessor] != nil {
                edges.append((predecessor, record.id, record.link ?? .adapter))
            }
        }
        return edges
    }

    private func linkName(_ link: FlightRecord.Link) -> String {
        switch link {
        case .adapter: return "adapter"
        case .step: return "then"
        case .retry: return "retry"
        case .subtree: return "children"
        }
    }

    /// What a node or cluster says under its name: its duration, or its state.
    private func summary(_ record: FlightRecord) -> String {
        let time: String?
        if let duration = record.duration {
            time = Self.format(duration)
        } else if let enqueued = record.enqueuedAt, let finished = record.finishedAt {
            time = Self.format(finished - enqueued)
        } else {
            time = nil
        }
        let waited = record.waits.map { " · waited \(Self.format($0.ended - $0.began)) for \($0.what)" }.joined()
        return summaryOfStatus(record, time: time) + waited
    }

    private func summaryOfStatus(_ record: FlightRecord, time: String?) -> String {
        switch record.status {
        case .succeeded: return time ?? "succeeded"
        case .failed(let error): return (time.map { "\($0) · " } ?? "") + "failed: " + Self.shorten(error)
        case .cancelled: return (time.map { "\($0) · " } ?? "") + "cancelled"
        case .executing, .pending: return record.status.description
        }
    }

    private static func shorten(_ text: String, to limit: Int = 48) -> String {
        text.count <= limit ? text : String(text.prefix(limit - 1)) + "…"
    }

    static func format(_ duration: Duration) -> String {
        let seconds = duration.seconds
        if seconds < 1e-3 { return String(format: "%.0f µs", seconds * 1e6) }
        if seconds < 1 { return String(format: "%.2f ms", seconds * 1e3) }
        return String(format: "%.2f s", seconds)
    }

    private static let fills: [String: String] = [
        "succeeded": "#c8e6c9", "failed": "#ffcdd2", "cancelled": "#e0e0e0", "executing": "#fff9c4",
        "pending": "#ffffff",
    ]

    private static func statusClass(_ status: FlightRecord.Status) -> String {
        switch status {
        case .succeeded: return "succeeded"
        case .failed: return "failed"
        case .cancelled: return "cancelled"
        case .executing: return "executing"
        case .pending: return "pending"
        }
    }

    func graphviz() -> String {
        var lines = ["digraph Baton {", "  rankdir=LR;", "  compound=true;"]
        lines.append(#"  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];"#)
        lines.append(#"  edge [fontname="Helvetica", fontsize=9];"#)
        func node(_ record: FlightRecord, indent: String) -> String {
            let shape = record.kind == .composite ? ", shape=folder" : ""
            let fill = Self.fills[Self.statusClass(record.status)]!
            return
                #"\#(indent)n\#(record.id) [label=\#(dot(record.label + "\n" + summary(record)))\#(shape), fillcolor="\#(fill)"];"#
        }
        walkGraph(
            node: { record, indent in lines.append(node(record, indent: indent)) },
            open: { record, indent in
                lines.append("\(indent)subgraph cluster_\(record.id) {")
                lines.append(
                    "\(indent)  label=\(dot(record.label + " · " + summary(record))); style=\"rounded\"; color=\"#607d8b\";")
            },
            close: { indent in lines.append(indent + "}") })
        for edge in edges {
            if let link = edge.link {
                lines.append(#"  n\#(edge.from) -> n\#(edge.to) [style=dashed, label="\#(linkName(link))"];"#)
            } else {
                lines.append("  n\(edge.from) -> n\(edge.to);")
            }
        }
        lines.append("}")
        return lines.joined(separator: "\n") + "\n"
    }

    /// Walks the forest for a graph, with each line's indent: `node` for an operation; for a
    /// composite or a chain, `open` for its cluster, then (a composite's) `node`, its children, and
    /// `close`.
    private func walkGraph(
        node: (FlightRecord, String) -> Void, open: (FlightRecord, String) -> Void, close: (String) -> Void
    ) {
        func isCluster(_ record: FlightRecord) -> Bool { record.kind != .operation || children[record.id] != nil }
        var indents = [Int: String]()
        walk(
            roots: roots,
            enter: { record, ancestors, _ in
                let indent = String(repeating: "  ", count: ancestors.count + 1)
                guard isCluster(record) else { return node(record, indent) }
                indents[record.id] = indent
                open(record, indent)
                if record.kind != .chain { node(record, indent + "  ") }
            },
            leave: { record in
                if isCluster(record) { close(indents.removeValue(forKey: record.id) ?? "  ") }
            })
    }

    func mermaid() -> String {
        var lines = ["flowchart LR"]
        var classes = [String: [String]]()
        func node(_ record: FlightRecord, indent: String) -> String {
            classes[Self.statusClass(record.status), default: []].append("n\(record.id)")
            let text = mermaidText(record.label) + "<br/>" + mermaidText(summary(record))
            return record.kind == .composite
                ? "\(indent)n\(record.id)[[\"\(text)\"]]" : "\(indent)n\(record.id)[\"\(text)\"]"
        }
        walkGraph(
            node: { record, indent in lines.append(node(record, indent: indent)) },
            open: { record, indent in
                let title = mermaidText(record.label + " · " + summary(record))
                lines.append("\(indent)subgraph c\(record.id) [\"\(title)\"]")
            },
            close: { indent in lines.append(indent + "end") })
        for edge in edges {
            if let link = edge.link {
                lines.append("  n\(edge.from) -.->|\(linkName(link))| n\(edge.to)")
            } else {
                lines.append("  n\(edge.from) --> n\(edge.to)")
            }
        }
        for name in ["succeeded", "failed", "cancelled", "executing", "pending"] {
            lines.append("  classDef \(name) fill:\(Self.fills[name]!)")
            if let members = classes[name] { lines.append("  class \(members.joined(separator: ",")) \(name)") }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}

// MARK: - Escaping

/// `text` with each scalar `replacement` has an answer for replaced by it (an empty string drops it).
private func escaping(_ text: String, _ replacement: (Unicode.Scalar) -> String?) -> String {
    var out = ""
    for scalar in text.unicodeScalars {
        if let replaced = replacement(scalar) { out += replaced } else { out.unicodeScalars.append(scalar) }
    }
    return out
}

/// A Graphviz string literal (a line break is a centred `\n`). Graphviz decodes HTML entities such
/// as `&#9829;` in labels, so `&` is written as `&amp;`.
private func dot(_ text: String) -> String {
    let body = escaping(text) { scalar in
        switch scalar {
        case "&": return "&amp;"
        case "\"": return "\\\""
        case "\\": return "\\\\"
        case "\n": return "\\n"
        case "\r", "\0": return ""
        default: return nil
        }
    }
    return "\"" + body + "\""
}

/// Text for a Mermaid label in double quotes: entities for what Mermaid reads as syntax (`#` too,
/// which starts an entity code such as `#9829;`), a space for a line break, nothing for other control
/// characters.
private func mermaidText(_ text: String) -> String {
    escaping(text) { scalar in
        switch scalar {
        case "#": return "#35;"
        case "&": return "#amp;"
        case "\"": return "#quot;"
        case "<": return "#lt;"
        case ">": return "#gt;"
        case "\n", "\r": return " "
        case _ where scalar.value < 0x20: return ""
        default: return nil
        }
    }
}

/// Microseconds, as Chrome's trace wants them.
/// Microseconds, to the nanosecond.
private func micros(_ duration: Duration) -> Double {
    let nanoseconds = duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    return Double(nanoseconds) / 1000
}

// MARK: - Chrome trace events

/// A Chrome Trace Event file.
private struct TraceFile: Encodable {
    var displayTimeUnit = "ms"
    var traceEvents: [TraceEvent]
}

/// One event: a span (`X`), an instant (`i`) or metadata (`M`). Absent fields are left out.
private struct TraceEvent: Encodable {
    var name: String
    var ph: String
    var pid: Int
    var tid: Int
    var ts: Double?
    var dur: Double?
    var s: String?
    var cat: String?
    var cname: String?
    var args: TraceArgs

    static func metadata(_ name: String, tid: Int, _ args: TraceArgs) -> TraceEvent {
        TraceEvent(name: name, ph: "M", pid: 1, tid: tid, args: args)
    }
}

/// An event's arguments: a record's fields, shown by the viewer when its span is selected, or a
/// metadata event's name or sort index. Absent fields are left out.
private struct TraceArgs: Encodable {
    var name: String?
    // swift-format-ignore: AlwaysUseLowerCamelCase
    var sort_index: Int?
    var id: Int?
    var type: String?
    var status: String?
    var error: String?
    var parent: Int?
    var position: Int?
    var attempt: Int?
    var after: Int?
    var dependencies: [Int]?
    // swift-format-ignore: AlwaysUseLowerCamelCase
    var enqueued_us: Double?
    // swift-format-ignore: AlwaysUseLowerCamelCase
    var queued_us: Double?
    var start: String?
    var waited: String?
}
