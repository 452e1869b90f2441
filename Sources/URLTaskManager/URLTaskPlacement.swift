/// Where a part belongs in its chain, when its place matters, so that the manager, not a comment,
/// keeps the order right.
///
/// The interceptors run, and the reactors are asked, in the order given to the manager, and for a
/// few parts that order decides whether they work at all: a `RetryReactor` placed before an
/// `OfflineHold` retries an unreachable host itself, so the hold never holds anything, and a
/// `RateLimiter` interceptor before a `CircuitBreaker` spends a token on a request the breaker
/// then refuses.
/// Such a part declares its placement (``URLTaskInterceptor/interceptorPlacement``,
/// ``URLTaskReactor/reactorPlacement``; two names, because a part that is both may belong in
/// different places in the two chains), and ``URLTaskManager/init(interceptors:reactors:observers:configuration:delegate:delegateQueue:options:)``
/// checks the order it is given: a wrong one stops the program there, with a message naming the
/// parts out of place and an order that works.
///
/// The rule fits in one line: **among the parts that have a placement, `first`, `early`, `late`
/// and `last` come in that order; a part placed ``anywhere`` goes anywhere.** Parts with the
/// same placement go in any order between them. ``anywhere`` is the default, so every part you
/// write is free until you give it a placement; give it one when it must come before or after
/// one of these:
///
/// | Part | As an interceptor | As a reactor |
/// | --- | --- | --- |
/// | `CircuitBreaker` | `first`: it refuses a request before another part spends work on it | (not a reactor: it observes outcomes, see ``URLTaskOutcomeObserver``) |
/// | `RateLimiter` | `last`: a request takes a token once no other part will hold, answer or refuse it | (not a reactor: it observes outcomes, as the breaker) |
/// | `OfflineHold` | | `late`: before `RetryReactor`, which would otherwise retry an unreachable host itself |
/// | `RetryReactor` | | `last`: the fallback, after every reactor that handles a failure better |
/// | every other part of the package | ``anywhere`` | ``anywhere`` |
///
/// A wrapper (``PerRequestInterceptor``, ``PerRequestReactor``) has the placement of the part it
/// wraps.
public struct URLTaskPlacement: Hashable, Sendable, CustomStringConvertible {
    /// Its position among the ranked placements; `nil` for ``anywhere``.
    let rank: Int?
    private let name: String

    private init(rank: Int?, name: String) {
        self.rank = rank
        self.name = name
    }

    /// Before every part placed `early`, `late` or `last`: a part that must decide before the
    /// others do any work (`CircuitBreaker`'s refusal), or a reactor of yours that must be asked
    /// about every outcome before another takes it.
    public static let first = Self(rank: 0, name: "first")
    /// After the `first` parts, before the `late` and `last` ones.
    public static let early = Self(rank: 1, name: "early")
    /// Not checked: wherever it is given, before, between or after the placed parts. The default.
    public static let anywhere = Self(rank: nil, name: "anywhere")
    /// After the `first` and `early` parts, before the `last` ones (`OfflineHold`, before the
    /// retry).
    public static let late = Self(rank: 2, name: "late")
    /// After every part placed `first`, `early` or `late`: a part that acts once the others are
    /// done (`RateLimiter`'s wait, `RetryReactor`'s fallback).
    public static let last = Self(rank: 3, name: "last")

    /// Its name, as in the static property (`"first"`).
    public var description: String { name }
}

