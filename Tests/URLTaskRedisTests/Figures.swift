import Foundation

/// Prints a measured figure only when `URLTASKMANAGER_VERBOSE=1` is set: the assertions say
/// whether a test passed, and a default `swift test` run stays quiet. (A child process's result
/// lines, which its parent reads, are printed always.)
func printFigures(_ line: @autoclosure () -> String) {
    let verbose = ["1", "true", "yes"].contains(ProcessInfo.processInfo.environment["URLTASKMANAGER_VERBOSE"]?.lowercased() ?? "")
    if verbose { print(line()) }
}
