import Baton
import Foundation
import XCTest

// The examples of Docs/Trees.md, verbatim (DocumentationTests checks that they are here).

/// A stand-in for a network call that returns a recipe's ingredient names.
final class FetchIngredients: ResultOperation<[String]>, @unchecked Sendable {
    let recipe: String
    init(recipe: String) {
        self.recipe = recipe
        super.init()
    }
    override func execute() {
        finish(with: ["\(recipe): flour", "\(recipe): water"])
    }
}

final class TreesExamples: BatonTestCase {
    // Laid out as in Docs/Trees.md, which DocumentationTests compares it with: not reformatted.
    // swift-format-ignore
    func testACookbook() {
        let cookbook = TreeNode<String, [String]>("cookbook") { name in
            ResultBlockOperation { $0.finish(with: ["\(name) bread", "\(name) soup"]) }
        }
        let recipe = TreeNode<[String], [String]>("recipe", items: { recipes in recipes }) { name in
            FetchIngredients(recipe: name)
        }
        let ingredient = TreeNode<[String], String>("ingredient", items: { $0 }) { name in
            ResultBlockOperation { $0.finish(with: name.uppercased()) }
        }
        cookbook.addChild(recipe)
        recipe.addChild(ingredient)
        ingredient.onFinish { print($0.output!) }                   // FAMILY BREAD: FLOUR, ... (4 lines)
        recipe.onSubtreeFinish { print("done:", $0) }              // once per recipe, after its ingredients

        let tree = TreeOperation(root: cookbook, input: "family")
        OperationQueue().addOperation(tree)
        tree.waitUntilFinished()
        print(tree.outcome!, tree.progress.completedUnitCount)     // succeeded(()) 7
        XCTAssertEqual(tree.progress.completedUnitCount, 7)
    }

    // Laid out as in Docs/Trees.md, which DocumentationTests compares it with: not reformatted.
    // swift-format-ignore
    func testAFailureHasAPath() {
        let root = TreeNode<Int, Int>("batch", items: { count in Array(0..<count) }) { index in
            ResultBlockOperation { operation in
                if index == 2 { operation.finish(throwing: URLError(.badServerResponse)) } else { operation.finish(with: index) }
            }
        }
        root.retry(maximumAttempts: 2)
        let tree = TreeOperation(root: root, input: 4)
        OperationQueue().addOperation(tree)
        tree.waitUntilFinished()
        print(tree.outcome!)   // failed(tree node batch[2] failed: ...)
        if case .failed(BatonError.treeNodeFailed(let path, _, _))? = tree.outcome {
            print(path)        // ["batch[2]"]
        }
        XCTAssertEqual(tree.failures.count, 1)
    }
}
