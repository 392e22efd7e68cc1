import Foundation
import PackagePlugin

/// `swift package --allow-writing-to-package-directory scaffold-operation [options] Name`
///
/// Writes `Sources/<Target>/Name.swift` (or `Tests/<Target>/Name.swift` for `--kind test`) in the
/// package that runs it, rendered from the same templates Xcode uses (`Templates/` in Baton).
/// `swift package scaffold-operation --help` works without the permission flag.
@main
struct ScaffoldOperation: CommandPlugin {
    static let usage = """
        usage: swift package --allow-writing-to-package-directory scaffold-operation [options] <Name>

          --kind async|result|transform|group|sequence|test|xctest
                                    what to make (default: async); test is a Swift Testing suite,
                                    xctest an XCTestCase
          --input <Type>            the input type (transform)
          --output <Type>           the output type (result, transform, sequence)
          --policy <policy>         skipOnFailureOrCancellation | skipOnCancellation | runRegardless
          --failure-policy <policy> continueOnFailure | cancelSiblingsOnFailure (group)
          --operation <Name>        the operation to test (test, xctest; default: the name without
                                    Tests, so FetchRecipeTests tests FetchRecipe)
          --module <Module>         the module that defines it (test; default: the target's name without Tests)
          --target <Target>         where to write (default: the package's only source, or test, target)
          --overwrite               replace an existing file
          --help                    this text (no permission flag needed)
        """

    func performCommand(context: PluginContext, arguments: [String]) async throws {
        try run(context: context, arguments: arguments)
    }

    private func run(context: PluginContext, arguments: [String]) throws {
        var extractor = ArgumentExtractor(arguments)
        if extractor.extractFlag(named: "help") > 0 {
            print(Self.usage)
            return
        }
        let kind = extractor.extractOption(named: "kind").last ?? "async"
        let overwrite = extractor.extractFlag(named: "overwrite") > 0
        let targetName = extractor.extractOption(named: "target").last
        var values = [String: String]()
        for (flag, option) in [
            ("input", "inputType"), ("output", "outputType"), ("policy", "dependencyPolicy"),
            ("failure-policy", "failurePolicy"), ("operation", "operationName"), ("module", "moduleName"),
        ] {
            if let value = extractor.extractOption(named: flag).last { values[option] = value }
        }
        let rest = extractor.remainingArguments
        if let unknown = rest.first(where: { $0.hasPrefix("-") }) {
            throw ScaffoldError.usage("unknown option \(unknown)\n\(Self.usage)")
        }
        guard rest.count == 1, let name = rest.first else {
            throw ScaffoldError.usage("give exactly one name\n\(Self.usage)")
        }
        guard TemplateCatalog.isIdentifier(name) else { throw ScaffoldError.notAnIdentifier(name) }

        let template = try TemplateCatalog.template(kind: kind, in: templatesDirectory(context))
        let target = try chooseTarget(in: context.package, named: targetName, tests: template.isTest)
        if template.isTest && values["moduleName"] == nil, target.name.hasSuffix("Tests") {
            values["moduleName"] = String(target.name.dropLast("Tests".count))
        }
        values = try TemplateCatalog.completing(values, for: template, name: name)
        // A template without an option for a value it was given says so (for example --input on async).
        let text = try TemplateCatalog.render(template, name: name, values: values)

        let file = target.directoryURL.appendingPathComponent("\(name).swift")
        if FileManager.default.fileExists(atPath: file.path) && !overwrite {
            throw ScaffoldError.fileExists(file.path)
        }
        do {
            try text.write(to: file, atomically: true, encoding: .utf8)
        } catch {
            // The sandbox (macOS) keeps the package directory read-only unless the flag is given.
            throw ScaffoldError.usage(
                "could not write \(file.path) (\(error.localizedDescription)); run it as swift package --allow-writing-to-package-directory scaffold-operation ..."
            )
        }
        print("scaffold-operation: wrote \(file.path)")
    }

    /// Baton's `Templates/`: in the package that depends on Baton, or in Baton itself.
    private func templatesDirectory(_ context: PluginContext) -> URL {
        let baton = context.package.dependencies.first { $0.package.displayName.lowercased() == "baton" }?.package
        return (baton ?? context.package).directoryURL.appendingPathComponent("Templates")
    }

    private func chooseTarget(in package: Package, named name: String?, tests: Bool) throws -> SourceModuleTarget {
        let modules = package.targets.compactMap { $0 as? SourceModuleTarget }
        if let name {
            guard let target = modules.first(where: { $0.name == name }) else {
                throw ScaffoldError.unknownTarget(name, known: modules.map(\.name))
            }
            return target
        }
        let candidates = modules.filter { ($0.kind == .test) == tests && $0.kind != .macro }
        guard candidates.count == 1, let only = candidates.first else {
            throw ScaffoldError.ambiguousTarget(known: modules.map(\.name))
        }
        return only
    }
}
