import Foundation
import URLTaskCrypto
import URLTaskManager

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A ``CredentialStore`` that keeps the credential in one JSON file, readable by its owner
/// only: the store for Linux servers and command-line tools, and anywhere without a Keychain.
///
/// ```swift
/// let store = FileCredentialStore(url: URL(fileURLWithPath: "/var/lib/myapp/credential.json"))
/// let auth = OAuth2Authenticator(origins: [api], tokenEndpoint: endpoint, store: store)
/// ```
///
/// - **Owner only.** The file is created with permissions `0600` (whatever the umask), and a
///   folder it has to create gets `0700`.
/// - **Atomic replace.** A save writes a temporary file in the same folder, flushes it to disk
///   (`fsync`), renames it over the file and flushes the folder: after a crash or a power loss
///   the file holds the old credential or the new one, never a mix, and a temporary file left by
///   a crash is never read. Concurrent saves (from tasks, or processes sharing the file) each
///   write their own temporary file; the last rename wins.
/// - **Typed errors, no secrets.** A file that is not a credential fails ``load()`` with
///   ``FileCredentialStoreError/Kind/corruptFile(reason:)``, whose reason names what is wrong,
///   never what the file holds; a failed system call names the call, the path and `errno`.
///
/// `load()` answers `nil` when there is no file (signed out). The file is read and written on
/// the calling thread; a save is a few small writes and two `fsync`s.
public struct FileCredentialStore: CredentialStore {
    /// The file that holds the credential.
    public let url: URL

    /// A store keeping its credential at `url`. Nothing is read or written until the first call.
    public init(url: URL) {
        self.url = url
    }

    public func load() async throws -> OAuth2Credential? {
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch let error as CocoaError where error.code == .fileReadNoSuchFile {
            return nil
        } catch {
            if !FileManager.default.fileExists(atPath: url.path) { return nil }
            throw FileCredentialStoreError(path: url.path, kind: .systemCallFailed(operation: "read", errno: Self.errnoOf(error)))
        }
        do {
            return try JSONDecoder().decode(OAuth2Credential.self, from: data)
        } catch {
            throw FileCredentialStoreError(path: url.path, kind: .corruptFile(reason: Self.reason(error, byteCount: data.count)))
        }
    }

