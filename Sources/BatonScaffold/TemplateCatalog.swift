import Foundation

/// The file templates in `Templates/` and how to render one, outside Xcode.
///
/// One source of truth: the scaffold-operation plugin and the tests render the very files that
/// Xcode uses, reading each template's options (text fields and pop-ups, with their defaults) from
/// its `TemplateInfo.plist`. The tests compile this file through a symlink, since a plugin cannot
/// share a library target.
enum TemplateCatalog {
    /// What can be scaffolded: the plugin's `--kind` values and the template folders.
    static let kinds: [(name: String, folder: String, isTest: Bool)] = [
        ("async", "Baton Async Operation.xctemplate", false),
        ("result", "Baton Result Operation.xctemplate", false),
        ("transform", "Baton Transform Operation.xctemplate", false),
        ("group", "Baton Group Operation.xctemplate", false),
        ("sequence", "Baton Sequence Operation.xctemplate", false),
        ("test", "Baton Operation Tests.xctemplate", true),
        ("xctest", "Baton Operation XCTests.xctemplate", true),
    ]

    static let templateFile = "___FILEBASENAME___.swift"

    /// One option of a template, as its `TemplateInfo.plist` declares it.
    struct Option: Equatable {
        let identifier: String
        let isPopup: Bool
        let defaultValue: String?
        let values: [String]
    }

    /// A template read from disk.
    struct Template {
        let kind: String
        let folder: URL
        let text: String
        let options: [Option]
        let isTest: Bool
    }

    /// Reads the template for `kind` from the `Templates` folder.
    static func template(kind: String, in templates: URL) throws -> Template {
        guard let entry = kinds.first(where: { $0.name == kind }) else {
            throw ScaffoldError.unknownKind(kind, known: kinds.map(\.name))
        }
        let folder = templates.appendingPathComponent(entry.folder)
        let text = try String(contentsOf: folder.appendingPathComponent(templateFile), encoding: .utf8)
        let plistData = try Data(contentsOf: folder.appendingPathComponent("TemplateInfo.plist"))
        guard let plist = try PropertyListSerialization.propertyList(from: plistData, format: nil) as? [String: Any],
            let rawOptions = plist["Options"] as? [[String: Any]]
        else {
            throw ScaffoldError.brokenTemplate(entry.folder, "TemplateInfo.plist has no Options")
        }
        let options = rawOptions.compactMap { option -> Option? in
            guard let identifier = option["Identifier"] as? String, identifier != "productName" else { return nil }
            return Option(
                identifier: identifier,
                isPopup: option["Type"] as? String == "popup",
                defaultValue: option["Default"] as? String,
                values: option["Values"] as? [String] ?? []
            )
        }
        return Template(kind: kind, folder: folder, text: text, options: options, isTest: entry.isTest)
    }

    /// The values the command line leaves out that follow from the file's name: a test of
    /// `FetchRecipe` is named `FetchRecipeTests`, so `--operation` may be left out. A test whose name
    /// does not end in `Tests` needs `--operation` (Xcode's default, `MyOperation`, would not compile).
    static func completing(_ values: [String: String], for template: Template, name: String) throws -> [String: String] {
        guard template.isTest, values["operationName"] == nil else { return values }
        guard name.hasSuffix("Tests"), name.count > "Tests".count else {
            throw ScaffoldError.usage(
                "which operation does \(name) test? Pass --operation <Name>, or name the test after it (FetchRecipeTests tests FetchRecipe)"
            )
        }
        return values.merging(["operationName": String(name.dropLast("Tests".count))]) { $1 }
    }

