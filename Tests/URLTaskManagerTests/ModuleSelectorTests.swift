import URLTaskManager
import XCTest

/// An app module with a `RetryPolicy` of its own.
private struct RetryPolicy {}

/// The module and its main class share the name `URLTaskManager`, so
/// `URLTaskManager.RetryPolicy` looks inside the class and fails to compile where the app has a
/// `RetryPolicy` of its own; Swift 6.3's module selector names the module instead (the FAQ's
/// answer, compiled here).
final class ModuleSelectorTests: XCTestCase {
    func testTheModuleSelectorNamesTheLibrarysType() {
        // README module selector: begin
        let policy = URLTaskManager::RetryPolicy.default
        // README module selector: end
        XCTAssertEqual(policy.maximumAttempts, URLTaskManager::RetryPolicy().maximumAttempts)
        _ = RetryPolicy()
    }
}
