import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// This process's memory and threads, as `/proc/self/status` says.
enum ProcessStatus {
    /// Resident memory in KiB after giving freed memory back to the system (glibc's
    /// `malloc_trim(0)`, looked up at run time: the Glibc module does not export it), so that
    /// what is measured is what is still in use, not what the allocator keeps for later.
    static func residentKiBAfterTrim() -> Int {
        trimMallocHeap()
        return field("VmRSS") ?? -1
    }

    /// The peak resident set in KiB (`VmHWM`) since the process started or since the last
    /// ``resetPeak()``.
    static var peakKiB: Int? { field("VmHWM") }

    /// Sets the peak resident set back to the current one (writing "5" to
    /// `/proc/self/clear_refs`), after giving freed memory back to the system so that earlier
    /// work's leftovers do not hide the next measurement's growth; false if the kernel refused.
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

    /// glibc's `malloc_trim(0)`, looked up at run time: the Glibc module does not export it.
    private static func trimMallocHeap() {
        #if canImport(Glibc)
        typealias Trim = @convention(c) (Int) -> Int32
        if let process = dlopen(nil, RTLD_NOW), let symbol = dlsym(process, "malloc_trim") {
            _ = unsafeBitCast(symbol, to: Trim.self)(0)
        }
        #endif
    }

    /// The number of threads.
    static var threads: Int { field("Threads") ?? -1 }

    /// A numeric field of `/proc/self/status` (`VmRSS`, `Threads`, ...).
    static func field(_ name: String) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") })
        else { return nil }
        return Int(line.dropFirst(name.count + 1).filter(\.isNumber))
    }
}
