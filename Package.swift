// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "Baton",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9)],
    products: [
        .library(name: "Baton", targets: ["Baton"]),
        .executable(name: "baton-demo", targets: ["baton-demo"]),
        .executable(name: "baton-bench", targets: ["baton-bench"]),
        .executable(name: "baton-stress", targets: ["baton-stress"]),
        .plugin(name: "BatonScaffold", targets: ["BatonScaffold"]),
    ],
    targets: [
        .target(name: "Baton"),
        // The demo's system facts that Swift's C overlays lack (file system types, thread ids).
        .target(name: "CBatonDemo"),
        .executableTarget(name: "baton-demo", dependencies: ["Baton", "CBatonDemo"]),
        .executableTarget(name: "baton-bench", dependencies: ["Baton"]),
        .executableTarget(name: "baton-stress", dependencies: ["Baton"]),
        .plugin(
            name: "BatonScaffold",
            capability: .command(
                // No declared permission: SwiftPM refuses to start a plugin that declares one unless
                // `--allow-writing-to-package-directory` is given, which would make `--help` fail.
                // Passed explicitly, the flag still opens the package directory to the sandbox.
                intent: .custom(
                    verb: "scaffold-operation", description: "Writes a new Baton operation subclass from Baton's templates")
            ),
            path: "Sources/BatonScaffold"
        ),
        .testTarget(name: "BatonTests", dependencies: ["Baton", "baton-demo", "CBatonDemo"], exclude: ["Templates/Golden"]),
    ],
    swiftLanguageModes: [.v6]
)
