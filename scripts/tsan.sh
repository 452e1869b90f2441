#!/usr/bin/env bash
# The test suites under the thread sanitizer: fails on any test failure and on any
# "WARNING: ThreadSanitizer" (a data race, a lock-order inversion, ... in any thread of the run).
#
#     scripts/tsan.sh [SWIFT-TEST-ARGUMENTS...]    # e.g. --filter 'ReactorEngineTests'
#
# Runs URLTaskManagerTests, URLTaskResilienceTests, URLTaskOAuth2Tests and ContractTests (the
# default filter; LoopbackServerTests is the test server's own suite). Environment: BUILD_PATH
# (default .build-tsan, apart from the debug build: the sanitizer changes every object file), SKIP
# (a regular expression of tests to leave out, passed to `swift test --skip`; empty by default),
# LOG (default $BUILD_PATH/tsan.log: the whole output, kept for reading the reports).
#
# Each distinct warning is summarised at the end: its kind, the top frame of each of the two
# stacks, and the first frame of each stack in this package's Sources. `halt_on_error=0`: the run
# goes on after a report, so one run shows them all. `SWIFT_BACKTRACE=enable=no`: the tests that
# run a child process expecting it to crash (CorelibsChangePinTests) need it to die by its signal,
# and the Swift runtime's backtracer forks on a crash, which the sanitizer's fork handler aborts
# ("CHECK failed: tsan_rtl.cpp:261"): the child then exits instead. On a loaded 2-core machine the build took
# about 3 minutes and the run 8 to 11 (528 tests).
set -euo pipefail
cd "$(dirname "$0")/.."

build_path="${BUILD_PATH:-.build-tsan}"
log="${LOG:-$build_path/tsan.log}"

if ! command -v swift >/dev/null 2>&1; then
    export PATH="$PATH:/opt/swift/usr/bin"
fi

swift build --build-tests --sanitize=thread --build-path "$build_path" >&2

arguments=("$@")
if [ ${#arguments[@]} -eq 0 ]; then
    arguments=(--filter 'URLTaskManagerTests|URLTaskResilienceTests|URLTaskOAuth2Tests|ContractTests')
fi
if [ -n "${SKIP:-}" ]; then
    arguments+=(--skip "$SKIP")
fi

mkdir -p "$(dirname "$log")"
status=0
SWIFT_BACKTRACE="${SWIFT_BACKTRACE:-enable=no}" TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
    swift test --skip-build --sanitize=thread --build-path "$build_path" "${arguments[@]}" >"$log" 2>&1 || status=$?

summary="$(grep -E "Executed [0-9]+ tests?" "$log" | tail -n 1 | sed 's/^[[:space:]]*//' || true)"
failures="$(grep -E "^Test Case '.*' failed" "$log" | sed -E "s/^Test Case '([^']*)'.*/\1/" | sort -u || true)"
warnings="$(grep -c "WARNING: ThreadSanitizer" "$log" || true)"

echo "thread sanitizer: $(swift --version 2>/dev/null | head -n 1)"
echo "${summary:-no XCTest summary in $log}"
echo "swift test exit status $status; failed tests $(printf '%s' "$failures" | grep -c . || true); ThreadSanitizer warnings $warnings (log: $log)"
[ -z "$failures" ] || printf '  failed: %s\n' $failures

if [ "$warnings" -gt 0 ]; then
    echo
    echo "distinct warnings (kind | top of stack 1 | top of stack 2 | first frame of each in Sources/):"
    # A report runs from "WARNING: ThreadSanitizer: KIND" to "SUMMARY: ThreadSanitizer: ...";
    # its stacks are the blocks of "    #N ..." lines.
    awk '
        /WARNING: ThreadSanitizer:/ { inside = 1; kind = $0; sub(/.*WARNING: ThreadSanitizer: /, "", kind); sub(/ \(pid=.*/, "", kind)
            stack = 0; top[1] = top[2] = ours[1] = ours[2] = ""; next }
        inside && /^ *#0 / { stack++ }
        inside && /^ *#[0-9]+ / && stack <= 2 {
            frame = $0; sub(/^ *#[0-9]+ /, "", frame); sub(/ \(.*\+0x[0-9a-f]+\)$/, "", frame)
            if (top[stack] == "") top[stack] = frame
            if (ours[stack] == "" && frame ~ /\/Sources\//) { o = frame; sub(/.*\/Sources\//, "Sources/", o); ours[stack] = o }
        }
        inside && /SUMMARY: ThreadSanitizer/ { inside = 0
            print kind " | " top[1] " | " top[2] " | " (ours[1] == "" ? "-" : ours[1]) " | " (ours[2] == "" ? "-" : ours[2]) }
    ' "$log" | sort | uniq -c | sort -rn
fi

[ "$status" -eq 0 ] && [ "$warnings" -eq 0 ]
