// swift-tools-version: 6.0
// Code written against URLTaskManager 0.2.0 (Before) and the same code after the "Migrating from
// 0.2" article's steps (After), built by scripts/check-migration.sh against this checkout: After
// must build, and every diagnostic of Before must say what to write instead. BeforePatterns holds
// 0.2.0's patterns over OAuth2Error, for which no declaration can give the compiler a message:
// it must fail with exactly the diagnostics its comments (and the article) quote. ZeroThreeCodes
// names 0.3's satellite error codes with URLTaskManager alone: each refusal names the import
// that declares the code. Not part of
// URLTaskManager's own package. The targets already depend on the three products and import
// them (the article's first step): without it, 0.2's names are simply not in scope.
import PackageDescription

let package = Package(
    name: "Migration",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9)],
    dependencies: [
        .package(name: "URLTaskManager", path: "../..")
    ],
    targets: ["Before", "After", "BeforePatterns"].map { name in
        .executableTarget(
            name: name,
            dependencies: [
                .product(name: "URLTaskManager", package: "URLTaskManager"),
                .product(name: "URLTaskResilience", package: "URLTaskManager"),
                .product(name: "URLTaskOAuth2", package: "URLTaskManager"),
            ],
            path: name
        )
    } + [
        // 0.3's code naming the satellites' error codes with URLTaskManager alone: refused, each
        // diagnostic naming the import that declares the code.
        .executableTarget(
            name: "ZeroThreeCodes", dependencies: [.product(name: "URLTaskManager", package: "URLTaskManager")], path: "ZeroThreeCodes")
    ],
    swiftLanguageModes: [.v6]
)
