/// Parsing of a single `Name: value` header line, shared by requests, responses and trailers.
enum HeaderLine {
    /// The name and the value with surrounding spaces/tabs removed; nil when there is no colon or no name.
    static func parse(_ line: String) -> (name: String, value: String)? {
        guard let colon = line.firstIndex(of: ":") else { return nil }
        let name = line[..<colon]
        guard !name.isEmpty, !name.contains(" "), !name.contains("\t") else { return nil }
        return (String(name), String(line[line.index(after: colon)...].trimmingSpaces()))
    }

    /// Parses head lines after the start line, folding obsolete continuation lines into the previous value.
    static func parseFields(_ lines: ArraySlice<String>) throws -> HTTPFields {
        var fields: [(name: String, value: String)] = []
        for line in lines {
            if let first = line.first, first == " " || first == "\t", !fields.isEmpty {
                fields[fields.count - 1].value += " " + line.trimmingSpaces()
                continue
            }
            guard let field = parse(line) else {
                throw LoopbackServerError.malformedMessage("bad header line \"\(line)\"")
            }
            fields.append(field)
        }
        return HTTPFields(fields)
    }
}
