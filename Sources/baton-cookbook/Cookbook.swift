import Baton
import BatonNetwork
import Dispatch
import Foundation

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// The cookbook API (DRBOperationTree's example): a cookbook lists recipes; a recipe lists its
// ingredients and images; an ingredient lists its images.

struct Cookbook: Decodable, Sendable {
    let title: String
    let recipes: [Int]
}

struct Recipe: Decodable, Sendable {
    let id: Int
    let name: String
    let ingredients: [Int]
    let images: [Int]
}

struct Ingredient: Decodable, Sendable {
    let id: Int
    let name: String
    let images: [Int]
}

/// How a crawl ended, as the summary's first word says it.
enum CrawlOutcome: String, Sendable {
    case succeeded, failed, cancelled
    case didNotFinish = "did not finish"
}

/// What a crawl did.
struct CrawlSummary: Sendable {
    var recipes = 0
    var ingredients = 0
    var images = 0
    var bytes = 0
    var requests = 0
    var attempts = 0
    var failures: [String] = []
    var outcome = CrawlOutcome.didNotFinish
}

extension CrawlSummary {
    /// The summary's first line: what was fetched, the requests and retries, the time.
    func report(seconds: Double) -> String {
        let time = String(format: "%.2f", seconds)
        return "\(outcome.rawValue): \(recipes) recipes, \(ingredients) ingredients, \(images) images (\(bytes) bytes); "
            + "\(requests) requests, \(attempts - requests) retries, in \(time) s"
    }
}

/// The crawl's options.
struct CrawlOptions: Sendable {
    var base: URL
    var concurrency = 6
    var attempts = 4
    var timeout: Duration = .seconds(300)
    var trace: URL?
    var graph: URL?
}

/// Counts what the crawl fetched, from any thread.
final class Tally: Sendable {
    private let state = Mutex(CrawlSummary())

    func add(_ change: (inout CrawlSummary) -> Void) {
        state.withLock(change)
    }

    var summary: CrawlSummary { state.withLock { $0 } }
}

/// Crawls the cookbook at `options.base`: a `TreeOperation` whose nodes fetch the cookbook, each
/// recipe, each recipe's images and ingredients, and each ingredient's images, every request retried
/// by the client's policy and at most `concurrency` in flight to the host.
func crawl(_ options: CrawlOptions, progress: (@Sendable (CrawlSummary) -> Void)? = nil) -> CrawlSummary {
    var policy = HTTPRetryPolicy()
    policy.maximumAttempts = max(1, options.attempts)
    let client = HTTPClient(maximumRequestsPerHost: options.concurrency, retryPolicy: policy)
    let tally = Tally()
    let base = options.base

    /// A retried request for `path` through operations that `make` makes; requests and attempts counted.
    @Sendable func retried<Output>(
        _ path: String, _ make: @escaping @Sendable (URLRequest) -> HTTPOperation<Output>
    ) -> ResultOperation<Output> {
        tally.add { $0.requests += 1 }
        return client.retrying(URLRequest(url: base.appendingPathComponent(path))) { request in
            let operation = make(request)
            operation.onStart { tally.add { $0.attempts += 1 } }
            return operation
        }
    }
    @Sendable func fetch<Value: Decodable & Sendable>(_ type: Value.Type, _ path: String) -> ResultOperation<Value> {
        retried(path) { client.json(type, $0) }
    }
    @Sendable func image(_ id: Int) -> ResultOperation<HTTPResponse> {
        retried("images/\(id)") { client.data($0) }
    }
    func countImages<Input>(of node: TreeNode<Input, HTTPResponse>) {
        node.onFinish { outcome in
            if case .succeeded(let response) = outcome {
                tally.add {
                    $0.images += 1
                    $0.bytes += response.body.count
                }
            }
        }
    }

    let cookbook = TreeNode<Void, Cookbook>("cookbook") { fetch(Cookbook.self, "cookbook/1") }
    let recipe = TreeNode<Cookbook, Recipe>("recipe", items: \.recipes) { fetch(Recipe.self, "recipes/\($0)") }
    let recipeImage = TreeNode<Recipe, HTTPResponse>("recipe image", items: \.images) { image($0) }
    let ingredient = TreeNode<Recipe, Ingredient>("ingredient", items: \.ingredients) {
        fetch(Ingredient.self, "ingredients/\($0)")
    }
    let ingredientImage = TreeNode<Ingredient, HTTPResponse>("ingredient image", items: \.images) { image($0) }
    cookbook.addChild(recipe)
    recipe.addChild(recipeImage)
    recipe.addChild(ingredient)
    ingredient.addChild(ingredientImage)

    recipe.onFinish { outcome in if case .succeeded = outcome { tally.add { $0.recipes += 1 } } }
    ingredient.onFinish { outcome in if case .succeeded = outcome { tally.add { $0.ingredients += 1 } } }
    countImages(of: recipeImage)
    countImages(of: ingredientImage)

    let tree = TreeOperation(root: cookbook, input: ())
    tree.timeout = options.timeout
    let recorder = options.trace != nil || options.graph != nil ? FlightRecorder() : nil
    recorder?.attach(to: tree)

    let ticker = progress.map { report in
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(deadline: .now() + 0.1, repeating: 0.1)
        timer.setEventHandler { report(tally.summary) }
        timer.resume()
        return timer
    }
    let outcome = try? tree.runForOutcome(timeout: options.timeout + .seconds(30))
    ticker?.cancel()

    var summary = tally.summary
    if let recorder {
        if let trace = options.trace { try? recorder.write(.chromeTrace, to: trace) }
        if let graph = options.graph {
            try? recorder.write(graph.pathExtension == "mmd" ? .mermaid : .graphviz, to: graph)
        }
    }
    switch outcome {
    case .succeeded?:
        summary.outcome = .succeeded
    case .cancelled?:
        summary.outcome = .cancelled
    case .failed(let error)?:
        summary.outcome = .failed
        if case BatonError.treeFailed(let failures) = error {
            summary.failures = failures.map { "\($0)" }
        } else {
            summary.failures = ["\(error)"]
        }
    case nil:
        summary.outcome = .didNotFinish
        summary.failures = ["the crawl did not finish within \(options.timeout + .seconds(30))"]
    }
    return summary
}

