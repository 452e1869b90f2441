#!/usr/bin/env bash
# Type-checks the Apple part of the platform room (Sources/URLTaskManager/Platform/Apple) on
# Linux, where Apple's Foundation is not available, against the `PlatformSupport` protocol and
# the rest of the library.
#
#     scripts/check-apple-platform.sh
#
# The macOS jobs of the CI workflow compile and test that part for real; this catches, here and
# in seconds, a requirement added to `PlatformSupport` without an Apple answer, or an Apple answer
# that no longer matches the library's types. It copies the core library into a scratch package
# (.build-apple-platform), compiles ApplePlatform.swift as if on Apple (its `#if` turned on, with
# FoundationNetworking imported for URLSession's types), and replaces only `PipelineOwner`, the
# one type that needs the Objective-C runtime, by a stub of the same shape.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

if ! command -v swift >/dev/null 2>&1; then
    export PATH="$PATH:/opt/swift/usr/bin"
fi

scratch="$root/.build-apple-platform"
rm -rf "$scratch/Sources"
mkdir -p "$scratch/Sources"
cp -R Sources/URLTaskManager Sources/URLTaskCrypto "$scratch/Sources/"
apple="$scratch/Sources/URLTaskManager/Platform/Apple"
rm "$apple/PipelineOwner.swift"
sed -i.orig -e 's/^#if !canImport(FoundationNetworking)$/#if true/' \
    -e 's/^import Foundation$/import Foundation\nimport FoundationNetworking/' "$apple/ApplePlatform.swift"
rm "$apple/ApplePlatform.swift.orig"
grep -q '^#if true$' "$apple/ApplePlatform.swift" || { echo "ApplePlatform.swift no longer starts with the expected #if"; exit 1; }
cat >>"$apple/ApplePlatform.swift" <<'SWIFT'

/// Stub of the Objective-C-backed owner (Platform/Apple/PipelineOwner.swift), same shape.
final class PipelineOwner {
    init(pipeline: Pipeline, number: Int) {}
    static func attach(_ owner: PipelineOwner, to session: URLSession) {}
}

/// Fails to compile if ApplePlatform stops conforming to PlatformSupport.
private func applePlatformConforms() -> any PlatformSupport.Type { ApplePlatform.self }
SWIFT
cat >"$scratch/Package.swift" <<'SWIFT'
// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "ApplePlatformCheck",
    targets: [
        .target(name: "URLTaskCrypto"),
        .target(name: "URLTaskManager", dependencies: ["URLTaskCrypto"], swiftSettings: [.unsafeFlags(["-warnings-as-errors"])]),
    ]
)
SWIFT
swift build --package-path "$scratch" 2>&1 | tail -n 20
echo "ApplePlatform conforms to PlatformSupport and compiles beside the library (Linux type-check)."