    public func save(_ credential: OAuth2Credential) async throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data: Data
        do {
            data = try encoder.encode(credential)
        } catch {
            throw FileCredentialStoreError(path: url.path, kind: .corruptFile(reason: "the credential could not be encoded"))
        }
        try write(data)
    }

    public func clear() async throws {
        if unlink(url.path) != 0 {
            let code = errno
            if code == ENOENT { return }
            throw FileCredentialStoreError(path: url.path, kind: .systemCallFailed(operation: "unlink", errno: code))
        }
        try syncFolder()
    }

    /// A step of a save, for tests that stop a save where a crash would.
    enum Step {
        case temporaryFileWritten
    }

    /// Writes `data` atomically: temporary file, `fsync`, rename, `fsync` of the folder.
    /// `stoppingAfter` abandons the save at that step, as a crash would (tests only).
    func write(_ data: Data, stoppingAfter stop: Step? = nil) throws {
        let folder = url.deletingLastPathComponent()
        try makeFolder(folder)
        let temporary = folder.appendingPathComponent(".\(url.lastPathComponent).\(RandomBytes.hex(RandomBytes.make(8))).tmp")
        let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw failure("open", temporary) }
        var renamed = false
        defer { if !renamed, stop == nil { unlink(temporary.path) } }
        do {
            defer { close(descriptor) }
            // The umask can only take bits away; this makes it exactly 0600 whatever it is.
            guard fchmod(descriptor, 0o600) == 0 else { throw failure("fchmod", temporary) }
            try data.withUnsafeBytes { buffer in
                var offset = 0
                while offset < buffer.count {
                    let written = Glue.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                    if written < 0 {
                        if errno == EINTR { continue }
                        throw failure("write", temporary)
                    }
                    offset += written
                }
            }
            guard fsync(descriptor) == 0 else { throw failure("fsync", temporary) }
        }
        if stop == .temporaryFileWritten { return }
        guard rename(temporary.path, url.path) == 0 else { throw failure("rename", url) }
        renamed = true
        try syncFolder()
    }

    /// Flushes the folder, so that a rename or an unlink survives a power loss.
    private func syncFolder() throws {
        let folder = url.deletingLastPathComponent()
        let descriptor = open(folder.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw failure("open", folder) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw failure("fsync", folder) }
    }

    /// Creates `folder` (and its parents) with permissions 0700 if it does not exist.
    private func makeFolder(_ folder: URL) throws {
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: folder.path, isDirectory: &isFolder), isFolder.boolValue { return }
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw FileCredentialStoreError(path: folder.path, kind: .systemCallFailed(operation: "mkdir", errno: Self.errnoOf(error)))
        }
    }

    private func failure(_ operation: String, _ file: URL) -> FileCredentialStoreError {
        FileCredentialStoreError(path: file.path, kind: .systemCallFailed(operation: operation, errno: errno))
    }

    private static func errnoOf(_ error: any Error) -> Int32 {
        ((error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError).flatMap { $0.domain == NSPOSIXErrorDomain ? Int32($0.code) : nil }
            ?? 0
    }

    /// Why the file is not a credential, in words of our own: a decoder's message may quote the
    /// bytes it choked on, and those bytes may be a token.
    private static func reason(_ error: any Error, byteCount: Int) -> String {
        guard let error = error as? DecodingError else { return "it is not a credential" }
        let path: ([any CodingKey]) -> String = { keys in keys.map(\.stringValue).joined(separator: ".") }
        switch error {
        case .keyNotFound(let key, let context):
            return "the field \(path(context.codingPath + [key])) is missing"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            return "the field \(path(context.codingPath)) has the wrong type"
        case .dataCorrupted(let context) where context.codingPath.isEmpty:
            return byteCount == 0 ? "the file is empty" : "the file is not JSON (\(byteCount) bytes)"
        case .dataCorrupted(let context):
            return "the field \(path(context.codingPath)) is invalid"
        @unknown default:
            return "it is not a credential"
        }
    }
}

/// Why a ``FileCredentialStore`` could not load, save or clear its file. Its text names the
/// file and what went wrong, never the file's contents.
public struct FileCredentialStoreError: Error, Sendable, Hashable, CustomStringConvertible, LocalizedError {
    /// The file (or folder) concerned.
    public let path: String
    /// What went wrong.
    public let kind: Kind

    /// What went wrong.
    public enum Kind: Sendable, Hashable {
        /// The file exists but does not hold a credential (truncated, edited, another format):
        /// delete it or sign in again, which replaces it.
        case corruptFile(reason: String)
        /// A system call failed: its name (`open`, `write`, `fsync`, `rename`, `unlink`,
        /// `read`, `mkdir`) and `errno` (0 if unknown).
        case systemCallFailed(operation: String, errno: Int32)
    }

    /// What went wrong and where; never the file's contents.
    public var description: String {
        switch kind {
        case .corruptFile(let reason):
            return "The credential file \(path) is corrupt: \(reason)"
        case .systemCallFailed(let operation, let code):
            return "The credential file \(path) could not be stored: \(operation) failed with errno \(code)"
                + (code == 0 ? "" : " (\(String(cString: strerror(code))))")
        }
    }

    /// The same text as ``description``.
    public var errorDescription: String? { description }
}

/// The C library's `write`, which the store's own method name would otherwise hide.
private enum Glue {
    static func write(_ descriptor: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
        #if canImport(Glibc)
        Glibc.write(descriptor, buffer, count)
        #elseif canImport(Musl)
        Musl.write(descriptor, buffer, count)
        #else
        Darwin.write(descriptor, buffer, count)
        #endif
    }
}
