// 0.3's code that matches the satellites' error codes in a module importing URLTaskManager
// alone: 0.4 declares each code in the module that makes it (URLTaskResilience, URLTaskOAuth2),
// and the compiler says which import each needs (scripts/check-migration.sh).
import URLTaskManager

func describe(_ error: URLTaskError) -> String {
    if error.code == .circuitOpen { return "the host's circuit is open" }
    if error.code == .rateLimitQueueFull { return "too many requests wait for the host" }
    if error.code == .authenticationFailed { return "sign in again" }
    return "\(error.code)"
}

print(describe(URLTaskError(code: .reactorFailed)))
