// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "URLTaskManager",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9)],
    products: [
        .library(name: "URLTaskManager", targets: ["URLTaskManager"]),
        .library(name: "URLTaskResilience", targets: ["URLTaskResilience"]),
        .library(name: "URLTaskOAuth2", targets: ["URLTaskOAuth2"]),
        .library(name: "URLTaskRedis", targets: ["URLTaskRedis"]),
        .library(name: "LoopbackServer", targets: ["LoopbackServer"]),
        .executable(name: "Examples", targets: ["Examples"]),
    ],
    targets: [
        // The engine: the session, interceptors, transport, reactors, events and the parts every
        // app needs (headers, batching, retries, validation, cURL, trace context).
        .target(name: "URLTaskManager", dependencies: ["URLTaskCrypto"]),
        // Built on URLTaskManager's public API, as an app's own parts would be; beside it they use
        // only the package's plumbing (`package` access: the lock box and the duration clamp).
        .target(name: "URLTaskResilience", dependencies: ["URLTaskManager"]),
        .target(name: "URLTaskOAuth2", dependencies: ["URLTaskManager", "URLTaskCrypto"]),
        // One refresh and one rate limit per fleet of processes, on Redis: a Redis client of its
        // own over the platform's sockets, built on the public API of the three libraries above
        // (and the same `package` plumbing).
        .target(name: "URLTaskRedis", dependencies: ["URLTaskManager", "URLTaskOAuth2", "URLTaskResilience"]),
        // SHA-256 and secure random bytes (PKCE, trace ids, LoopbackServer's body digests): no
        // dependency, not a product.
        .target(name: "URLTaskCrypto"),
        .target(name: "LoopbackServer", dependencies: ["URLTaskCrypto"]),
        // The system's zlib, for the gzip-upload example alone (not a package dependency).
        .systemLibrary(name: "CZlib", path: "Sources/CZlib", providers: [.apt(["zlib1g-dev"])]),
        .executableTarget(
            name: "Examples",
            dependencies: ["URLTaskManager", "URLTaskResilience", "URLTaskOAuth2", "URLTaskRedis", "LoopbackServer", "CZlib"]),
        .executableTarget(name: "Benchmarks", dependencies: ["URLTaskManager", "URLTaskResilience", "URLTaskOAuth2", "LoopbackServer"]),
        // The tests' shared helpers (latches, the parity harness, the kits of the reactor,
        // resilience and OAuth2 tests, the compiled snippets' reader): a regular target, since
        // test targets cannot depend on one another; not a product.
        .target(
            name: "TestSupport",
            dependencies: ["URLTaskManager", "URLTaskOAuth2", "LoopbackServer"],
            path: "Tests/TestSupport"
        ),
        // A test target per library: the engine's, then URLTaskResilience's and URLTaskOAuth2's.
        .testTarget(
            name: "URLTaskManagerTests",
            dependencies: ["URLTaskManager", "URLTaskResilience", "URLTaskOAuth2", "URLTaskCrypto", "LoopbackServer", "TestSupport"]
        ),
        .testTarget(
            name: "URLTaskResilienceTests",
            dependencies: ["URLTaskResilience", "URLTaskManager", "URLTaskOAuth2", "LoopbackServer", "TestSupport"]
        ),
        .testTarget(
            name: "URLTaskOAuth2Tests",
            dependencies: ["URLTaskOAuth2", "URLTaskManager", "URLTaskResilience", "URLTaskCrypto", "LoopbackServer", "TestSupport"]
        ),
        .testTarget(name: "LoopbackServerTests", dependencies: ["LoopbackServer"]),
        // Against a real `redis-server` each test starts on a free port (skipped, with how to
        // install it, where it is absent), fleets of processes included.
        .testTarget(
            name: "URLTaskRedisTests",
            dependencies: ["URLTaskRedis", "URLTaskManager", "URLTaskOAuth2", "URLTaskResilience", "LoopbackServer", "TestSupport"]
        ),
        // Parts a third party writes (a circuit breaker, metrics), on the public API alone: no file
        // of this target imports anything @testable.
        .testTarget(name: "ContractTests", dependencies: ["URLTaskManager", "URLTaskResilience", "LoopbackServer"]),
    ],
    swiftLanguageModes: [.v6]
)
