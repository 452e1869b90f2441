import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Reads the process's resident-set figures from `/proc/self/status` (Linux only); a copy of
/// URLTaskManagerTests' own (test targets share no code).
///
/// `VmHWM` is the peak resident set since the process started, or since the last reset:
/// writing "5" to `/proc/self/clear_refs` sets it back to the current resident set, so two
/// runs in one process can each be measured (`HostileRedisTests` fail when the kernel refuses).
enum MemoryProbe {
    /// Peak resident set in KiB (`VmHWM`), or nil where unavailable.
    static var peakKiB: Int? { field("VmHWM") }
    /// Current resident set in KiB (`VmRSS`).
    static var residentKiB: Int? { field("VmRSS") }

    /// Resets the peak to the current resident set; false if the kernel refused. Memory freed
    /// by earlier work is first returned to the system, so that one measurement's leftovers do
    /// not hide the next one's growth.
    @discardableResult
    static func resetPeak() -> Bool {
        trimMallocHeap()
        guard let handle = FileHandle(forWritingAtPath: "/proc/self/clear_refs") else { return false }
        defer { try? handle.close() }
        do {
            try handle.write(contentsOf: Data("5".utf8))
            return true
        } catch {
            return false
        }
    }

    /// glibc's `malloc_trim(0)`, looked up at run time (the Glibc module does not export it).
    private static func trimMallocHeap() {
        #if canImport(Glibc)
        typealias Trim = @convention(c) (Int) -> Int32
        guard let process = dlopen(nil, RTLD_NOW), let symbol = dlsym(process, "malloc_trim") else { return }
        _ = unsafeBitCast(symbol, to: Trim.self)(0)
        #endif
    }

    private static func field(_ name: String) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix(name + ":") {
            let digits = line.dropFirst(name.count + 1).filter(\.isNumber)
            return Int(digits)
        }
        return nil
    }
}
