import Foundation
import XCTest

/// Renders every template with every value of its pop-ups and compares the result with the golden
/// files in `Golden/`. Set `BATON_UPDATE_GOLDEN=1` to rewrite them after changing a template (and read
/// the diff).
final class TemplateTests: BatonTestCase {
    private let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    private var templates: URL { root.appendingPathComponent("Templates") }
    private var golden: URL { root.appendingPathComponent("Tests/BatonTests/Templates/Golden") }

    /// Names and text-field values per kind, the same as `.ci/scaffold-check` passes to the plugin, so
    /// that the script can compare what the plugin wrote with these golden files. Pop-ups take each of
    /// their values in turn.
    static let samples: [String: (name: String, values: [String: String])] = [
        "async": ("LoadSettings", [:]),
        "result": ("CountRecipes", ["outputType": "Int"]),
        "transform": ("FetchRecipe", ["inputType": "RecipeID", "outputType": "Recipe"]),
        "group": ("ImportAll", [:]),
        "sequence": ("ImportSteps", ["outputType": "Recipe"]),
        "test": ("FetchRecipeTests", ["operationName": "FetchRecipe", "moduleName": "App"]),
        "xctest": ("FetchRecipeXCTests", ["operationName": "FetchRecipe", "moduleName": "App"]),
    ]

    /// Every variant of every template: its golden file's name and the values it is rendered with.
    private func variants() throws -> [(file: String, template: TemplateCatalog.Template, name: String, values: [String: String])]
    {
        var variants = [(file: String, template: TemplateCatalog.Template, name: String, values: [String: String])]()
        for kind in TemplateCatalog.kinds {
            let template = try TemplateCatalog.template(kind: kind.name, in: templates)
            let sample = try XCTUnwrap(Self.samples[kind.name])
            let popups = template.options.filter(\.isPopup)
            if popups.isEmpty { variants.append(("\(kind.name).swift.golden", template, sample.name, sample.values)) }
            for popup in popups {
                for value in popup.values {
                    let values = sample.values.merging([popup.identifier: value]) { $1 }
                    variants.append(("\(kind.name)-\(value).swift.golden", template, sample.name, values))
                }
            }
        }
        return variants
    }

    func testEveryTemplateWithEveryOptionValueMatchesItsGoldenFile() throws {
        let update = ProcessInfo.processInfo.environment["BATON_UPDATE_GOLDEN"] == "1"
        let all = try variants()
        XCTAssertEqual(all.count, 3 + 3 + 3 + 2 + 1 + 1 + 1, "async, result and transform have three policies, groups two")
        for variant in all {
            let rendered = try TemplateCatalog.render(variant.template, name: variant.name, values: variant.values)
            let file = golden.appendingPathComponent(variant.file)
            if update { try rendered.write(to: file, atomically: true, encoding: .utf8) }
            guard let expected = try? String(contentsOf: file, encoding: .utf8) else {
                XCTFail("no golden file \(variant.file); run the tests once with BATON_UPDATE_GOLDEN=1")
                continue
            }
            XCTAssertEqual(rendered, expected, "\(variant.file) differs from what the template renders")
        }
        let expectedFiles = Set(all.map(\.file))
        let present = Set(try FileManager.default.contentsOfDirectory(atPath: golden.path))
        XCTAssertEqual(present.subtracting(expectedFiles), [], "golden files that no template renders")
    }

    func testNoMacroIsLeftAndEveryMacroIsAnOption() throws {
        for variant in try variants() {
            let rendered = try TemplateCatalog.render(variant.template, name: variant.name, values: variant.values)
            XCTAssertNil(rendered.range(of: "___"), "\(variant.file) keeps a macro")
            XCTAssertTrue(
                rendered.contains("class \(variant.name)") || rendered.contains("struct \(variant.name)"),
                "\(variant.file) does not declare its type")
            XCTAssertTrue(rendered.contains("/// "), "\(variant.file) has no doc comment")
        }
        for kind in TemplateCatalog.kinds {
            let template = try TemplateCatalog.template(kind: kind.name, in: templates)
            let used = Set(
                template.text.components(separatedBy: "___VARIABLE_").dropFirst().compactMap {
                    $0.components(separatedBy: "___").first
                })
            XCTAssertEqual(used, Set(template.options.map(\.identifier)), "\(kind.folder): macros and options differ")
        }
    }

    func testEveryPlistIsAnXcodeFileTemplate() throws {
        for kind in TemplateCatalog.kinds {
            let data = try Data(
                contentsOf: templates.appendingPathComponent(kind.folder).appendingPathComponent("TemplateInfo.plist"))
            let plist = try XCTUnwrap(try PropertyListSerialization.propertyList(from: data, format: nil) as? [String: Any])
            XCTAssertEqual(plist["Kind"] as? String, "Xcode.IDEFoundation.TextSubstitutionFileTemplateKind", kind.folder)
            XCTAssertEqual(plist["MainTemplateFile"] as? String, TemplateCatalog.templateFile, kind.folder)
            let options = try XCTUnwrap(plist["Options"] as? [[String: Any]])
            XCTAssertEqual(options.first?["Identifier"] as? String, "productName", kind.folder)
        }
    }

