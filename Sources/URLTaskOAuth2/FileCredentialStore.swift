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
/// - **Trusts nothing it reads.** ``load()`` adopts a credential only from a regular file owned
///   by the process's user that no one else may read or write, opened without following a
///   symbolic link (unless ``Options/followsSymbolicLinks``), and no larger than
///   ``Options/maximumFileSize``: a credential another user planted, or left readable, is refused
///   with a ``FileCredentialStoreError``, not used. The checks are made on the open file itself,
///   so the file cannot be swapped between the check and the read.
/// - **Atomic replace.** A save writes a temporary file in the same folder, flushes it to disk
///   (`fsync`), renames it over the file and flushes the folder: after a crash or a power loss
///   the file holds the old credential or the new one, never a mix, and a temporary file left by
///   a crash is never read. Concurrent saves (from tasks, or processes sharing the file) each
///   write their own temporary file; the last rename wins. A save refuses a folder that other
///   users may write to (unless it is sticky, as `/tmp` is): they could replace the file.
/// - **Shared by processes.** It is a ``SharedCredentialStore``: authenticators in several
///   processes (or several store values on one path) renew the credential one at a time, under
///   an `flock` on `.<name>.lock` beside the file, each reading what the one before saved
///   instead of sending a refresh token already rotated away (see
///   ``withRefreshLock(waitingAtMost:_:)``).
/// - **Typed errors, no secrets.** A file that is not a credential fails ``load()`` with
///   ``FileCredentialStoreError/Kind/corruptFile(reason:)``, whose reason names what is wrong,
///   never what the file holds; a failed system call names the call, the path and `errno`.
///
/// `load()` answers `nil` when there is no file (signed out). The file is read and written on
/// the calling thread; a save is a few small writes and two `fsync`s.
public struct FileCredentialStore: CredentialStore {
    /// What a store accepts besides a plain owner-only file at its path.
    public struct Options: Sendable, Hashable {
        /// Whether the path may be a symbolic link. Off by default: a link another user could
        /// point elsewhere would make the store read their credential, or write yours where they
        /// can read it. When on, the link's target must pass every other check, and a save
        /// replaces the target atomically (in the target's folder), so the link stays a link.
        public var followsSymbolicLinks: Bool
        /// The largest file ``FileCredentialStore/load()`` reads, in bytes (default 64 KiB; a
        /// credential is a few hundred bytes, a large ID token a few KiB). Larger files are
        /// refused before they are read. Values below 1 count as 1.
        public var maximumFileSize: Int

        /// Options with every default: no symbolic link, at most 64 KiB.
        public init(followsSymbolicLinks: Bool = false, maximumFileSize: Int = 64 * 1024) {
            self.followsSymbolicLinks = followsSymbolicLinks
            self.maximumFileSize = max(1, maximumFileSize)
        }

        /// No symbolic link, at most 64 KiB.
        public static let `default` = Options()
    }

    /// The file that holds the credential.
    public let url: URL
    /// What the store accepts besides a plain owner-only file.
    public let options: Options

    /// A store keeping its credential at `url`. Nothing is read or written until the first call.
    public init(url: URL, options: Options = .default) {
        self.url = url
        self.options = options
    }

    public func load() async throws -> OAuth2Credential? {
        let flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | (options.followsSymbolicLinks ? 0 : O_NOFOLLOW)
        let descriptor = open(url.path, flags)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT { return nil }
            if code == ELOOP { throw refusal(.symbolicLink) }
            throw FileCredentialStoreError(path: url.path, kind: .systemCallFailed(operation: "open", errno: code))
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw failure("fstat", url) }
        try checkTrusted(status)
        let data = try read(descriptor, expected: Int(status.st_size))
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

    /// Removes the file (signs out). A symbolic link at the path is removed itself where the
    /// store does not follow links, and its target where it does (the link is then left
    /// dangling, and the next save creates the target again).
    public func clear() async throws {
        let target = options.followsSymbolicLinks ? try fileToReplace() : url
        if unlink(target.path) != 0 {
            let code = errno
            if code == ENOENT { return }
            throw FileCredentialStoreError(path: target.path, kind: .systemCallFailed(operation: "unlink", errno: code))
        }
        try syncFolder(target.deletingLastPathComponent())
    }

