// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "URLTaskManager",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9)],
    products: [
        .library(name: "URLTaskManager", targets: ["URLTaskManager"]),
        .library(name: "LoopbackServer", targets: ["LoopbackServer"]),
        .executable(name: "Examples", targets: ["Examples"]),
    ],
    targets: [
        .target(name: "URLTaskManager"),
        .target(name: "LoopbackServer"),
        // The system's zlib, for the gzip-upload example alone (not a package dependency).
        .systemLibrary(name: "CZlib", path: "Sources/CZlib", providers: [.apt(["zlib1g-dev"])]),
        .executableTarget(name: "Examples", dependencies: ["URLTaskManager", "LoopbackServer", "CZlib"]),
        .executableTarget(name: "Benchmarks", dependencies: ["URLTaskManager", "LoopbackServer"]),
        .testTarget(name: "URLTaskManagerTests", dependencies: ["URLTaskManager", "LoopbackServer"]),
        .testTarget(name: "LoopbackServerTests", dependencies: ["LoopbackServer"]),
    ],
    swiftLanguageModes: [.v6]
)
