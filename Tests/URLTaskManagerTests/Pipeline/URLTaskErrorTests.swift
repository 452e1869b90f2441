import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@testable import URLTaskManager
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
        let error = URLTaskError.reactorFailed(
            .init(kind: .reactor, index: 1, name: "OAuth2RefreshReactor#1"),
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
}
