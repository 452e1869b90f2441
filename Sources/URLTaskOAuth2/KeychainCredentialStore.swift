#if canImport(Security)
import Foundation
import URLTaskManager
import Security

/// A ``CredentialStore`` that keeps the credential in the Keychain, as a generic password item:
/// the store for apps on Apple platforms.
///
/// Compiled only where the Security framework exists (Apple platforms); it is not part of the
/// Linux build and is not tested by this package's test suite, which runs on Linux.
///
/// ```swift
/// let store = KeychainCredentialStore(service: "com.example.app.oauth", account: "api", accessibility: .afterFirstUnlock)
/// ```
///
/// Choose ``Accessibility/afterFirstUnlock`` (or its this-device-only form) when a
/// request may run while the device is locked, such as a background fetch: a refresh then
/// has to save the rotated refresh token, which `whenUnlocked` refuses until the user unlocks.
public struct KeychainCredentialStore: CredentialStore {
    /// The item's `kSecAttrService`.
    public let service: String
    /// The item's `kSecAttrAccount`.
    public let account: String
    /// When the item can be read and written.
    public let accessibility: Accessibility
    /// The access group to share the item with other apps of the same team, or `nil`.
    public let accessGroup: String?

    /// When the Keychain item is available (`kSecAttrAccessible`).
    public enum Accessibility: Sendable, Hashable {
        /// While the device is unlocked (`kSecAttrAccessibleWhenUnlocked`).
        case whenUnlocked
        /// From the first unlock after a restart on, also while locked
        /// (`kSecAttrAccessibleAfterFirstUnlock`): what a background refresh needs.
        case afterFirstUnlock
        /// As ``whenUnlocked``, never restored to another device.
        case whenUnlockedThisDeviceOnly
        /// As ``afterFirstUnlock``, never restored to another device.
        case afterFirstUnlockThisDeviceOnly
        /// Only while a passcode is set, on this device.
        case whenPasscodeSetThisDeviceOnly

        var attribute: CFString {
            switch self {
            case .whenUnlocked: kSecAttrAccessibleWhenUnlocked
            case .afterFirstUnlock: kSecAttrAccessibleAfterFirstUnlock
            case .whenUnlockedThisDeviceOnly: kSecAttrAccessibleWhenUnlockedThisDeviceOnly
            case .afterFirstUnlockThisDeviceOnly: kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly
            case .whenPasscodeSetThisDeviceOnly: kSecAttrAccessibleWhenPasscodeSetThisDeviceOnly
            }
        }
    }

    /// A store for the item `service`/`account`.
    ///
    /// - Parameters:
    ///   - service: The item's service, usually the app's bundle identifier and a suffix.
    ///   - account: The item's account: one per backend.
    ///   - accessibility: When the item is available; `afterFirstUnlock` lets a refresh during a
    ///     background fetch save the rotated token.
    ///   - accessGroup: A Keychain access group to share the item in, or `nil`.
    public init(service: String, account: String, accessibility: Accessibility = .afterFirstUnlock, accessGroup: String? = nil) {
        self.service = service
        self.account = account
        self.accessibility = accessibility
        self.accessGroup = accessGroup
    }

    public func load() async throws -> OAuth2Credential? {
        var query = baseQuery()
        query[kSecReturnData as String] = true
        query[kSecMatchLimit as String] = kSecMatchLimitOne
        var result: CFTypeRef?
        let status = SecItemCopyMatching(query as CFDictionary, &result)
        if status == errSecItemNotFound { return nil }
        guard status == errSecSuccess, let data = result as? Data else {
            throw KeychainCredentialStoreError(operation: "SecItemCopyMatching", status: status)
        }
        do {
            return try JSONDecoder().decode(OAuth2Credential.self, from: data)
        } catch {
            throw KeychainCredentialStoreError(operation: "decode", status: errSecDecode)
        }
    }

    public func save(_ credential: OAuth2Credential) async throws {
        let data = try JSONEncoder().encode(credential)
        let update: [String: Any] = [
            kSecValueData as String: data,
            kSecAttrAccessible as String: accessibility.attribute,
        ]
        let status = SecItemUpdate(baseQuery() as CFDictionary, update as CFDictionary)
        if status == errSecSuccess { return }
        guard status == errSecItemNotFound else {
            throw KeychainCredentialStoreError(operation: "SecItemUpdate", status: status)
        }
        var add = baseQuery()
        add.merge(update) { _, new in new }
        let added = SecItemAdd(add as CFDictionary, nil)
        guard added == errSecSuccess else { throw KeychainCredentialStoreError(operation: "SecItemAdd", status: added) }
    }

    public func clear() async throws {
        let status = SecItemDelete(baseQuery() as CFDictionary)
        guard status == errSecSuccess || status == errSecItemNotFound else {
            throw KeychainCredentialStoreError(operation: "SecItemDelete", status: status)
        }
    }

    private func baseQuery() -> [String: Any] {
        var query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword,
            kSecAttrService as String: service,
            kSecAttrAccount as String: account,
        ]
        if let accessGroup { query[kSecAttrAccessGroup as String] = accessGroup }
        return query
    }
}

/// Why a ``KeychainCredentialStore`` could not read, write or delete its item: the Security
/// function and its `OSStatus`, never the item's contents.
public struct KeychainCredentialStoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The function that failed, or `decode` for an item that is not a credential.
    public let operation: String
    /// Its `OSStatus` (`errSecInteractionNotAllowed`: the device is locked and the item's
    /// accessibility does not allow that).
    public let status: OSStatus

    /// The function, the status and the system's message for it.
    public var description: String {
        let message = SecCopyErrorMessageString(status, nil) as String? ?? "OSStatus \(status)"
        return "The Keychain credential store failed: \(operation) answered \(status) (\(message))"
    }
}
#endif
