/// An ordered list of HTTP header fields with case-insensitive lookup, because HTTP field names are
/// case-insensitive, repeated fields are legal, and tests care about what went over the wire in order.
public struct HTTPFields: Sendable, Sequence, ExpressibleByDictionaryLiteral, Equatable, CustomStringConvertible {
    /// One header line: the name as sent (original case) and its value.
    public typealias Element = (name: String, value: String)

    private var storage: [(name: String, value: String)]

    /// An empty field list.
    public init() { storage = [] }

    /// Fields in the given order; repeated names are kept as separate fields.
    public init(_ fields: [(name: String, value: String)]) { storage = fields }

    /// Lets tests write `["Content-Type": "text/plain"]`.
    public init(dictionaryLiteral elements: (String, String)...) {
        storage = elements.map { (name: $0.0, value: $0.1) }
    }

    /// The first value for `name` (any case); setting replaces every field of that name (nil removes them).
    public subscript(name: String) -> String? {
        get { storage.first { HTTPFields.sameName($0.name, name) }?.value }
        set {
            guard let newValue else {
                remove(name)
                return
            }
            if let index = storage.firstIndex(where: { HTTPFields.sameName($0.name, name) }) {
                storage[index].value = newValue
                let tail = storage[(index + 1)...].filter { !HTTPFields.sameName($0.name, name) }
                storage.replaceSubrange((index + 1)..., with: tail)
            } else {
                storage.append((name: name, value: newValue))
            }
        }
    }

    /// Every value of fields named `name` (any case), in wire order.
    public func values(for name: String) -> [String] {
        storage.filter { HTTPFields.sameName($0.name, name) }.map(\.value)
    }

    /// Whether any field is named `name` (any case).
    public func contains(_ name: String) -> Bool {
        storage.contains { HTTPFields.sameName($0.name, name) }
    }

    /// Adds a field at the end, keeping existing ones of the same name (for repeated headers).
    public mutating func append(_ name: String, _ value: String) {
        storage.append((name: name, value: value))
    }

    /// Removes every field named `name` (any case).
    public mutating func remove(_ name: String) {
        storage.removeAll { HTTPFields.sameName($0.name, name) }
    }

    /// Number of fields (repeated names count separately).
    public var count: Int { storage.count }

    /// Whether there are no fields.
    public var isEmpty: Bool { storage.isEmpty }

    /// Iterates fields in wire order.
    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        storage.makeIterator()
    }

    /// Same fields in the same order; names compare case-insensitively, values exactly.
    public static func == (lhs: HTTPFields, rhs: HTTPFields) -> Bool {
        lhs.storage.count == rhs.storage.count
            && zip(lhs.storage, rhs.storage).allSatisfy { sameName($0.name, $1.name) && $0.value == $1.value }
    }

    /// `Name: value` lines, for failure messages.
    public var description: String {
        storage.map { "\($0.name): \($0.value)" }.joined(separator: "\n")
    }

    /// ASCII case-insensitive comparison, without allocating lowercased copies.
    static func sameName(_ lhs: String, _ rhs: String) -> Bool {
        var left = lhs.utf8.makeIterator()
        var right = rhs.utf8.makeIterator()
        while true {
            switch (left.next(), right.next()) {
            case (nil, nil): return true
            case (let l?, let r?):
                if l != r && lowered(l) != lowered(r) { return false }
            default: return false
            }
        }
    }

    private static func lowered(_ byte: UInt8) -> UInt8 {
        (byte >= 0x41 && byte <= 0x5A) ? byte | 0x20 : byte
    }
}
