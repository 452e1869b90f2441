// Reads stored properties that swift-corelibs-foundation keeps internal (see
// `CorelibsPlatform` for which and why), by name, through the runtime's field metadata.

#if canImport(FoundationNetworking)
import Foundation

/// Reads a stored property of a class instance by its name.
enum Reflection {
    /// The stored property `label` of `value` (declared in its class or a superclass), or `nil`
    /// when `value` is not a class instance or has no such property.
    ///
    /// The field's offset and type are looked up once per class; later reads load the value at
    /// that offset. A `Mirror` would build each child it visits with a type lookup by mangled
    /// name, on every read, and the bridge reads several fields per task (the cost: the
    /// Performance article, "Single operations on Linux").
    static func child(_ value: Any, _ label: String) -> Any? {
        guard let type = type(of: value) as? AnyClass else { return nil }
        let object = value as AnyObject
        return StoredField.cached(label, in: type)?.read(from: object)
    }

    /// The stored `Bool` property `label` of the value `value` (a struct: its layout, not a
    /// `Mirror`, which a type with a custom reflection such as `URLRequest` hides it from), or
    /// `nil` when it has no such property of that type.
    static func storedBool<Value>(_ label: String, of value: Value) -> Bool? {
        guard let field = StoredField.cached(label, in: Value.self), field.type == Bool.self else { return nil }
        return withUnsafeBytes(of: value) { $0.load(fromByteOffset: field.offset, as: Bool.self) }
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

    /// Finds `name` among the stored properties of `classType` and its superclasses (or of a
    /// struct type); `nil` if it
    /// has none of that name, the runtime cannot describe the class, or the field is not a strong
    /// reference or a value (a `weak` or `unowned` field holds a reference box, not its declared
    /// type: loading it as that type would crash, so it is refused before any read).
    init?(named name: String, in classType: Any.Type) {
        // The runtime's own description of each stored field, as the stdlib's `_forEachField`
        // reads it, plus whether the field is strong, which `_forEachField` does not pass on.
        for index in 0..<runtimeFieldCount(classType) {
            var field = RuntimeFieldMetadata()
            let fieldType = runtimeField(classType, index: index, fieldMetadata: &field)
            defer { field.freeFunc?(field.name) }
            guard let fieldName = field.name, String(cString: fieldName) == name else { continue }
            guard field.isStrong else { return nil }
            offset = runtimeFieldOffset(classType, index: index)
            type = fieldType
            return
        }
        return nil
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
    static func cached(_ name: String, in classType: Any.Type) -> StoredField? {
        let key = FieldCache.Key(type: ObjectIdentifier(classType), name: name)
        if let known = FieldCache.shared.field(for: key) { return known }
        let found = StoredField(named: name, in: classType)
        FieldCache.shared.remember(found, for: key)
        return found
    }
}

/// The runtime's `_FieldReflectionMetadata` (ReflectionMirror.cpp), field for field: what the
/// Swift runtime's field reflection entry points below (`swift_reflectionMirror_recursive*`,
/// exported since Swift 5, which the stdlib's `_forEachField` calls) say of one stored field,
/// declared here to learn whether a field is strong, which `_forEachField` does not pass on.
private struct RuntimeFieldMetadata {
    var name: UnsafePointer<CChar>?
    var freeFunc: (@convention(c) (UnsafePointer<CChar>?) -> Void)?
    var isStrong = false
    var isVar = false
}

@_silgen_name("swift_reflectionMirror_recursiveCount")
private func runtimeFieldCount(_ type: Any.Type) -> Int

@_silgen_name("swift_reflectionMirror_recursiveChildMetadata")
private func runtimeField(_ type: Any.Type, index: Int, fieldMetadata: UnsafeMutablePointer<RuntimeFieldMetadata>) -> Any.Type

@_silgen_name("swift_reflectionMirror_recursiveChildOffset")
private func runtimeFieldOffset(_ type: Any.Type, index: Int) -> Int

/// What ``StoredField/cached(_:in:)`` found, for every class and name asked about (absences too).
private final class FieldCache: Sendable {
    struct Key: Hashable {
        let type: ObjectIdentifier
        let name: String
    }

    static let shared = FieldCache()
    private let fields = LockedState<[Key: StoredField?]>([:])

    /// `nil` when not looked up yet; `.some(nil)` when looked up and absent.
    func field(for key: Key) -> StoredField?? {
        fields.withLock { $0[key] }
    }

    func remember(_ field: StoredField?, for key: Key) {
        fields.withLock { $0[key] = field }
    }
}
#endif