    /// Refuses a file the process's user does not own alone: not a regular file, owned by
    /// someone else, open to the group or others, or larger than the limit.
    private func checkTrusted(_ status: stat) throws {
        guard status.st_mode & S_IFMT == S_IFREG else { throw refusal(.notARegularFile) }
        guard status.st_uid == geteuid() else { throw refusal(.ownedByAnotherUser(uid: UInt32(status.st_uid))) }
        let permissions = UInt16(status.st_mode & 0o7777)
        guard permissions & 0o077 == 0 else { throw refusal(.accessibleByOthers(permissions: permissions)) }
        let size = Int64(status.st_size)
        guard size <= Int64(options.maximumFileSize) else {
            throw refusal(.tooLarge(byteCount: size, limit: options.maximumFileSize))
        }
    }

    /// Reads the open file, never more than the limit (a file that grows after `fstat` is
    /// refused as too large, not read to its end).
    private func read(_ descriptor: Int32, expected: Int) throws -> Data {
        let limit = options.maximumFileSize
        var data = Data(count: min(max(expected, 0), limit) + 1)
        var total = 0
        while true {
            if total == data.count {
                guard data.count <= limit else { throw refusal(.tooLarge(byteCount: Int64(total), limit: limit)) }
                data.count = min(limit + 1, data.count * 2)
            }
            let count = data.count
            let read = data.withUnsafeMutableBytes { buffer in Glue.read(descriptor, buffer.baseAddress! + total, count - total) }
            if read < 0 {
                if errno == EINTR { continue }
                throw failure("read", url)
            }
            if read == 0 { break }
            total += read
        }
        data.count = total
        return data
    }

    func refusal(_ kind: FileCredentialStoreError.Kind) -> FileCredentialStoreError {
        FileCredentialStoreError(path: url.path, kind: kind)
    }

