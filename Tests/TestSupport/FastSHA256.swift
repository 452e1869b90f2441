import Foundation
import LoopbackServer
#if canImport(Glibc)
import Glibc
#endif

/// Incremental SHA-256 that is fast enough for 100 MB bodies in a debug build.
///
/// LoopbackServer's `SHA256` is pure Swift and runs at about 28 MB/s unoptimised, so hashing
/// two 100 MB downloads plus the expected value would take over 10 s. The OpenSSL `libcrypto`
/// that FoundationNetworking already loads (through libcurl) hashes at hundreds of MB/s; it
/// is looked up at run time, so the package keeps zero dependencies, and when it is not there
/// the pure-Swift hasher is used instead (slower, same digest). `FastSHA256Tests` checks that
/// both give the same digests as `GeneratedBody.sha256(length:)`.
package final class FastSHA256 {
    private enum Backend {
        case openSSL(UnsafeMutableRawPointer)
        case swift(SHA256)
    }

    private var backend: Backend
    private var digest: String?

    /// Whether the OpenSSL backend is in use.
    package static var usesOpenSSL: Bool { OpenSSL.shared != nil }

    package init(forceSwift: Bool = false) {
        if !forceSwift, let openSSL = OpenSSL.shared, let context = openSSL.newContext() {
            backend = .openSSL(context)
        } else {
            backend = .swift(SHA256())
        }
    }

    deinit {
        if case .openSSL(let context) = backend { OpenSSL.shared?.free(context) }
    }

    package func update(_ bytes: UnsafeRawBufferPointer) {
        precondition(digest == nil, "update after finalisation")
        switch backend {
        case .openSSL(let context):
            OpenSSL.shared!.update(context, bytes)
        case .swift(var hasher):
            backend = .swift(SHA256())  // keep the hasher uniquely referenced
            hasher.update(bytes)
            backend = .swift(hasher)
        }
    }

    package func update(_ data: Data) {
        data.withUnsafeBytes { update($0) }
    }

    /// Lowercase hex digest; finalises the hasher (later calls return the same value).
    package func hexDigest() -> String {
        if let digest { return digest }
        let result: String
        switch backend {
        case .openSSL(let context):
            result = OpenSSL.shared!.finish(context)
        case .swift(let hasher):
            result = hasher.hexDigest()
        }
        digest = result
        return result
    }

    /// The hash of `GeneratedBody`'s first `length` bytes (what `GeneratedBody.sha256(length:)`
    /// returns, computed with this hasher).
    package static func generatedBody(length: Int) -> String {
        let hasher = FastSHA256()
        GeneratedBody.forEachPiece(length: length, pieceSize: 1 << 20) { hasher.update($0) }
        return hasher.hexDigest()
    }
}

/// The handful of libcrypto EVP functions needed, resolved with `dlsym`.
private struct OpenSSL: @unchecked Sendable {  // immutable table of C function pointers.
    typealias NewContext = @convention(c) () -> UnsafeMutableRawPointer?
    typealias SHA256Type = @convention(c) () -> UnsafeRawPointer?
    typealias Init = @convention(c) (UnsafeMutableRawPointer?, UnsafeRawPointer?, UnsafeMutableRawPointer?) -> Int32
    typealias Update = @convention(c) (UnsafeMutableRawPointer?, UnsafeRawPointer?, Int) -> Int32
    typealias Final = @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<UInt32>?) -> Int32
    typealias Free = @convention(c) (UnsafeMutableRawPointer?) -> Void

    let newContextFunction: NewContext
    let sha256: SHA256Type
    let initFunction: Init
    let updateFunction: Update
    let finalFunction: Final
    let freeFunction: Free

    static let shared: OpenSSL? = {
        #if canImport(Glibc)
        guard let handle = dlopen("libcrypto.so.3", RTLD_NOW) ?? dlopen("libcrypto.so", RTLD_NOW) else { return nil }
        func symbol<T>(_ name: String, as type: T.Type) -> T? {
            guard let pointer = dlsym(handle, name) else { return nil }
            return unsafeBitCast(pointer, to: type)
        }
        guard let newContext = symbol("EVP_MD_CTX_new", as: NewContext.self),
            let sha256 = symbol("EVP_sha256", as: SHA256Type.self),
            let initFunction = symbol("EVP_DigestInit_ex", as: Init.self),
            let update = symbol("EVP_DigestUpdate", as: Update.self),
            let final = symbol("EVP_DigestFinal_ex", as: Final.self),
            let free = symbol("EVP_MD_CTX_free", as: Free.self)
        else { return nil }
        return OpenSSL(
            newContextFunction: newContext, sha256: sha256, initFunction: initFunction,
            updateFunction: update, finalFunction: final, freeFunction: free)
        #else
        return nil
        #endif
    }()

    func newContext() -> UnsafeMutableRawPointer? {
        guard let context = newContextFunction() else { return nil }
        guard initFunction(context, sha256(), nil) == 1 else {
            freeFunction(context)
            return nil
        }
        return context
    }

    func update(_ context: UnsafeMutableRawPointer, _ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        let ok = updateFunction(context, base, bytes.count)
        precondition(ok == 1, "EVP_DigestUpdate failed")
    }

    func finish(_ context: UnsafeMutableRawPointer) -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = digest.withUnsafeMutableBufferPointer { finalFunction(context, $0.baseAddress, &length) }
        precondition(ok == 1 && length == 32, "EVP_DigestFinal_ex failed")
        return digest.map { String(format: "%02x", $0) }.joined()
    }

    func free(_ context: UnsafeMutableRawPointer) {
        freeFunction(context)
    }
}