let usage = """
    usage: baton-cookbook BASE-URL [--concurrency N] [--attempts N] [--timeout SECONDS] [--trace FILE] [--graph FILE]

    Crawls a cookbook API (/cookbook/1, /recipes/ID, /ingredients/ID, /images/ID) with a TreeOperation:
    every request retried on transient failures, at most N in flight to the host (default 6).
    Serve the shipped one with:  python3 -m http.server --directory Sources/baton-cookbook/API 8000
      --trace FILE   records the run and writes a Chrome trace (open it in Perfetto)
      --graph FILE   records the run and writes its graph: Graphviz DOT, or Mermaid if FILE ends in .mmd
    Exits 0 when everything was fetched, 1 when something failed, 2 on a usage error.
    """

/// Runs the command; returns the exit status.
func runCookbook(_ arguments: [String]) -> Int32 {
    var options: CrawlOptions?
    var rest = arguments.dropFirst()
    var pending: (concurrency: Int, attempts: Int, timeout: Duration, trace: URL?, graph: URL?) = (6, 4, .seconds(300), nil, nil)
    var base: String?
    func fail(_ message: String) -> Int32 {
        FileHandle.standardError.write(Data("baton-cookbook: \(message)\n\(usage)\n".utf8))
        return 2
    }
    while let argument = rest.popFirst() {
        switch argument {
        case "-h", "--help":
            print(usage)
            return 0
        case "--concurrency", "--attempts", "--timeout", "--trace", "--graph":
            guard let value = rest.popFirst() else { return fail("\(argument) needs a value") }
            switch argument {
            case "--trace": pending.trace = URL(fileURLWithPath: value)
            case "--graph": pending.graph = URL(fileURLWithPath: value)
            default:
                guard let number = Int(value), number >= 1 else {
                    return fail("\(argument) takes a whole number of at least 1, not '\(value)'")
                }
                if argument == "--concurrency" { pending.concurrency = number }
                if argument == "--attempts" { pending.attempts = number }
                if argument == "--timeout" { pending.timeout = .seconds(number) }
            }
        default:
            guard !argument.hasPrefix("-"), base == nil else { return fail("unknown argument '\(argument)'") }
            base = argument
        }
    }
    guard let base else { return fail("give the API's base URL") }
    guard let url = URL(string: base), ["http", "https"].contains(url.scheme?.lowercased() ?? ""), url.host != nil else {
        return fail("'\(base)' is not an http(s) URL")
    }
    options = CrawlOptions(
        base: url, concurrency: pending.concurrency, attempts: pending.attempts, timeout: pending.timeout,
        trace: pending.trace, graph: pending.graph)

    // A progress line on a terminal only, so that a redirected run prints the summary alone.
    let terminal = isatty(STDERR_FILENO) == 1
    let line: @Sendable (CrawlSummary) -> Void = { now in
        let text = "recipes \(now.recipes) · ingredients \(now.ingredients) · images \(now.images) · \(now.bytes / 1024) KiB"
        FileHandle.standardError.write(Data("\r\u{1B}[2K\(text)".utf8))
    }
    let started = ContinuousClock.now
    let summary = crawl(options!, progress: terminal ? line : nil)
    if terminal { FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8)) }
    let seconds = Double((ContinuousClock.now - started) / .milliseconds(1)) / 1000
    print(summary.report(seconds: seconds))
    for failure in summary.failures.prefix(10) { print("failed: \(failure)") }
    if summary.failures.count > 10 { print("… and \(summary.failures.count - 10) more failures") }
    return summary.outcome == .succeeded ? 0 : 1
}
