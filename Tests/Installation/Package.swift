// swift-tools-version: 6.0
// A package that depends on URLTaskManager as the README's Installation section says, built and
// tested by scripts/check-installation.sh (which replaces the url dependency by a path to the
// checkout under test). Not part of URLTaskManager's own package.
// README installation manifest: begin
import PackageDescription

let package = Package(
    name: "MyApp",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9)],
    dependencies: [
        .package(url: "https://github.com/OWNER/URLTaskManager.git", from: "0.3.0")
    ],
    targets: [
        .executableTarget(
            name: "MyApp",
            dependencies: [
                .product(name: "URLTaskManager", package: "URLTaskManager"),
                // Only if you use them: retries and the resilience parts; the OAuth2 kit.
                .product(name: "URLTaskResilience", package: "URLTaskManager"),
                .product(name: "URLTaskOAuth2", package: "URLTaskManager"),
                // Only for a fleet: one credential and one rate limit for many processes, on Redis.
                .product(name: "URLTaskRedis", package: "URLTaskManager"),
            ]
        ),
        .testTarget(
            name: "MyAppTests",
            dependencies: [
                .product(name: "URLTaskManager", package: "URLTaskManager"),
                .product(name: "LoopbackServer", package: "URLTaskManager"),
            ]
        ),
    ]
)
// README installation manifest: end
