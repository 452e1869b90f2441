// Reads stored properties that swift-corelibs-foundation keeps internal (see Platform.swift for
// which and why), by name, through the runtime's field metadata.

import Foundation
@_spi(Reflection) import Swift

/// Reads a stored property of a class instance by its name.
enum Reflection {
    /// The stored property `label` of `value` (declared in its class or a superclass), or `nil`
    /// when `value` is not a class instance or has no such property.
    ///
    /// The field's offset and type are looked up once per class; later reads load the value at
    /// that offset. A `Mirror` would build each child it visits with a type lookup by mangled
    /// name, about 18,500 instructions a field on this runtime, which was most of the bridge's
    /// cost per task.
    static func child(_ value: Any, _ label: String) -> Any? {
        guard let type = type(of: value) as? AnyClass else { return nil }
        let object = value as AnyObject
        return StoredField.cached(label, in: type)?.read(from: object)
    }

    /// `value` without its `Optional` layers, or `nil` if one of them is empty.
    static func unwrapOptional(_ value: Any?) -> Any? {
        guard let value else { return nil }
        let mirror = Mirror(reflecting: value)
        guard mirror.displayStyle == .optional else { return value }
        return mirror.children.first.map { unwrapOptional($0.value) } ?? nil
    }
}

/// A stored property of a class: where it lies in an instance and its type, as the runtime's
/// field metadata describes it.
///
/// A subclass lays out its superclass's fields first, at the same offsets, so a field found in
/// a class can be read from an instance of any of its subclasses.
struct StoredField: Sendable {
    /// The field's byte offset from the start of an instance.
    let offset: Int
    /// The field's declared type (`Optional<…>` for an optional).
    let type: Any.Type

    /// Finds `name` among the stored properties of `classType` and its superclasses; `nil` if it
    /// has none of that name, or the runtime cannot describe the class.
    init?(named name: String, in classType: AnyClass) {
        var found: (offset: Int, type: Any.Type)?
        // 1 << 0 (`.classType`): the type is a class; 1 << 1 (`.ignoreUnknown`): skip fields of a
        // kind the runtime cannot describe rather than give up (the stdlib declares these options
        // as mutable statics, which strict concurrency refuses to read).
        let options = _EachFieldOptions(rawValue: 1 << 0 | 1 << 1)
        _ = _forEachField(of: classType, options: options) { fieldName, offset, type, _ in
            guard String(cString: fieldName) == name else { return true }
            found = (offset, type)
            return false
        }
        guard let found else { return nil }
        (offset, type) = found
    }

    /// The field's value in `object`, which must be an instance of the class it was found in
    /// (or a subclass).
    func read(from object: AnyObject) -> Any {
        func load<Value>(_: Value.Type) -> Any {
            withExtendedLifetime(object) { pointer(in: object).assumingMemoryBound(to: Value.self).pointee }
        }
        // `Any.Type` is not opened implicitly (SE-0352 opens protocol existentials only).
        return _openExistential(type, do: load)
    }

    /// The field's address in `object`; valid only while the caller keeps `object` alive.
    func pointer(in object: AnyObject) -> UnsafeRawPointer {
        UnsafeRawPointer(Unmanaged.passUnretained(object).toOpaque()).advanced(by: offset)
    }

    /// The field `name` of `classType`, looked up once per class and name for the whole process.
    static func cached(_ name: String, in classType: AnyClass) -> StoredField? {
        let key = FieldCache.Key(type: ObjectIdentifier(classType), name: name)
        if let known = FieldCache.shared.field(for: key) { return known }
        let found = StoredField(named: name, in: classType)
        FieldCache.shared.remember(found, for: key)
        return found
    }
}

/// What ``StoredField/cached(_:in:)`` found, for every class and name asked about (absences too).
private final class FieldCache: @unchecked Sendable {  // `fields` is guarded by `lock`.
    struct Key: Hashable {
        let type: ObjectIdentifier
        let name: String
    }

    static let shared = FieldCache()
    private let lock = NSLock()
    private var fields: [Key: StoredField?] = [:]

    /// `nil` when not looked up yet; `.some(nil)` when looked up and absent.
    func field(for key: Key) -> StoredField?? {
        lock.withLock { fields[key] }
    }

    func remember(_ field: StoredField?, for key: Key) {
        lock.withLock { fields[key] = field }
    }
}