    /// Renders `template` for a file named `name`, with `values` for its options (defaults fill the rest).
    static func render(_ template: Template, name: String, values: [String: String]) throws -> String {
        guard isIdentifier(name) else { throw ScaffoldError.notAnIdentifier(name) }
        let known = Set(template.options.map(\.identifier))
        if let unknown = values.keys.sorted().first(where: { !known.contains($0) }) {
            throw ScaffoldError.unknownOption(unknown, kind: template.kind, known: template.options.map(\.identifier))
        }
        var text = template.text
            .replacingOccurrences(
                of: "___FILEHEADER___", with: "\n//  \(name).swift\n//  Made from Baton's \(template.kind) template.\n//"
            )
            .replacingOccurrences(of: "___FILEBASENAMEASIDENTIFIER___", with: name)
            .replacingOccurrences(of: "___FILEBASENAME___", with: name)
        for option in template.options {
            guard let value = values[option.identifier] ?? option.defaultValue else {
                throw ScaffoldError.missingOption(option.identifier, kind: template.kind)
            }
            if option.isPopup {
                guard option.values.contains(value) else {
                    throw ScaffoldError.invalidValue(value, option: option.identifier, allowed: option.values)
                }
            } else if !isTypeName(value) {
                throw ScaffoldError.invalidValue(value, option: option.identifier, allowed: ["a Swift type or identifier"])
            }
            text = text.replacingOccurrences(of: "___VARIABLE_\(option.identifier)___", with: value)
        }
        if let range = text.range(of: #"___[A-Za-z_:]+___"#, options: .regularExpression) {
            throw ScaffoldError.brokenTemplate(template.folder.lastPathComponent, "unreplaced macro \(text[range])")
        }
        return text
    }

    private static let keywords: Set<String> = [
        "associatedtype", "class", "deinit", "enum", "extension", "fileprivate", "func", "import", "init",
        "inout", "internal", "let", "open", "operator", "private", "precedencegroup", "protocol", "public",
        "rethrows", "static", "struct", "subscript", "typealias", "var", "break", "case", "catch", "continue",
        "default", "defer", "do", "else", "fallthrough", "for", "guard", "if", "in", "repeat", "return",
        "throw", "switch", "where", "while", "Any", "as", "await", "false", "is", "nil", "self", "Self",
        "super", "throws", "true", "try", "some", "any",
    ]

    /// Whether `name` can name a Swift type: a letter or `_`, then letters, digits or `_`; no keyword,
    /// not `_` alone.
    static func isIdentifier(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, !keywords.contains(name), name != "_" else { return false }
        let head = CharacterSet.letters.subtracting(.nonBaseCharacters).union(CharacterSet(charactersIn: "_"))
        let tail = head.union(.decimalDigits)
        return head.contains(first) && name.unicodeScalars.allSatisfy(tail.contains)
    }

    /// Whether `type` is a Swift type as a template can use one: a name (`Recipe`, `Recipe.ID`), with
    /// generic arguments (`Result<Int, any Error>`), an array or dictionary (`[Int]`, `[String: Int]`),
    /// a tuple (`(Int, String)`, `(name: String, age: Int)`), an existential (`any Sendable`), each
    /// optionally followed by `?`. Brackets must balance and nothing may be left over, so `Int>` or
    /// `[Int` is refused; `Any` is refused too, since outputs must be `Sendable`.
    static func isTypeName(_ type: String) -> Bool {
        guard !type.contains("___") else { return false }
        var parser = TypeParser(type)
        return parser.parseType() && parser.isAtEnd
    }

    /// A recursive-descent reader of the type grammar `isTypeName` accepts.
    private struct TypeParser {
        private let scalars: [Unicode.Scalar]
        private var index = 0
        private var depth = 0

        init(_ text: String) {
            scalars = Array(text.unicodeScalars)
        }

        var isAtEnd: Bool {
            mutating get {
                skipSpaces()
                return index == scalars.count
            }
        }

        /// type := (name generic? | '[' type (':' type)? ']' | '(' (type (',' type)*)? ')') '?'*
        mutating func parseType() -> Bool {
            depth += 1
            defer { depth -= 1 }
            guard depth < 32 else { return false }
            skipSpaces()
            if take("[") {
                guard parseType() else { return false }
                if take(":") && !parseType() { return false }
                guard take("]") else { return false }
            } else if take("(") {
                if !take(")") {
                    repeat {
                        skipLabel()
                        guard parseType() else { return false }
                    } while take(",")
                    guard take(")") else { return false }
                }
            } else {
                if takeWord("any") || takeWord("some") { skipSpaces() }
                guard parseName() else { return false }
                if take("<") {
                    repeat {
                        guard parseType() else { return false }
                    } while take(",")
                    guard take(">") else { return false }
                }
            }
            // `?` follows its type directly (`Int ?` does not compile).
            while index < scalars.count, scalars[index] == "?" { index += 1 }
            return true
        }

