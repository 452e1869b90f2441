// Reads an enum's cases from the runtime's type metadata, without a value of the enum and
// without any cast, so that two enums can be shown to share a layout before one is read as
// the other (see TaskRegistryReader.swift). Only swift-corelibs-foundation needs it.

#if canImport(FoundationNetworking)
/// An enum type's cases as the compiler describes them in its metadata: each case's name, its
/// payload's type and whether it is `indirect`, in the order the runtime numbers them, plus the
/// type's size, stride and alignment.
///
/// Two enums with equal shapes have the same layout: the compiler lays an enum out from its
/// payload cases' types, in that order, and its number of empty cases, and from nothing else.
/// Only what the Swift ABI fixes is read (the metadata kind, the nominal type descriptor and
/// its field descriptor, stable since Swift 5 on every platform); anything unexpected in them
/// gives `nil`, never a guess.
struct EnumShape: Equatable {
    struct Case: Equatable {
        var name: String
        /// The payload's type (a tuple for several values); `nil` for a case without one.
        var payload: ObjectIdentifier?
        var isIndirect: Bool
    }

    var cases: [Case]
    var payloadCaseCount: Int
    var emptyCaseCount: Int
    var size: Int
    var stride: Int
    var alignment: Int

    /// The shape of `type`; `nil` when it is not a non-generic enum, or its metadata holds
    /// anything this reader does not know.
    init?<Enum>(of type: Enum.Type) {
        // ABI: a metadata record starts with its kind (`MetadataKind::Enum`, 0x201; `Optional` is
        // 0x202), and the metadata of a value type holds its nominal type descriptor next.
        let metadata = unsafeBitCast(type as Any.Type, to: UnsafeRawPointer.self)
        guard metadata.load(as: UInt.self) == 0x201 else { return nil }
        let descriptor = metadata.load(fromByteOffset: MemoryLayout<UnsafeRawPointer>.size, as: UnsafeRawPointer.self)
        // TargetEnumDescriptor: flags (kind in the low 5 bits, 18 = enum; 0x80 = generic), parent,
        // name, access function, fields (relative pointers, 4 bytes each), then the number of
        // payload cases (low 24 bits) and of empty cases.
        let flags = descriptor.load(as: UInt32.self)
        guard flags & 0x1F == 18, flags & 0x80 == 0 else { return nil }
        guard let fields = Self.relative(descriptor, at: 16) else { return nil }
        payloadCaseCount = Int(descriptor.load(fromByteOffset: 20, as: UInt32.self) & 0x00FF_FFFF)
        emptyCaseCount = Int(descriptor.load(fromByteOffset: 24, as: UInt32.self))
        // FieldDescriptor: mangled type name, superclass, kind (3 = enum, 4 = multi-payload
        // enum), record size (12), record count, then the records: flags (1 = indirect),
        // mangled type name of the payload (0 when none), name.
        let kind = fields.load(fromByteOffset: 8, as: UInt16.self)
        let recordSize = Int(fields.load(fromByteOffset: 10, as: UInt16.self))
        let count = Int(fields.load(fromByteOffset: 12, as: UInt32.self))
        guard kind == 3 || kind == 4, recordSize == 12, count == payloadCaseCount + emptyCaseCount else { return nil }
        var cases: [Case] = []
        for index in 0..<count {
            let record = fields.advanced(by: 16 + index * recordSize)
            let recordFlags = record.load(as: UInt32.self)
            guard recordFlags & ~UInt32(0x7) == 0, let name = Self.relative(record, at: 8) else { return nil }
            var payload: ObjectIdentifier?
            if let mangled = Self.relative(record, at: 4) {
                let length = Self.mangledNameLength(mangled)
                guard
                    let payloadType = _getTypeByMangledNameInContext(
                        mangled.assumingMemoryBound(to: UInt8.self), UInt(length), genericContext: descriptor, genericArguments: nil)
                else { return nil }
                payload = ObjectIdentifier(payloadType)
            }
            cases.append(
                Case(name: String(cString: name.assumingMemoryBound(to: CChar.self)), payload: payload, isIndirect: recordFlags & 1 != 0))
        }
        // The runtime numbers payload cases first: they are the records with a payload type.
        guard cases.prefix(payloadCaseCount).allSatisfy({ $0.payload != nil }),
            cases.dropFirst(payloadCaseCount).allSatisfy({ $0.payload == nil })
        else { return nil }
        self.cases = cases
        size = MemoryLayout<Enum>.size
        stride = MemoryLayout<Enum>.stride
        alignment = MemoryLayout<Enum>.alignment
    }

    /// The shape of `type`, known only at run time (the entry type of corelibs' registry).
    static func of(_ type: Any.Type) -> EnumShape? {
        func open<Enum>(_ type: Enum.Type) -> EnumShape? { EnumShape(of: type) }
        return _openExistential(type, do: open)
    }

    /// The target of the 32-bit relative pointer at `offset` from `base`; `nil` when it is null.
    private static func relative(_ base: UnsafeRawPointer, at offset: Int) -> UnsafeRawPointer? {
        let field = base.advanced(by: offset)
        let distance = field.load(as: Int32.self)
        return distance == 0 ? nil : field.advanced(by: Int(distance))
    }

    /// The length of the mangled name at `name`: it ends at a zero byte, and a byte from 0x01 to
    /// 0x17 starts a 4-byte symbolic reference, one from 0x18 to 0x1F a pointer-sized one (either
    /// may contain zero bytes).
    private static func mangledNameLength(_ name: UnsafeRawPointer) -> Int {
        var length = 0
        while true {
            let byte = name.load(fromByteOffset: length, as: UInt8.self)
            switch byte {
            case 0: return length
            case 0x01...0x17: length += 1 + 4
            case 0x18...0x1F: length += 1 + MemoryLayout<UnsafeRawPointer>.size
            default: length += 1
            }
        }
    }
}
#endif
