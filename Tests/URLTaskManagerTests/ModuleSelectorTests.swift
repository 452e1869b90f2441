import URLTaskManager
import XCTest

/// An app module with a `URLTaskPolicy` of its own.
private struct URLTaskPolicy {}

/// The module and its main class share the name `URLTaskManager`, so
/// `URLTaskManager.URLTaskPolicy` looks inside the class and fails to compile where the app has a
/// `URLTaskPolicy` of its own; Swift 6.3's module selector names the module instead (the FAQ's
/// answer, compiled here).
final class ModuleSelectorTests: XCTestCase {
    // Module selectors are Swift 6.3's: an older compiler skips this block unparsed.
    #if compiler(>=6.3)
    func testTheModuleSelectorNamesTheLibrarysType() {
        // README module selector: begin
        let policy = URLTaskManager::URLTaskPolicy(maximumHoldTime: .seconds(5))
        // README module selector: end
        XCTAssertEqual(policy.maximumHoldSeconds, 5)
        _ = URLTaskPolicy()
    }
    #endif
}