    func testBadInputIsRefusedWithAClearError() throws {
        let transform = try TemplateCatalog.template(kind: "transform", in: templates)
        let cases: [(name: String, values: [String: String], message: String)] = [
            ("9Lives", [:], "'9Lives' is not a Swift identifier"),
            ("struct", [:], "'struct' is not a Swift identifier"),
            ("Fetch", ["dependencyPolicy": "sometimes"], "'sometimes' is not a valid dependencyPolicy"),
            ("Fetch", ["failurePolicy": "continueOnFailure"], "has no option 'failurePolicy'"),
            ("Fetch", ["inputType": "Int; rm -rf"], "'Int; rm -rf' is not a valid inputType"),
        ]
        for bad in cases {
            XCTAssertThrowsError(try TemplateCatalog.render(transform, name: bad.name, values: bad.values)) { error in
                XCTAssertTrue("\(error)".contains(bad.message), "\(error)")
            }
        }
        XCTAssertThrowsError(try TemplateCatalog.template(kind: "widget", in: templates)) { error in
            XCTAssertTrue("\(error)".contains("unknown kind 'widget'"), "\(error)")
        }
        XCTAssertEqual(
            try TemplateCatalog.render(
                transform, name: "Fetch", values: ["inputType": "[Recipe.ID]", "outputType": "Result<Int, Error>?"]
            )
            .contains("TransformOperation<[Recipe.ID], Result<Int, Error>?>"), true)
    }

    func testTypeArgumentsMustBeWholeTypes() {
        for good in [
            "Int", "Recipe.ID", "[Int]", "[String: [Int]]", "Result<Int, Error>?", "(Int, String)", "()", "Int??",
            "Result<Int, any Error>", "[any Sendable]", "(name: String, age: Int)", "_Private",
        ] {
            XCTAssertTrue(TemplateCatalog.isTypeName(good), good)
        }
        for bad in [
            "Int>", "[Int", "Int]", "Result<Int,>", "Array<>", "<Int>", "Int.", ".Int", "[:]", "Int Int", "", "Int; rm -rf",
            "class", "(Int", "Int<String", "Int ?", "Int. Type", "_", "Any", "\u{0301}Foo", "any",
        ] {
            XCTAssertFalse(TemplateCatalog.isTypeName(bad), bad)
        }
        let result = try? TemplateCatalog.template(kind: "result", in: templates)
        XCTAssertThrowsError(
            try TemplateCatalog.render(XCTUnwrap(result), name: "Count", values: ["outputType": "Int>"])
        ) { error in
            XCTAssertTrue("\(error)".contains("'Int>' is not a valid outputType"), "\(error)")
        }
    }

    func testATestWithoutAnOperationTestsTheOneItIsNamedAfter() throws {
        for kind in ["test", "xctest"] {
            let template = try TemplateCatalog.template(kind: kind, in: templates)
            let values = try TemplateCatalog.completing(["moduleName": "App"], for: template, name: "FetchRecipeTests")
            XCTAssertEqual(values["operationName"], "FetchRecipe", kind)
            XCTAssertTrue(
                try TemplateCatalog.render(template, name: "FetchRecipeTests", values: values)
                    .contains("let operation = FetchRecipe()"),
                kind)
            let chosen = try TemplateCatalog.completing(["operationName": "Other"], for: template, name: "FetchRecipeTests")
            XCTAssertEqual(chosen["operationName"], "Other")
            for unnamed in ["Checks", "Tests"] {
                XCTAssertThrowsError(try TemplateCatalog.completing([:], for: template, name: unnamed)) { error in
                    XCTAssertTrue("\(error)".contains("Pass --operation <Name>"), "\(error)")
                }
            }
        }
        let async = try TemplateCatalog.template(kind: "async", in: templates)
        XCTAssertEqual(
            try TemplateCatalog.completing([:], for: async, name: "LoadTests"), [:], "only test templates take an operation")
    }

    func testTheTestTemplateUsesSwiftTestingAndTheXCTestOneXCTest() throws {
        let modern = try TemplateCatalog.template(kind: "test", in: templates).text
        XCTAssertTrue(modern.contains("import Testing") && modern.contains("@Test") && !modern.contains("XCTest"))
        let classic = try TemplateCatalog.template(kind: "xctest", in: templates).text
        XCTAssertTrue(classic.contains("import XCTest") && classic.contains("XCTestCase"))
    }

    func testTheInstallScriptGivesUsageForAMissingDestination() throws {
        for arguments in [["--destination"], ["--destination", ""], ["--destination", "--help"]] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/bash")
            process.arguments = [templates.appendingPathComponent("install.sh").path] + arguments
            let errors = Pipe()
            process.standardError = errors
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 2, "\(arguments)")
            XCTAssertTrue(text.contains("--destination needs a folder"), text)
            XCTAssertTrue(text.contains("Templates/install.sh --destination DIR"), "usage follows: \(text)")
            XCTAssertFalse(text.contains("parameter null or not set"), "no raw bash error: \(text)")
        }
    }

    func testTheInstallScriptCopiesEveryTemplate() throws {
        let destination = FileManager.default.temporaryDirectory.appendingPathComponent("baton-templates-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: destination) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [templates.appendingPathComponent("install.sh").path, "--destination", destination.path]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0)
        for kind in TemplateCatalog.kinds {
            for file in ["TemplateInfo.plist", TemplateCatalog.templateFile] {
                let copied = destination.appendingPathComponent(kind.folder).appendingPathComponent(file)
                XCTAssertTrue(FileManager.default.fileExists(atPath: copied.path), "missing \(kind.folder)/\(file)")
            }
        }
    }
}
