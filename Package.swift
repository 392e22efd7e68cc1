// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "Baton",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9)],
    products: [
        .library(name: "Baton", targets: ["Baton"]),
        // Network operations: on Linux they link FoundationNetworking (and libcurl), so they are a
        // product of their own and the core never imports it.
        .library(name: "BatonNetwork", targets: ["BatonNetwork"]),
        .executable(name: "baton-cookbook", targets: ["baton-cookbook"]),
        .executable(name: "baton-demo", targets: ["baton-demo"]),
        .executable(name: "baton-bench", targets: ["baton-bench"]),
        .executable(name: "baton-stress", targets: ["baton-stress"]),
        .plugin(name: "BatonScaffold", targets: ["BatonScaffold"]),
    ],
    targets: [
        // The atomic words that keep process-wide locks off per-operation paths (C11: Swift's
        // `Atomic` needs macOS 15 / iOS 18).
        .target(name: "CBatonAtomics"),
        .target(name: "Baton", dependencies: ["CBatonAtomics"]),
        .target(name: "BatonNetwork", dependencies: ["Baton"]),
        // The cookbook crawler; `API` is the static cookbook it crawls, served by `python3 -m http.server`.
        .executableTarget(name: "baton-cookbook", dependencies: ["Baton", "BatonNetwork"], exclude: ["API", "make-api.py"]),
        // The demo's system facts that Swift's C overlays lack (file system types, thread ids).
        .target(name: "CBatonDemo"),
        .executableTarget(name: "baton-demo", dependencies: ["Baton", "CBatonDemo"]),
        .executableTarget(name: "baton-bench", dependencies: ["Baton", "BatonNetwork"]),
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
        // Tested against a real HTTP server (Server/server.py, Python's standard library) on loopback.
        .testTarget(name: "BatonNetworkTests", dependencies: ["Baton", "BatonNetwork", "baton-cookbook"], exclude: ["Server"]),
    ],
    swiftLanguageModes: [.v6]
)
