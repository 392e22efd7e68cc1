import Baton
import BatonNetwork
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// Network (issue #25): Baton's operations against plain `URLSession` doing the same requests with the
// same concurrency, on loopback, against the tests' Python server. The parent process starts the server
// and passes its port to each child in BATON_BENCH_SERVER_PORT; run by hand, start it yourself:
//
//   python3 Tests/BatonNetworkTests/Server/server.py   (prints the port; stops when its stdin closes)

/// Requests in flight at once on both sides: the client's default per-host limit.
let networkConcurrency = 6

func benchServer(_ path: String) throws -> URL {
    guard let port = ProcessInfo.processInfo.environment["BATON_BENCH_SERVER_PORT"] else {
        throw BenchmarkFailure(description: "BATON_BENCH_SERVER_PORT is not set (see NetworkWorkloads.swift)")
    }
    return URL(string: "http://127.0.0.1:\(port)\(path)")!
}

/// The size of `/json?name=bench`'s body: `{"name": "bench", "tags": ["a", "b"]}`.
let jsonBodySize = 37

/// `n` small GETs through Baton's data operations, at most `networkConcurrency` in flight (the host's limit).
func batonHTTPGets(_ n: Int) throws {
    let client = HTTPClient(maximumRequestsPerHost: networkConcurrency)
    let request = URLRequest(url: try benchServer("/json?name=bench"))
    let fetches = (0..<n).map { _ in client.data(request) }
    try GroupOperation(operations: fetches).run(timeout: .seconds(600))
    guard fetches.allSatisfy({ $0.output?.body.count == jsonBodySize }) else {
        throw BenchmarkFailure(description: "a Baton GET returned an unexpected body")
    }
}

/// The same `n` GETs through `URLSession`'s `async` API, `networkConcurrency` tasks at a time.
func urlSessionHTTPGets(_ n: Int) throws {
    let session = URLSession(configuration: .default)
    let request = URLRequest(url: try benchServer("/json?name=bench"))
    let result = Mutex<Result<Void, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        do {
            try await withThrowingTaskGroup(of: Int.self) { group in
                var started = 0
                func add() {
                    group.addTask {
                        let (data, response) = try await session.data(for: request)
                        guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw URLError(.badServerResponse) }
                        return data.count
                    }
                    started += 1
                }
                while started < min(n, networkConcurrency) { add() }
                while let size = try await group.next() {
                    guard size == jsonBodySize else { throw URLError(.badServerResponse) }
                    if started < n { add() }
                }
            }
            result.withLock { $0 = .success(()) }
        } catch {
            result.withLock { $0 = .failure(error) }
        }
        done.signal()
    }
    done.wait()
    try result.withLock { $0! }.get()
    session.invalidateAndCancel()
}

/// Where a download goes: a file in the temporary folder, removed after.
func downloadDestination() -> URL {
    FileManager.default.temporaryDirectory.appendingPathComponent("baton-bench-download-\(getpid())")
}

/// One download of `n` MiB through a `DownloadOperation`, following its progress or not.
func batonHTTPDownload(reportsProgress: Bool) -> Workload {
    { n in
        let destination = downloadDestination()
        defer { try? FileManager.default.removeItem(at: destination) }
        let client = HTTPClient()
        let request = URLRequest(url: try benchServer("/bytes?n=\(n << 20)"))
        let file = try client.download(request, to: destination, reportsProgress: reportsProgress).run(timeout: .seconds(600))
        guard file.byteCount == Int64(n) << 20 else {
            throw BenchmarkFailure(description: "short download: \(file.byteCount)")
        }
    }
}

/// The same download through a plain `URLSession` download task, moved to the same destination.
func urlSessionHTTPDownload(_ n: Int) throws {
    let destination = downloadDestination()
    defer { try? FileManager.default.removeItem(at: destination) }
    let session = URLSession(configuration: .default)
    let result = Mutex<Result<Int64, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    let url = try benchServer("/bytes?n=\(n << 20)")
    session.downloadTask(with: url) { location, _, error in
        result.withLock { result in
            result = Result {
                guard let location else { throw error ?? URLError(.unknown) }
                try FileManager.default.moveItem(at: location, to: destination)
                return (try FileManager.default.attributesOfItem(atPath: destination.path)[.size] as? NSNumber)?.int64Value ?? 0
            }
        }
        done.signal()
    }.resume()
    done.wait()
    let size = try result.withLock { $0! }.get()
    guard size == Int64(n) << 20 else { throw BenchmarkFailure(description: "short download: \(size)") }
    session.invalidateAndCancel()
}

/// Starts the tests' server for the network rows; it stops when this process ends (its stdin closes).
final class BenchServer {
    private let process = Process()
    private let input = Pipe()

    init() throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Tests/BatonNetworkTests/Server/server.py")
        let output = Pipe()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path]
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        var line = Data()
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty || byte == Data("\n".utf8) { break }
            line.append(byte)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self)) else {
            throw BenchmarkFailure(description: "the server at \(script.path) did not start (is python3 installed?)")
        }
        setenv("BATON_BENCH_SERVER_PORT", String(port), 1)
    }

    func stop() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }
}