        /// Skips a tuple element's `label:`, if there is one.
        private mutating func skipLabel() {
            let start = index
            skipSpaces()
            let wordStart = index
            while index < scalars.count, Self.identifierScalars.contains(scalars[index]) { index += 1 }
            if index > wordStart, take(":") { return }
            index = start
        }

        /// Takes `word` followed by a space (a keyword such as `any`), or nothing.
        private mutating func takeWord(_ word: String) -> Bool {
            skipSpaces()
            let wanted = Array(word.unicodeScalars)
            guard index + wanted.count < scalars.count, Array(scalars[index..<index + wanted.count]) == wanted,
                scalars[index + wanted.count] == " "
            else { return false }
            index += wanted.count
            return true
        }

        /// name := identifier ('.' identifier)*, with no space around the dots.
        private mutating func parseName() -> Bool {
            skipSpaces()
            while true {
                let start = index
                while index < scalars.count, Self.identifierScalars.contains(scalars[index]) { index += 1 }
                var word = String.UnicodeScalarView()
                word.append(contentsOf: scalars[start..<index])
                guard TemplateCatalog.isIdentifier(String(word)) else { return false }
                guard index < scalars.count, scalars[index] == "." else { return true }
                index += 1
            }
        }

        private static let identifierScalars = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "_"))

        /// Takes `symbol`, spaces before it included; leaves the position alone when it is not next.
        private mutating func take(_ symbol: Unicode.Scalar) -> Bool {
            let start = index
            skipSpaces()
            guard index < scalars.count, scalars[index] == symbol else {
                index = start
                return false
            }
            index += 1
            return true
        }

        private mutating func skipSpaces() {
            while index < scalars.count, scalars[index] == " " { index += 1 }
        }
    }
}

/// What goes wrong when scaffolding, each naming the culprit.
enum ScaffoldError: Error, CustomStringConvertible {
    case unknownKind(String, known: [String])
    case notAnIdentifier(String)
    case unknownOption(String, kind: String, known: [String])
    case missingOption(String, kind: String)
    case invalidValue(String, option: String, allowed: [String])
    case brokenTemplate(String, String)
    case unknownTarget(String, known: [String])
    case ambiguousTarget(known: [String])
    case fileExists(String)
    case usage(String)

    var description: String {
        "scaffold-operation: " + message
    }

    private var message: String {
        switch self {
        case .unknownKind(let kind, let known):
            return "unknown kind '\(kind)'; use one of: \(known.joined(separator: ", "))"
        case .notAnIdentifier(let name):
            return "'\(name)' is not a Swift identifier: use letters, digits and _, not starting with a digit, and no keyword"
        case .unknownOption(let option, let kind, let known):
            return
                "the \(kind) template has no option '\(option)'; it has: \(known.isEmpty ? "none" : known.joined(separator: ", "))"
        case .missingOption(let option, let kind):
            return "the \(kind) template needs a value for '\(option)'"
        case .invalidValue(let value, let option, let allowed):
            return "'\(value)' is not a valid \(option); allowed: \(allowed.joined(separator: ", "))"
        case .brokenTemplate(let folder, let problem):
            return "template \(folder) is broken: \(problem)"
        case .unknownTarget(let target, let known):
            return "no target '\(target)' in this package; its targets: \(known.joined(separator: ", "))"
        case .ambiguousTarget(let known):
            return "this package has several targets; choose one with --target (\(known.joined(separator: ", ")))"
        case .fileExists(let path):
            return "\(path) exists; pass --overwrite to replace it"
        case .usage(let message):
            return message
        }
    }
}
