import Foundation
import URLTaskCrypto
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A W3C Trace Context (version 00): the trace a request belongs to and the span it is sent
/// from, as the `traceparent` and `tracestate` headers carry them, so that a request can be
/// followed into the server's logs.
///
/// `traceparent` is `00-<trace id>-<parent id>-<flags>`: a 16-byte trace id and an 8-byte span
/// id in lowercase hex (neither all zeros), and flags whose lowest bit says the trace is
/// sampled. ``init(traceparent:tracestate:)`` accepts only what the specification accepts, so
/// a value that does not parse is replaced rather than forwarded.
///
/// A server that was called with a trace continues it by making a context from the incoming
/// headers and sending its own requests within it, with ``setTraceContext(_:on:)`` or through
/// ``TraceContextInterceptor``.
public struct TraceContext: Sendable, Hashable, CustomStringConvertible {
    /// The trace: 32 lowercase hex digits, the same on every request of the trace.
    public let traceID: String
    /// The current span: 16 lowercase hex digits. A request sent within this context names it
    /// as its parent.
    public let spanID: String
    /// The trace flags; bit 0 (`0x01`) is "sampled", the only flag version 00 defines.
    public let flags: UInt8
    /// The vendors' `tracestate` list, carried unchanged, or `nil`.
    public let traceState: String?

    /// The trace context of the work the current Swift task is doing, if any: set it around
    /// work that belongs to a trace, and the requests made inside it continue that trace.
    ///
    /// A task-local value follows Swift tasks only: URLSession starts a task's loading on its own
    /// threads, so ``TraceContextInterceptor`` cannot read the caller's value there. Stamp the
    /// request where the value is known, with ``setTraceContext(_:on:)``, as in
    /// `TraceContext.$current.withValue(incoming) { ... }`.
    @TaskLocal public static var current: TraceContext?

    /// Whether the trace is sampled (flag `0x01`).
    public var isSampled: Bool { flags & 0x01 == 0x01 }

    /// The `traceparent` header value for a request sent from this span.
    public var traceparent: String {
        "00-\(traceID)-\(spanID)-\(RandomBytes.hex([flags]))"
    }

    /// The `traceparent` value, and the `tracestate` one if there is one.
    public var description: String {
        traceparent + (traceState.map { " tracestate=\($0)" } ?? "")
    }

    /// The context the headers of an incoming (or a caller's) request describe, or `nil` when
    /// `traceparent` is not a valid one (then `tracestate` is ignored too, as the specification
    /// requires).
    ///
    /// Version 00 must be exactly 55 characters; a later version is read by its first four
    /// fields when a `-` follows them. Version `ff`, an all-zero trace or span id, upper-case hex
    /// or any other character makes it invalid. A `tracestate` that is not a valid list (more
    /// than 32 members, a malformed member) is dropped; the `traceparent` stays valid.
    public init?(traceparent: String, tracestate: String? = nil) {
        let text = traceparent.trimmingCharacters(in: .whitespaces)
        let characters = Array(text.utf8)
        guard characters.count >= 55 else { return nil }
        let version = Array(characters[0..<2])
        guard Self.isHex(version), version != Array("ff".utf8) else { return nil }
        if version == Array("00".utf8) {
            guard characters.count == 55 else { return nil }
        } else if characters.count > 55 {
            guard characters[55] == UInt8(ascii: "-") else { return nil }
        }
        guard characters[2] == UInt8(ascii: "-"), characters[35] == UInt8(ascii: "-"), characters[52] == UInt8(ascii: "-") else {
            return nil
        }
        let trace = Array(characters[3..<35])
        let span = Array(characters[36..<52])
        let flagDigits = Array(characters[53..<55])
        guard Self.isHex(trace), Self.isHex(span), Self.isHex(flagDigits) else { return nil }
        guard trace.contains(where: { $0 != UInt8(ascii: "0") }), span.contains(where: { $0 != UInt8(ascii: "0") }) else {
            return nil
        }
        guard let flags = UInt8(String(decoding: flagDigits, as: UTF8.self), radix: 16) else { return nil }
        self.init(
            traceID: String(decoding: trace, as: UTF8.self), spanID: String(decoding: span, as: UTF8.self),
            flags: flags & 0x01, traceState: tracestate.flatMap(Self.validTraceState))
    }