extension URLTaskPlacement {
    /// Why `placements`, one chain in the order given, break a placement, naming the parts by
    /// `components` (``URLTaskError/Component`` names, as errors and events do), with an order
    /// that works; `nil` when the order is right. Pure, so that the message is tested without
    /// stopping the test.
    static func misorder(of placements: [URLTaskPlacement], components: [URLTaskError.Component], chain: String) -> String? {
        precondition(placements.count == components.count)
        let ranked = placements.indices.filter { placements[$0].rank != nil }
        var complaints: [String] = []
        for (position, index) in ranked.enumerated() {
            let rank = placements[index].rank!
            let before = ranked[..<position].filter { placements[$0].rank! > rank }
            guard !before.isEmpty else { continue }
            let names = before.map { "\(components[$0]) (.\(placements[$0]))" }
            complaints.append("\(components[index]) (.\(placements[index])) must come before \(names.joined(separator: ", "))")
        }
        guard !complaints.isEmpty else { return nil }
        let order = workingOrder(of: placements)
        return """
            URLTaskManager: the \(chain) are in an order their placements forbid: \(complaints.joined(separator: "; ")). \
            An order that works: [\(order.map { components[$0].description }.joined(separator: ", "))]. \
            (Among the parts with a placement, .first, .early, .late and .last come in that order; \
            a part placed .anywhere goes anywhere. See URLTaskPlacement.)
            """
    }
}

extension URLTaskPlacement {
    /// The indices of `placements` in an order that respects them, as close to the given one as
    /// can be: the placed parts sorted by placement into the slots they occupied (those with the
    /// same placement keep their order), the parts placed ``anywhere`` where they were.
    static func workingOrder(of placements: [URLTaskPlacement]) -> [Int] {
        let ranked = placements.indices.filter { placements[$0].rank != nil }
        let sorted = ranked.sorted { left, right in
            let (leftRank, rightRank) = (placements[left].rank!, placements[right].rank!)
            return leftRank != rightRank ? leftRank < rightRank : left < right
        }
        var order = Array(placements.indices)
        for (slot, moved) in zip(ranked, sorted) { order[slot] = moved }
        return order
    }
}

extension URLTaskManager {
    /// Why the manager cannot run these chains as given, or `nil`: an order a part's placement
    /// forbids (``URLTaskPlacement``), or an object that is both an interceptor and a reactor
    /// given to one list only (half of it would silently never run: a `CircuitBreaker` among the
    /// interceptors alone never sees a failure, so it never opens). Pure, so that the messages are
    /// tested without stopping the test; the initializer stops with them.
    static func assemblyProblem(interceptors: [any URLTaskInterceptor], reactors: [any URLTaskReactor]) -> String? {
        let problems =
            [
                URLTaskPlacement.misorder(
                    of: interceptors.map(\.interceptorPlacement),
                    components: URLTaskError.Component.chain(interceptors, kind: .interceptor),
                    chain: "interceptors"),
                URLTaskPlacement.misorder(
                    of: reactors.map(\.reactorPlacement), components: URLTaskError.Component.chain(reactors, kind: .reactor),
                    chain: "reactors"),
            ].compactMap { $0 } + halfWired(interceptors: interceptors, reactors: reactors)
        return problems.isEmpty ? nil : problems.joined(separator: "\n")
    }

    /// The objects that are both an interceptor and a reactor but were given to one list only.
    private static func halfWired(interceptors: [any URLTaskInterceptor], reactors: [any URLTaskReactor]) -> [String] {
        // Only a class instance has an identity to find in the other list.
        let interceptorObjects = interceptors.compactMap { type(of: $0) is AnyClass ? $0 as AnyObject : nil }
        let reactorObjects = reactors.compactMap { type(of: $0) is AnyClass ? $0 as AnyObject : nil }
        func problem(_ object: AnyObject, givenTo list: String, missingFrom other: String) -> String {
            "URLTaskManager: \(type(of: object)) is both an interceptor and a reactor but was given to the \(list) only: "
                + "give the same instance to the \(other) too (as an interceptor it acts on each request, as a reactor it "
                + "learns from each outcome; given to one list only, one half never runs)."
        }
        let missingReactors = interceptorObjects.filter { object in
            object is any URLTaskReactor && !(object is any NoLongerAReactor) && !reactorObjects.contains { $0 === object }
        }
        let missingInterceptors = reactorObjects.filter { object in
            object is any URLTaskInterceptor && !interceptorObjects.contains { $0 === object }
        }
        return missingReactors.map { problem($0, givenTo: "interceptors", missingFrom: "reactors") }
            + missingInterceptors.map { problem($0, givenTo: "reactors", missingFrom: "interceptors") }
    }
}
