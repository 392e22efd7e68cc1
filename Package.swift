// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Baton",
    platforms: [.macOS(.v10_15), .iOS(.v13), .tvOS(.v13), .watchOS(.v6)],
    products: [
        .library(name: "Baton", targets: ["Baton"]),
        .executable(name: "baton-demo", targets: ["baton-demo"]),
        .executable(name: "baton-bench", targets: ["baton-bench"]),
    ],
    targets: [
        .target(name: "Baton"),
        .executableTarget(name: "baton-demo", dependencies: ["Baton"]),
        .executableTarget(name: "baton-bench", dependencies: ["Baton"]),
        .testTarget(name: "BatonTests", dependencies: ["Baton"]),
    ],
    swiftLanguageModes: [.v6]
)
