#!/usr/bin/env bash
# Prints the measured figures the README and the Performance article quote, by running the
# benchmarks that measure them. Nothing is written to the documents: the output is what a human
# compares with them and copies in, with the date, the machine and its load.
#
#     scripts/print-figures.sh MODE...      # one or more modes, in that order
#     scripts/print-figures.sh all          # every mode (an hour or more; netem needs root)
#
# The Benchmarks product is built once in release (BUILD_PATH, default .build), then each mode
# runs. What each mode prints, and which table it feeds (README: README.md; Performance:
# Sources/URLTaskManager/URLTaskManager.docc/Performance.md):
#
#   instructions   scripts/bench-callgrind.sh (default configurations 0 1 2 3 4 5 11 12, 2 runs;
#                  8 to 9 minutes). README "Performance", the instructions column; README "Two
#                  ways in", the instructions column; Performance "Instructions per request" and
#                  the callgrind table of "The manager's own methods".
#   interceptor    scripts/bench-callgrind.sh with CONFIGURATIONS="0 2 3 5 9 10", then "0 3 7 8"
#                  (about 10 minutes). Performance "The interceptor step, measured for cost" (what
#                  a plain session pays for the same header) and "The synchronous path".
#   wall           swift run -c release Benchmarks, RUNS times (default 1; the README's ranges
#                  are over 6 runs; a few minutes each). README "Performance", the wall columns and
#                  the events reader's CPU; README "Two ways in", the wall columns; Performance
#                  "Time, CPU and context switches over loopback", "An events reader" and the wall
#                  table of "The manager's own methods".
#   netem          scripts/bench-netem.sh (root; about 40 seconds; prints SKIP where network
#                  namespaces cannot be made). README "Performance", the 20 ms round trip column;
#                  Performance "Over a network with a round trip".
#   streaming      swift run -c release Benchmarks streaming (400 MB; 1 to 2 minutes). README "Two
#                  ways in", the memory sentence; Performance, the streaming table of "The
#                  manager's own methods".
#   lifetime       swift run -c release Benchmarks lifetime. Performance "The floor, and the rest".
#   soak           swift run -c release Benchmarks soak $SOAK_ARGS (default: its own 200,000
#                  requests; the article's run was "120000"). Performance "Memory over a long
#                  run"; README "Development".
#   soak-refresh   swift run -c release Benchmarks soak-refresh $SOAK_REFRESH_ARGS. Performance
#                  "The OAuth2 kit with tokens revoked".
#   coalescing     swift run -c release Benchmarks coalescing. README "Resilience" (the measured
#                  paragraph); Performance "The resilience parts".
#   hosts          swift run -c release Benchmarks hosts. README "Resilience" (`maximumHosts`);
#                  Performance "The resilience parts".
#   walk           scripts/walk-401.sh core, then oauth2 (a debug build; 1 to 2 minutes each).
#                  README "Development" (the 401 walk's hops, file pairs, files and folders).
#
# Not printed here, because no benchmark mode measures them: the Alamofire rows (a harness
# outside the repository, see Performance "Alamofire"), the thread sanitizer's count
# (scripts/tsan.sh), the fleet on Redis (FleetProcessTests and `swift run Examples fleet`), the
# session's streaming memory by body size (Performance "Streaming memory through the session"),
# the per-operation counts of "Single operations on Linux" (callgrind's per-function counts,
# read by hand) and "Figures behind other choices" (tests and one-off runs).
#
# Timed figures move with the machine's load: note `uptime` before and after, as the article does.
set -euo pipefail
cd "$(dirname "$0")/.."

modes=(instructions interceptor wall netem streaming lifetime soak soak-refresh coalescing hosts walk)

usage() {
    echo "usage: scripts/print-figures.sh MODE... | all" >&2
    echo "modes: ${modes[*]}" >&2
    exit 2
}

[ "$#" -gt 0 ] || usage
requested=()
for argument in "$@"; do
    if [ "$argument" = all ]; then
        requested+=("${modes[@]}")
        continue
    fi
    known=false
    for mode in "${modes[@]}"; do
        [ "$mode" = "$argument" ] && known=true
    done
    $known || { echo "unknown mode: $argument" >&2; usage; }
    requested+=("$argument")
done

if ! command -v swift >/dev/null 2>&1; then
    export PATH="$PATH:/opt/swift/usr/bin"
fi
build_path="${BUILD_PATH:-.build}"
export BUILD_PATH="$build_path"

swift build -c release --build-path "$build_path" --product Benchmarks >&2
bin="$build_path/release/Benchmarks"

# header MODE FEEDS: one line saying what follows and where it goes.
header() {
    echo
    echo "== $1 ($(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d ' ' -f 1-3 /proc/loadavg 2>/dev/null || echo unknown))"
    echo "== feeds: $2"
}

for mode in "${requested[@]}"; do
    case "$mode" in
    instructions)
        header "$mode" 'README "Performance" and "Two ways in" (instructions); Performance "Instructions per request", "The manager'"'"'s own methods"'
        scripts/bench-callgrind.sh
        ;;
    interceptor)
        header "$mode" 'Performance "The interceptor step, measured for cost" (configurations 9 and 10: plain with the header)'
        CONFIGURATIONS="0 2 3 5 9 10" scripts/bench-callgrind.sh
        header "$mode" 'Performance "The synchronous path" (configuration 7: the header through the async path; 8: setValue)'
        CONFIGURATIONS="0 3 7 8" scripts/bench-callgrind.sh
        ;;
    wall)
        for run in $(seq "${RUNS:-1}"); do
            header "$mode, run $run of ${RUNS:-1}" 'README "Performance" and "Two ways in" (wall); Performance "Time, CPU and context switches over loopback", "An events reader", "The manager'"'"'s own methods"'
            "$bin"
        done
        ;;
    netem)
        header "$mode" 'README "Performance" (20 ms round trip); Performance "Over a network with a round trip"'
        scripts/bench-netem.sh
        ;;
    streaming)
        header "$mode" 'README "Two ways in" (memory); Performance "The manager'"'"'s own methods" (streaming a 400 MB body)'
        "$bin" streaming
        ;;
    lifetime)
        header "$mode" 'Performance "The floor, and the rest" (session lifetime)'
        "$bin" lifetime
        ;;
    soak)
        header "$mode" 'Performance "Memory over a long run"; README "Development" (the soak)'
        # shellcheck disable=SC2086 # SOAK_ARGS is a list of arguments
        "$bin" soak ${SOAK_ARGS:-}
        ;;
    soak-refresh)
        header "$mode" 'Performance "The OAuth2 kit with tokens revoked"'
        # shellcheck disable=SC2086 # SOAK_REFRESH_ARGS is a list of arguments
        "$bin" soak-refresh ${SOAK_REFRESH_ARGS:-}
        ;;
    coalescing)
        header "$mode" 'README "Resilience" (coalescing); Performance "The resilience parts"'
        "$bin" coalescing
        ;;
    hosts)
        header "$mode" 'README "Resilience" (maximumHosts); Performance "The resilience parts"'
        "$bin" hosts
        ;;
    walk)
        header "$mode" 'README "Development" (the 401 walk)'
        scripts/walk-401.sh core
        scripts/walk-401.sh oauth2
        ;;
    esac
done
