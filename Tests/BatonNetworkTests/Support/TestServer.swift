import Baton
import BatonNetwork
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The real HTTP server the tests talk to: `Server/server.py` (Python's standard library), started as
/// a child process on 127.0.0.1 and an ephemeral port. It stops when its stdin closes, so it never
/// outlives the test process.
final class TestServer: @unchecked Sendable {
    let port: Int
    private let process: Process
    private let input: Pipe

    /// Starts the server; `root` is a folder it serves files from (the cookbook).
    init(root: URL? = nil) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Server/server.py")
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path] + (root.map { ["--root", $0.path] } ?? [])
        input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        // The first line is the port.
        var line = Data()
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty || byte == Data("\n".utf8) { break }
            line.append(byte)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self)) else {
            process.terminate()
            throw ServerError(description: "the test server did not print its port (is python3 installed?)")
        }
        self.port = port
    }

    struct ServerError: Error, CustomStringConvertible {
        let description: String
    }

    func stop() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }

    func url(_ path: String) -> URL {
        URL(string: "http://127.0.0.1:\(port)\(path)")!
    }

    func request(_ path: String) -> URLRequest {
        URLRequest(url: url(path))
    }

    /// What the server saw for `key` (or in all), read through a plain `URLSession` request.
    func stats(_ key: String? = nil) throws -> Stats {
        let data = try fetch(url("/_stats" + (key.map { "?key=\($0)" } ?? "")))
        return try JSONDecoder().decode(Stats.self, from: data)
    }

    /// What the server saw for `key`, once it saw at least `requests` requests of it, or (with
    /// `closed`) the client close its connection early: a gate on the server, not a poll. After 20 s
    /// it answers anyway, and the caller's assertion fails.
    func awaitStats(_ key: String, requests: Int = 0, closed: Bool = false) throws -> Stats {
        try JSONDecoder().decode(
            Stats.self, from: fetch(url("/_await?key=\(key)&requests=\(requests)&closed=\(closed ? 1 : 0)&timeout=20")))
    }

    func reset() throws {
        _ = try fetch(url("/_reset"))
    }

    struct Stats: Decodable {
        let maxConcurrent: Int
        /// The most connections open at once since the last reset, beyond those open at the reset.
        let maxConnections: Int
        let inFlight: Int
        let requests: Int
        let closedEarly: Bool?

        enum CodingKeys: String, CodingKey {
            case maxConcurrent = "max_concurrent"
            case maxConnections = "max_connections"
            case inFlight = "in_flight"
            case requests
            case closedEarly = "closed_early"
        }
    }

    private func fetch(_ url: URL) throws -> Data {
        let result = Mutex<Result<Data, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        var request = URLRequest(url: url)
        request.timeoutInterval = 30
        URLSession.shared.dataTask(with: request) { data, _, error in
            result.withLock { $0 = data.map { .success($0) } ?? .failure(error ?? ServerError(description: "no data")) }
            done.signal()
        }.resume()
        guard done.wait(timeout: .now() + 40) == .success else { throw ServerError(description: "\(url) took 40 s") }
        return try result.withLock { $0! }.get()
    }
}

/// The longest any test waits for an operation: long enough never to fire on a slow machine, short
/// enough that a hang fails the test instead of the CI run.
let testTimeout: Duration = .seconds(30)

/// Checks `condition` until it holds or `timeout` passes; false if it never held. Only for facts that
/// nothing announces (a download's byte count, a client freed); for the rest, tests wait on gates:
/// an operation's wait, a semaphore, the server's `/_await`.
func eventually(timeout: Duration = testTimeout, _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + timeout
    let tick = DispatchSemaphore(value: 0)
    while !condition() {
        guard ContinuousClock.now < deadline else { return false }
        _ = tick.wait(timeout: .now() + .milliseconds(1))
    }
    return true
}