    /// A context with a fresh trace id and span id.
    ///
    /// - Parameters:
    ///   - sampled: Whether the trace is recorded (flag `0x01`).
    ///   - traceState: A `tracestate` to carry, if it is a valid list.
    public static func newTrace(sampled: Bool = true, traceState: String? = nil) -> TraceContext {
        TraceContext(
            traceID: RandomBytes.hex(nonZeroBytes(16)), spanID: newSpanID(), flags: sampled ? 0x01 : 0x00,
            traceState: traceState.flatMap(validTraceState))
    }

    /// The same trace, flags and state, from a new span: what a request sent within this
    /// context carries as its parent.
    public func childSpan() -> TraceContext {
        TraceContext(traceID: traceID, spanID: Self.newSpanID(), flags: flags, traceState: traceState)
    }

    /// Sets `traceparent` (and `tracestate`, or removes it) on `request` for a request sent
    /// from `context` (``current`` unless you say otherwise; nothing is set when there is none).
    ///
    /// ``TraceContextInterceptor`` continues the trace a request carries this way, with a new
    /// span id for each attempt; call this where the task-local context is known, before handing
    /// the request to the session.
    public static func setTraceContext(_ context: TraceContext? = TraceContext.current, on request: inout URLRequest) {
        guard let context else { return }
        request.setValue(context.traceparent, forHTTPHeaderField: "traceparent")
        request.setValue(context.traceState, forHTTPHeaderField: "tracestate")
    }

    init(traceID: String, spanID: String, flags: UInt8, traceState: String?) {
        self.traceID = traceID
        self.spanID = spanID
        self.flags = flags
        self.traceState = traceState
    }

    static func newSpanID() -> String {
        RandomBytes.hex(nonZeroBytes(8))
    }

    /// Random bytes, not all zero (an all-zero id is invalid).
    private static func nonZeroBytes(_ count: Int) -> [UInt8] {
        while true {
            let bytes = RandomBytes.make(count)
            if bytes.contains(where: { $0 != 0 }) { return bytes }
        }
    }

    private static func isHex(_ characters: [UInt8]) -> Bool {
        characters.allSatisfy {
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
        }
    }

    /// `tracestate` if it is a valid list (W3C Trace Context §3.3): at most 32 members of
    /// `key=value`, comma-separated with optional blanks, empty members allowed; a key is
    /// `lcalpha 0*255(lcalpha / digit / "_" / "-" / "*" / "/")` with an optional
    /// `@` and a system part of up to 14 such characters; a value is up to 256 printable ASCII
    /// characters other than `,` and `=`, not ending in a space. `nil` if it is not, or empty.
    static func validTraceState(_ text: String) -> String? {
        let members = text.split(separator: ",", omittingEmptySubsequences: false)
            .map { $0.trimmingCharacters(in: CharacterSet(charactersIn: " \t")) }
            .filter { !$0.isEmpty }
        guard !members.isEmpty, members.count <= 32 else { return nil }
        var keys = Set<String>()
        for member in members {
            guard let equals = member.firstIndex(of: "=") else { return nil }
            let key = String(member[..<equals])
            let value = member[member.index(after: equals)...]
            guard isValidKey(key), keys.insert(key).inserted else { return nil }
            guard !value.isEmpty, value.count <= 256, value.last != " " else { return nil }
            guard value.unicodeScalars.allSatisfy({ (0x20...0x7e).contains($0.value) && $0 != "," && $0 != "=" }) else { return nil }
        }
        return members.joined(separator: ",")
    }

