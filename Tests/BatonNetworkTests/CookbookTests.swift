import Baton
import BatonNetwork
import Foundation
import XCTest

@testable import baton_cookbook

/// The cookbook crawl end to end, against the shipped static API served by the test server.
final class CookbookTests: XCTestCase {
    private static let api = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources/baton-cookbook/API")

    /// What the shipped API holds, read from its files: the counts a whole crawl must reach.
    private func expectedCounts() throws -> (recipes: Int, ingredients: Int, images: Int) {
        let cookbook = try JSONDecoder().decode(
            Cookbook.self, from: Data(contentsOf: Self.api.appendingPathComponent("cookbook/1")))
        var ingredients = 0
        var images = 0
        for id in cookbook.recipes {
            let recipe = try JSONDecoder().decode(
                Recipe.self, from: Data(contentsOf: Self.api.appendingPathComponent("recipes/\(id)")))
            images += recipe.images.count
            for ingredient in recipe.ingredients {
                let found = try JSONDecoder().decode(
                    Ingredient.self, from: Data(contentsOf: Self.api.appendingPathComponent("ingredients/\(ingredient)")))
                ingredients += 1
                images += found.images.count
            }
        }
        return (cookbook.recipes.count, ingredients, images)
    }

    func testTheCrawlFetchesTheWholeCookbookAndRecordsIt() throws {
        let server = try TestServer(root: Self.api)
        defer { server.stop() }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("cookbook-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        var options = CrawlOptions(base: server.url("/"))
        options.concurrency = 4
        options.trace = folder.appendingPathComponent("trace.json")
        options.graph = folder.appendingPathComponent("graph.dot")
        let summary = crawl(options)
        let expected = try expectedCounts()
        XCTAssertEqual(summary.outcome, .succeeded, "\(summary.failures.prefix(3))")
        XCTAssertEqual(summary.recipes, expected.recipes)
        XCTAssertEqual(summary.ingredients, expected.ingredients)
        XCTAssertEqual(summary.images, expected.images)
        XCTAssertEqual(summary.requests, 1 + expected.recipes + expected.ingredients + expected.images)
        XCTAssertEqual(summary.attempts, summary.requests)
        XCTAssertGreaterThan(expected.recipes, 200)
        XCTAssertLessThanOrEqual(try server.stats().maxConcurrent, 4)
        let trace = try JSONSerialization.jsonObject(with: Data(contentsOf: options.trace!)) as? [String: Any]
        XCTAssertFalse((trace?["traceEvents"] as? [Any] ?? []).isEmpty)
        XCTAssertTrue(try String(contentsOf: options.graph!, encoding: .utf8).hasPrefix("digraph"))
    }

    func testAnUnreachableServerFailsTheCrawlWithTheReasonAndDoesNotHang() throws {
        var options = CrawlOptions(base: URL(string: "http://127.0.0.1:1/")!)
        options.attempts = 2
        let summary = crawl(options)
        XCTAssertEqual(summary.outcome, .failed)
        XCTAssertEqual(summary.failures.count, 1)
        XCTAssertTrue(summary.failures[0].contains("the connection was refused"), summary.failures[0])
        XCTAssertEqual(summary.attempts, 2)
    }

    func testBadArgumentsAreAUsageError() {
        XCTAssertEqual(runCookbook(["baton-cookbook"]), 2)
        XCTAssertEqual(runCookbook(["baton-cookbook", "ftp://example.com"]), 2)
        XCTAssertEqual(runCookbook(["baton-cookbook", "http://127.0.0.1:1", "--concurrency", "0"]), 2)
        XCTAssertEqual(runCookbook(["baton-cookbook", "http://127.0.0.1:1", "--frobnicate"]), 2)
    }
}
