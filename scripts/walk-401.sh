#!/usr/bin/env bash
# How far one request travels through the library on a 401: file boundaries crossed, files and
# folders touched (issue 31's "about 75 file boundaries in about 35 files and 8 folders", counted
# by a tool instead of by reading).
#
#     scripts/walk-401.sh [core|oauth2]       # default core
#
# The walk: ONE GET leaves with a token the server no longer takes, gets a 401, starts one shared
# refresh (a reactor with `URLTaskReactorConfiguration.authentication`), is requeued through the
# interceptors with the new token and ends 200. `core`: a synchronous interceptor setting the bearer
# from memory and a 10-line reactor swapping the token after 100 ms (the engine's path alone); `oauth2`: the
# OAuth2 kit (`BearerInterceptor`, `OAuth2RefreshReactor`, `OAuth2Authenticator`) against an
# `OAuthServer`. The workload is `Benchmarks walk-401 WALKS KIT` (Sources/Benchmarks/
# Walk401Benchmark.swift): a warm-up walk, then WALKS more, the server in the same process.
#
# Definitions (scripts/walk-401-count.py does the counting):
# - A library function: a function whose debug info places it in a file under Sources/URLTask*.
#   A DEBUG build (-Onone): calls follow the source's functions, nothing is inlined except what
#   the source forces (`@_transparent`). Taking a lock is not a step: `LockedState.withLock` (the
#   library's lock box, around an `NSLock`) and `EngineStorage.withLock` count as outside the
#   library, as Foundation's `NSLock.withLock` itself does. Nor are the compiler's
#   outlined value operations (a copy or destroy of an enum: debug info names the file of the
#   first function that needed them, not a call in the source).
# - A hop: one call, as valgrind's callgrind records it, whose caller and callee are library
#   functions defined in different files. A call through a compiler-generated thunk of a library
#   module (protocol witness, a closure's partial-apply forwarder) counts as a call to the function
#   it forwards to; work handed to a queue or an executor (Dispatch, Swift concurrency) is not a
#   call between library functions and is not counted; an async callee resuming its caller's
#   continuation is a call as callgrind sees it.
# - The in-process server is not the library's path. A call made by the server (a function under
#   Sources/LoopbackServer: LoopbackServer, OAuthServer), or by a library or standard-library
#   function that only such calls run (the server hashes each body with URLTaskCrypto's SHA-256,
#   whose functions then call each other), is neither a hop nor a call that makes a file touched.
#   Foundation, Dispatch and the Swift runtime stop that: what they call is the library's path. The
#   workload (Sources/Benchmarks) counts: its interceptor, reactor and closures are the app's code,
#   which calls the library as an app's would (oauth2: `isTokenRequest: { endpoint.matches($0) }`).
# - The walk = (run with 1 walk) - (run with 0 walks): hops, distinct (caller file -> callee file)
#   pairs among them, files whose functions were called more often (by other than the server),
#   and those files' folders.
# - An engine event: one pass through the engine's funnel (`EngineStorage.withLock`, one lock
#   section); the most crossed file pair is also printed per engine event (its calls divided by
#   the passes: an average over the walk's events).
#   A third run with 2 walks checks that the second walk costs what the first did.
#
# Deterministic: the counts are of calls, not of time or instructions; run it twice to see the
# same figures. About 1 to 2 minutes (a debug build of Benchmarks, then 3 callgrind runs).
# Environment: BUILD_PATH (default .build), KEEP=DIR keeps the callgrind profiles in DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

kit="${1:-core}"
build_path="${BUILD_PATH:-.build}"

if ! command -v swift >/dev/null 2>&1; then
    export PATH="$PATH:/opt/swift/usr/bin"
fi
if ! command -v valgrind >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "== installing valgrind from Debian's packages" >&2
    apt-get install -y valgrind >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y valgrind >/dev/null; } || true
fi
command -v valgrind >/dev/null 2>&1 || { echo "valgrind is not installed" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "python3 is needed to read the call graphs" >&2; exit 1; }

swift build -c debug --build-path "$build_path" --product Benchmarks >&2
bin="$build_path/debug/Benchmarks"

work="${KEEP:-$(mktemp -d)}"
mkdir -p "$work"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT

for walks in 0 1 2; do
    if ! valgrind --tool=callgrind --callgrind-out-file="$work/walk.$walks.out" "$bin" walk-401 "$walks" "$kit" \
        >"$work/walk.$walks.stdout" 2>"$work/walk.$walks.stderr"; then
        echo "callgrind run failed: walk-401 $walks $kit" >&2
        tail -n 20 "$work/walk.$walks.stdout" "$work/walk.$walks.stderr" >&2
        exit 1
    fi
done

echo "URLTaskManager 401 walk ($kit): $(git log -1 --format='%h %s' 2>/dev/null | cut -c1-80)"
echo "one GET: 401 -> one shared refresh -> requeue through the interceptors -> 200; debug build, callgrind"
python3 scripts/walk-401-count.py "$work/walk.0.out" "$work/walk.1.out" "$work/walk.2.out"