    /// The file a save or a clear replaces: the store's path, or the target of the symbolic
    /// link there when links are allowed (refused otherwise, before anything is written).
    func fileToReplace() throws -> URL {
        var status = stat()
        guard lstat(url.path, &status) == 0 else {
            // Nothing there yet (or a parent is missing or not a folder: making it says why).
            if errno == ENOENT || errno == ENOTDIR { return url }
            throw failure("lstat", url)
        }
        guard status.st_mode & S_IFMT == S_IFLNK else { return url }
        guard options.followsSymbolicLinks else { throw refusal(.symbolicLink) }
        guard let resolved = realpath(url.path, nil) else {
            // A dangling link: the save creates its target.
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: url.path) else {
                throw failure("readlink", url)
            }
            return URL(fileURLWithPath: target, relativeTo: url.deletingLastPathComponent()).standardizedFileURL
        }
        defer { free(resolved) }
        return URL(fileURLWithPath: String(cString: resolved))
    }

    /// A step of a save, for tests that stop a save where a crash would.
    enum Step {
        case temporaryFileWritten
    }

    /// Writes `data` atomically: temporary file, `fsync`, rename, `fsync` of the folder.
    /// `stoppingAfter` abandons the save at that step, as a crash would (tests only).
    func write(_ data: Data, stoppingAfter stop: Step? = nil) throws {
        let target = try fileToReplace()
        let folder = target.deletingLastPathComponent()
        try makeFolder(folder)
        try checkFolder(folder)
        let temporary = folder.appendingPathComponent(".\(target.lastPathComponent).\(RandomBytes.hex(RandomBytes.make(8))).tmp")
        let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
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
        guard rename(temporary.path, target.path) == 0 else { throw failure("rename", target) }
        renamed = true
        try syncFolder(folder)
    }

    /// Refuses a folder that users other than its owner may write to without the sticky bit:
    /// anyone who can write there can rename another file over the credential.
    func checkFolder(_ folder: URL) throws {
        var status = stat()
        guard stat(folder.path, &status) == 0 else { throw failure("stat", folder) }
        let permissions = UInt16(status.st_mode & 0o7777)
        if permissions & 0o022 != 0, permissions & 0o1000 == 0 {
            throw FileCredentialStoreError(path: folder.path, kind: .folderWritableByOthers(permissions: permissions))
        }
    }

    /// Flushes `folder`, so that a rename or an unlink survives a power loss.
    private func syncFolder(_ folder: URL) throws {
        let descriptor = open(folder.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw failure("open", folder) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw failure("fsync", folder) }
    }

    /// Creates `folder` (and its parents) with permissions 0700 if it does not exist.
    func makeFolder(_ folder: URL) throws {
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: folder.path, isDirectory: &isFolder), isFolder.boolValue { return }
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw FileCredentialStoreError(path: folder.path, kind: .systemCallFailed(operation: "mkdir", errno: Self.errnoOf(error)))
        }
    }

    func failure(_ operation: String, _ file: URL) -> FileCredentialStoreError {
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
        /// `read`, `mkdir`, ...) and `errno` (0 if unknown).
        case systemCallFailed(operation: String, errno: Int32)
        /// The path is a symbolic link, which the store does not follow unless
        /// ``FileCredentialStore/Options/followsSymbolicLinks`` says so.
        case symbolicLink
        /// The path is not a regular file (a folder, a device, a pipe).
        case notARegularFile
        /// The file belongs to another user (`uid`): its credential could be theirs to choose.
        case ownedByAnotherUser(uid: UInt32)
        /// Users other than the owner may read or write the file (`permissions`, such as `0o644`):
        /// its credential may have been read or replaced. `chmod 600` it, or sign in again.
        case accessibleByOthers(permissions: UInt16)
        /// The file is larger than ``FileCredentialStore/Options/maximumFileSize`` (`limit`).
        case tooLarge(byteCount: Int64, limit: Int)
        /// Users other than the folder's owner may write to the folder (`permissions`, such as
        /// `0o777`) and it is not sticky: they could replace the file. Keep it in a folder only
        /// you can write to.
        case folderWritableByOthers(permissions: UInt16)
    }

    /// What went wrong and where; never the file's contents.
    public var description: String {
        switch kind {
        case .corruptFile(let reason):
            return "The credential file \(path) is corrupt: \(reason)"
        case .systemCallFailed(let operation, let code):
            return "The credential file \(path) could not be stored: \(operation) failed with errno \(code)"
                + (code == 0 ? "" : " (\(String(cString: strerror(code))))")
        case .symbolicLink:
            return "The credential file \(path) is a symbolic link, which the store does not follow (see Options.followsSymbolicLinks)"
        case .notARegularFile:
            return "The credential file \(path) is not a regular file"
        case .ownedByAnotherUser(let uid):
            return "The credential file \(path) belongs to user \(uid), not to this process's user: it was not used"
        case .accessibleByOthers(let permissions):
            return "The credential file \(path) has permissions \(Self.octal(permissions)): users other than its owner may read or "
                + "write it, so it was not used (chmod 600 it, or sign in again)"
        case .tooLarge(let byteCount, let limit):
            return "The credential file \(path) has \(byteCount) bytes, more than the \(limit) the store reads (Options.maximumFileSize)"
        case .folderWritableByOthers(let permissions):
            return "The folder \(path) has permissions \(Self.octal(permissions)): other users may replace files in it, "
                + "so the credential was not stored there"
        }
    }

    /// The same text as ``description``.
    public var errorDescription: String? { description }

    private static func octal(_ permissions: UInt16) -> String {
        "0" + String(permissions, radix: 8)
    }
}

/// The C library's `write` and `read`, which the store's own method names would otherwise hide.
private enum Glue {
    static func read(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
        #if canImport(Glibc)
        Glibc.read(descriptor, buffer, count)
        #elseif canImport(Musl)
        Musl.read(descriptor, buffer, count)
        #else
        Darwin.read(descriptor, buffer, count)
        #endif
    }

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