    private static func isValidKey(_ key: String) -> Bool {
        let parts = key.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count <= 2 else { return false }
        func valid(_ part: Substring, maximum: Int, firstMayBeDigit: Bool) -> Bool {
            guard let first = part.unicodeScalars.first, part.unicodeScalars.count <= maximum else { return false }
            let lower = (0x61...0x7a)
            guard lower.contains(Int(first.value)) || (firstMayBeDigit && (0x30...0x39).contains(Int(first.value))) else { return false }
            return part.unicodeScalars.allSatisfy {
                lower.contains(Int($0.value)) || (0x30...0x39).contains(Int($0.value)) || "_-*/".unicodeScalars.contains($0)
            }
        }
        if parts.count == 2 {
            return valid(parts[0], maximum: 241, firstMayBeDigit: true) && valid(parts[1], maximum: 14, firstMayBeDigit: false)
        }
        return valid(parts[0], maximum: 256, firstMayBeDigit: false)
    }
}

/// Adds W3C Trace Context headers to every request: `traceparent` with a new span id for each
/// attempt, and the `tracestate` of the trace it continues.
///
/// Which trace a request belongs to, in this order:
/// 1. the one its own `traceparent` header names, if it is valid (``TraceContext/setTraceContext(_:on:)``
///    puts it there from ``TraceContext/current``); an invalid one is replaced, and its
///    `tracestate` dropped;
/// 2. the `context` closure's answer (by default ``TraceContext/current`` where the
///    interceptor runs, which is not the caller's Swift task; see ``TraceContext/current``);
/// 3. otherwise a new trace, whose id is the same on every attempt of the task (so that a
///    retry is found under the same trace) and unpredictable.
///
/// The `traceparent` sent is in the task's events (``URLTaskEvent/Kind/annotated(name:value:)``,
/// named `traceparent`), and in ``URLTask/attemptValues`` under ``TraceContextInterceptor/Sent`` for
/// reactors.
public struct TraceContextInterceptor: URLTaskInterceptor {
    /// The key under which the context a task was sent with is kept in ``URLTask/attemptValues`` (one per attempt).
    public enum Sent: URLTaskValueKey {
        /// The context sent: its ``TraceContext/spanID`` is this attempt's span.
        public typealias Value = TraceContext
    }

    private let sampled: Bool
    private let context: @Sendable () -> TraceContext?
    /// Mixed with a task's id into the trace id of a task that starts its own trace: the same
    /// for every attempt of the task, and not guessable from the task's number.
    private let salt: [UInt8]

    /// An interceptor that starts traces sampled or not, and continues `context`'s.
    ///
    /// - Parameters:
    ///   - sampled: The sampled flag of the traces it starts.
    ///   - context: The trace to continue when the request carries none.
    public init(sampled: Bool = true, context: @escaping @Sendable () -> TraceContext? = { TraceContext.current }) {
        self.sampled = sampled
        self.context = context
        self.salt = RandomBytes.make(32)
    }

    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        let carried = task.request.value(forHTTPHeaderField: "traceparent").flatMap {
            TraceContext(traceparent: $0, tracestate: task.request.value(forHTTPHeaderField: "tracestate"))
        }
        let outgoing: TraceContext
        if let parent = carried ?? self.context() {
            outgoing = parent.childSpan()
        } else {
            let digest = SHA256Digest.hash(salt + Array(String(describing: task.id).utf8))
            outgoing = TraceContext(
                traceID: RandomBytes.hex(digest.prefix(16)), spanID: TraceContext.newSpanID(), flags: sampled ? 0x01 : 0x00,
                traceState: nil)
        }
        TraceContext.setTraceContext(outgoing, on: &task.request)
        task.attemptValues[Sent.self] = outgoing
        // A span is reported only for a request that goes out (see `annotateWhenSent`).
        task.annotateWhenSent("traceparent", outgoing.traceparent)
        return .execute
    }
}
