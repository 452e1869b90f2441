import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@testable import URLTaskManager
@testable import URLTaskOAuth2
@testable import URLTaskResilience
import XCTest

/// `URLTaskError` as a struct over a code: easy to match, names its component by index and
/// disambiguated name, the request without secrets, and the underlying error readably.
final class URLTaskErrorTests: XCTestCase {
    private struct Refresh {}
    private struct Logger {}

    func testComponentsOfOneTypeAreToldApartByIndexAndName() {
        let chain = URLTaskError.Component.chain([Refresh(), Logger(), Refresh()], kind: .reactor)
        XCTAssertEqual(chain.map(\.name), ["Refresh#0", "Logger", "Refresh#2"])
        XCTAssertEqual(chain.map(\.index), [0, 1, 2])
        XCTAssertEqual(Set(chain).count, 3)
    }

    func testCodesMatchInASwitchAndTheDescriptionNamesEverythingButSecrets() {
        var request = URLRequest(url: URL(string: "https://user:pw@api.example.com/v1/pay?token=s3cr3t#frag")!)
        request.httpMethod = "POST"
        let error = URLTaskError(
            code: .reactorFailed, component: .init(kind: .reactor, index: 1, name: "OAuth2RefreshReactor#1"),
            underlying: URLError(
                .cannotConnectToHost, userInfo: [NSURLErrorFailingURLErrorKey: URL(string: "https://auth.example.com/token?code=s3cr3t")!])
        ).about(request, attempt: 2)
        switch error.code {
        case .reactorFailed: break
        default: XCTFail("the code does not match")
        }
        let text = error.description
        XCTAssertTrue(text.contains("OAuth2RefreshReactor#1"), text)
        XCTAssertTrue(text.contains("POST https://api.example.com/v1/pay (attempt 2)"), text)
        XCTAssertTrue(text.contains("URLError -1004 (cannot connect to host) at https://auth.example.com/token"), text)
        XCTAssertFalse(text.contains("s3cr3t") || text.contains("pw@"), text)
        XCTAssertEqual(error.localizedDescription, text)
        XCTAssertEqual(error.request?.attempt, 2)
        // The first request named stays: a later `about` does not rename it.
        XCTAssertEqual(error.about(URLRequest(url: URL(string: "https://other.example")!), attempt: 3).request?.attempt, 2)
    }

    /// The one rule, whoever fails the task: a `URLError` as itself naming its component, a
    /// `URLTaskError` as it is (its component filled in when it had none), anything else wrapped
    /// with the code of the chain. Never a `URLTaskError` inside a `URLTaskError`.
    func testTheDeliveryRuleKeepsURLErrorsAndURLTaskErrorsAndWrapsTheRest() throws {
        struct Boom: Error {}
        let breaker = URLTaskError.Component(kind: .interceptor, index: 0, name: "CircuitBreaker")
        let refresh = URLTaskError.Component(kind: .reactor, index: 2, name: "OAuth2RefreshReactor")

        let offline = try XCTUnwrap(
            URLTaskError.delivered(URLError(.notConnectedToInternet), from: refresh, code: .reactorFailed) as? URLError)
        XCTAssertEqual(offline.code, .notConnectedToInternet)
        XCTAssertEqual(offline.userInfo[URLTaskError.componentUserInfoKey] as? String, "OAuth2RefreshReactor")
        let named = URLError(.cannotConnectToHost, userInfo: [URLTaskError.componentUserInfoKey: "OfflineHold"])
        let kept = try XCTUnwrap(URLTaskError.delivered(named, from: breaker, code: .interceptorFailed) as? URLError)
        XCTAssertEqual(kept.userInfo[URLTaskError.componentUserInfoKey] as? String, "OfflineHold", "the first component named stays")

        let open = URLTaskError(code: .circuitOpen, underlying: CircuitOpenError(host: "http://a:1", retryAfter: .seconds(1)))
        let asIs = try XCTUnwrap(URLTaskError.delivered(open, from: breaker, code: .interceptorFailed) as? URLTaskError)
        XCTAssertEqual(asIs.code, .circuitOpen)
        XCTAssertEqual(asIs.component, breaker, "a component-less error gets its component")
        XCTAssertTrue(asIs.underlying is CircuitOpenError)
        let owned = URLTaskError(code: .authenticationFailed, component: refresh, underlying: OAuth2Error.notSignedIn)
        let passed = try XCTUnwrap(URLTaskError.delivered(owned, from: breaker, code: .interceptorFailed) as? URLTaskError)
        XCTAssertEqual(passed.component, refresh, "a component it names stays")

        let wrapped = try XCTUnwrap(URLTaskError.delivered(Boom(), from: refresh, code: .reactorFailed) as? URLTaskError)
        XCTAssertEqual(wrapped.code, .reactorFailed)
        XCTAssertEqual(wrapped.component, refresh)
        XCTAssertTrue(wrapped.underlying is Boom)
        for error in [asIs, passed, wrapped] { XCTAssertFalse(error.underlying is URLTaskError, "\(error)") }
    }
}
