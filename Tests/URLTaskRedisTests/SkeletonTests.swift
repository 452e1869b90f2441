import XCTest
@testable import URLTaskRedis

/// Placeholder of the skeleton branch: replaced by the client's tests.
final class SkeletonTests: XCTestCase {
    func testTheClientHasAConfiguration() {
        let client = RedisClient(configuration: .init(endpoint: .tcp(host: "127.0.0.1", port: 6379)))
        XCTAssertEqual(client.configuration.database, 0)
    }
}
