import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2
@testable import URLTaskResilience
import TestSupport

/// The manager's check of how its parts are assembled (``URLTaskPlacement``, and the parts that
/// are both an interceptor and a reactor): a pure function of the two lists, tested here without
/// stopping the test; `URLTaskManager.init` stops with its message.
final class InterceptorAndReactorPlacementTests: XCTestCase {
    private let auth = OAuth2Authenticator(origins: [URL(string: "https://api.example.com")!], refresh: { $0 })
    private let breaker = CircuitBreaker()
    private let limiter = RateLimiter(policy: .init(rate: 20, burst: 10))
    private let hold = OfflineHold()

    private static let rule =
        "(Among the parts with a placement, .first, .early, .late and .last come in that order; a part placed .anywhere goes anywhere. See URLTaskPlacement.)"

    /// The README's recommended stack passes, and a manager accepts it.
    func testTheReadmeStackPasses() {
        let interceptors: [any URLTaskInterceptor] = [breaker, BearerInterceptor(authenticator: auth), CoalescingInterceptor(), limiter]
        let reactors: [any URLTaskReactor] = [OAuth2RefreshReactor(authenticator: auth), hold, RetryReactor()]
        XCTAssertNil(URLTaskManager.assemblyProblem(interceptors: interceptors, reactors: reactors))
        URLTaskManager(interceptors: interceptors, reactors: reactors).invalidateAndCancel()
    }

    func testAnInterceptorBeforeOneItMustFollowIsNamedWithAnOrderThatWorks() {
        let problem = URLTaskManager.assemblyProblem(
            interceptors: [limiter, BearerInterceptor(authenticator: auth), breaker], reactors: [])
        XCTAssertEqual(
            problem,
            "URLTaskManager: the interceptors are in an order their placements forbid: CircuitBreaker (.first) must come before "
                + "RateLimiter (.last). An order that works: [CircuitBreaker, BearerInterceptor, RateLimiter]. \(Self.rule)")
    }

    func testEveryReactorOutOfPlaceIsNamed() {
        let problem = URLTaskManager.assemblyProblem(
            interceptors: [breaker, limiter],
            reactors: [RetryReactor(), Placed(placement: .first), OAuth2RefreshReactor(authenticator: auth), hold])
        XCTAssertEqual(
            problem,
            "URLTaskManager: the reactors are in an order their placements forbid: Placed (.first) must come before "
                + "RetryReactor (.last); OfflineHold (.late) must come before RetryReactor (.last). An order that works: "
                + "[Placed, OfflineHold, OAuth2RefreshReactor, RetryReactor]. \(Self.rule)")
        // The Resilience article's example.
        XCTAssertEqual(
            URLTaskManager.assemblyProblem(interceptors: [breaker, limiter], reactors: [RetryReactor(), hold]),
            "URLTaskManager: the reactors are in an order their placements forbid: OfflineHold (.late) must come before "
                + "RetryReactor (.last). An order that works: [OfflineHold, RetryReactor]. \(Self.rule)")
    }

    /// The table in ``URLTaskPlacement``'s documentation says what each part is: a part with a
    /// placement in the "As a reactor" column is a reactor placed so, one with an "As an
    /// interceptor" placement an interceptor placed so, and an empty or "(not a reactor: ...)"
    /// cell names a role the part does not have. 0.3's table still called the breaker and the
    /// limiter reactors (issue 37, finding 9); this test failed on it.
    func testThePlacementTableSaysWhatEachPartIs() throws {
        let source = try String(
            contentsOf: CompiledSnippets.root.appendingPathComponent("Sources/URLTaskManager/URLTaskPlacement.swift"), encoding: .utf8)
        let parts: [String: Any] = [
            "CircuitBreaker": breaker, "RateLimiter": limiter, "OfflineHold": hold, "RetryReactor": RetryReactor(),
        ]
        func placement(in cell: Substring) -> String? {
            let cell = cell.trimmingCharacters(in: .whitespaces)
            guard cell.hasPrefix("`"), let end = cell.dropFirst().firstIndex(of: "`") else { return nil }
            return String(cell[cell.index(after: cell.startIndex)..<end])
        }
        var rows = 0
        for line in source.split(separator: "\n") where line.hasPrefix("/// | `") {
            let cells = line.dropFirst(5).split(separator: "|", omittingEmptySubsequences: false)
            guard cells.count >= 3, let name = placement(in: cells[0]), let part = parts[name] else { continue }
            rows += 1
            let asInterceptor = placement(in: cells[1])
            let asReactor = placement(in: cells[2])
            XCTAssertEqual(asInterceptor, (part as? any URLTaskInterceptor).map { "\($0.interceptorPlacement)" }, name)
            // 0.2's reactors keep an unavailable conformance for its diagnostic, which a cast finds.
            let reactor = part is any NoLongerAReactor ? nil : part as? any URLTaskReactor
            XCTAssertEqual(asReactor, reactor.map { "\($0.reactorPlacement)" }, name)
        }
        XCTAssertEqual(rows, parts.count, "every part of the table was read")
    }

    /// Two parts of one type are told apart as errors and events tell them apart (`#index`); a
    /// wrapper is placed, and named, as what it wraps.
    func testPartsAreNamedAsErrorsNameThem() {
        let second = RateLimiter(policy: .init(rate: 1))
        let problem = URLTaskManager.assemblyProblem(
            interceptors: [limiter, breaker, second], reactors: [PerRequestReactor(RetryReactor()), hold, OfflineHold()])
        XCTAssertEqual(
            problem,
            "URLTaskManager: the interceptors are in an order their placements forbid: CircuitBreaker (.first) must come before "
                + "RateLimiter#0 (.last). An order that works: [CircuitBreaker, RateLimiter#0, RateLimiter#2]. \(Self.rule)\n"
                + "URLTaskManager: the reactors are in an order their placements forbid: OfflineHold#1 (.late) must come before "
                + "PerRequestReactor<RetryReactor> (.last); OfflineHold#2 (.late) must come before PerRequestReactor<RetryReactor> "
                + "(.last). An order that works: [OfflineHold#1, OfflineHold#2, PerRequestReactor<RetryReactor>]. \(Self.rule)")
    }

    /// A part of yours placed `.anywhere` (the default) goes before, between and after the placed
    /// ones, in both lists; one you give a placement is checked like the package's.
    func testPartsPlacedAnywhereGoAnywhere() {
        let interceptors: [any URLTaskInterceptor] = [Free(), breaker, Free(), limiter, Free()]
        let reactors: [any URLTaskReactor] = [Free(), Placed(placement: .first), Free(), hold, Free(), RetryReactor(), Free()]
        XCTAssertNil(URLTaskManager.assemblyProblem(interceptors: interceptors, reactors: reactors))
        XCTAssertNil(URLTaskManager.assemblyProblem(interceptors: [Free(), Free()], reactors: [Free()]))

        let problem = URLTaskManager.assemblyProblem(interceptors: [Placed(placement: .last), Free(), breaker], reactors: [])
        XCTAssertEqual(
            problem,
            "URLTaskManager: the interceptors are in an order their placements forbid: CircuitBreaker (.first) must come before "
                + "Placed (.last). An order that works: [CircuitBreaker, Free, Placed]. \(Self.rule)")
    }

    /// Parts with the same placement go in any order between them; `.early` and `.late` sit
    /// between `.first` and `.last`.
    func testTheRanksInOrder() {
        let inOrder: [URLTaskPlacement] = [.first, .first, .anywhere, .early, .early, .late, .anywhere, .last, .last]
        XCTAssertNil(URLTaskPlacement.misorder(of: inOrder, components: components(inOrder.count), chain: "interceptors"))
        for (earlier, later) in [(URLTaskPlacement.early, URLTaskPlacement.first), (.late, .early), (.last, .late), (.last, .first)] {
            XCTAssertNotNil(
                URLTaskPlacement.misorder(of: [earlier, later], components: components(2), chain: "interceptors"), "\(earlier), \(later)")
        }
    }

    /// Every order of every mix of placements is accepted exactly when its placed parts do not go
    /// down, and the order suggested for a refused one is accepted and keeps the parts placed
    /// `.anywhere` where they were.
    func testTheSuggestedOrderAlwaysWorks() {
        let all: [URLTaskPlacement] = [.first, .early, .anywhere, .late, .last]
        var random = SplitMix64(state: 28)
        for _ in 0..<2_000 {
            let placements = (0..<Int(random.next() % 7)).map { _ in all[Int(random.next() % 5)] }
            let ranks = placements.compactMap(\.rank)
            let problem = URLTaskPlacement.misorder(of: placements, components: components(placements.count), chain: "reactors")
            XCTAssertEqual(problem == nil, ranks == ranks.sorted(), "\(placements)")
            let order = URLTaskPlacement.workingOrder(of: placements)
            XCTAssertEqual(order.sorted(), Array(placements.indices))
            let reordered = order.map { placements[$0] }
            XCTAssertNil(URLTaskPlacement.misorder(of: reordered, components: components(placements.count), chain: "reactors"))
            for index in placements.indices where placements[index] == .anywhere { XCTAssertEqual(order[index], index) }
            if problem == nil { XCTAssertEqual(order, Array(placements.indices)) }
        }
    }

    /// An object that is both an interceptor and a reactor, given to one list only, would
    /// silently do half its job (a breaker that never sees a failure never opens).
    func testAPartThatIsBothGoesInBothLists() {
        let both = Both()
        XCTAssertEqual(
            URLTaskManager.assemblyProblem(interceptors: [both], reactors: [RetryReactor()]),
            "URLTaskManager: Both is both an interceptor and a reactor but was given to the interceptors only: give the "
                + "same instance to the reactors too (as an interceptor it acts on each request, as a reactor it learns from each "
                + "outcome; given to one list only, one half never runs).")
        XCTAssertEqual(
            URLTaskManager.assemblyProblem(interceptors: [], reactors: [both]),
            "URLTaskManager: Both is both an interceptor and a reactor but was given to the reactors only: give the same "
                + "instance to the interceptors too (as an interceptor it acts on each request, as a reactor it learns from each "
                + "outcome; given to one list only, one half never runs).")
        // Two of them, one in each list: neither is wired.
        let problem = URLTaskManager.assemblyProblem(interceptors: [Both()], reactors: [Both()])
        XCTAssertEqual(problem?.components(separatedBy: "\n").count, 2)
        XCTAssertNil(URLTaskManager.assemblyProblem(interceptors: [both], reactors: [both]))
        // The breaker and the limiter observe outcomes: they belong to the interceptors only.
        XCTAssertNil(URLTaskManager.assemblyProblem(interceptors: [breaker, limiter], reactors: []))
    }

    private func components(_ count: Int) -> [URLTaskError.Component] {
        (0..<count).map { URLTaskError.Component(kind: .interceptor, index: $0, name: "P\($0)") }
    }
}

/// A part of an app's, with the default placement.
private struct Free: URLTaskInterceptor, URLTaskReactor {
    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand { .execute }
    func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { false }
    func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
}

/// A part of an app's that acts on requests and takes outcomes, as one instance.
private final class Both: URLTaskInterceptor, URLTaskReactor {
    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand { .execute }
    func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { false }
    func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
}

/// A part of an app's that says where it belongs.
private struct Placed: URLTaskInterceptor, URLTaskReactor {
    let placement: URLTaskPlacement
    var interceptorPlacement: URLTaskPlacement { placement }
    var reactorPlacement: URLTaskPlacement { placement }
    func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { false }
    func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand { .execute }
}
