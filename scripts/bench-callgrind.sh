#!/usr/bin/env bash
# Instructions per request under valgrind's callgrind: a figure that does not move with the
# machine's load, unlike the wall and CPU times of `swift run -c release Benchmarks`.
#
#     scripts/bench-callgrind.sh [RUNS]        # RUNS (default 2) repetitions of every count
#
# Environment: BUILD_PATH (default .build), SMALL and LARGE (GETs per count, default 100 and
# 2100), CONFIGURATIONS (indices of the benchmark's configurations, default "0 1 2 3 4 5 11 12":
# 0 plain URLSession, 1 bare forwarding URLProtocol, 2 manager.session without interceptors,
# 3 the same with 1 HeaderInterceptor, 4 the same with an events reader, 5 manager.session with
# OAuth2 bearer + refresh, 11 manager.data(for:) without interceptors, 12 manager.data(for:)
# with OAuth2 bearer + refresh (11 and 12 are 2 and 5 through the manager's own methods, no
# outer URLSessionTask); also 6 streamed forwarding URLProtocol, 7 the HeaderInterceptor behind
# the async `intercept` only, 8 a `setValue` header interceptor, 9 and 10 plain URLSession
# sending one header, or an `Authorization` header, from its configuration),
# CONCURRENCY (default 1: sequential GETs; C: in groups of C at once).
#
# The server (`Benchmarks serve-at 127.0.0.1 0`) runs outside valgrind; each count is one
# process, `Benchmarks requests CONFIGURATION N URL` (N sequential GETs and nothing else) under
# callgrind, every thread of the client counted. Per request = (Ir of LARGE GETs - Ir of SMALL
# GETs) / (LARGE - SMALL), which takes out start-up, connection set-up and exit. Every count
# of every configuration is repeated RUNS times, interleaved, and the spread between runs is
# printed. About 30 s per configuration and run with the defaults on a 2-core machine, 8 to 9
# minutes in all.
#
# Why not a single count: the client's threads take turns under valgrind, and how the work falls
# between them (a wake-up more or less, generic metadata looked up again) varies from request
# to request; two runs of 1,000 plain GETs differed by up to 1 %, of 2,000 by less.
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-2}"
build_path="${BUILD_PATH:-.build}"
small="${SMALL:-100}"
large="${LARGE:-2100}"
configurations="${CONFIGURATIONS:-0 1 2 3 4 5 11 12}"
concurrency="${CONCURRENCY:-1}"

if ! command -v swift >/dev/null 2>&1; then
    export PATH="$PATH:/opt/swift/usr/bin"
fi
if ! command -v valgrind >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "== installing valgrind from Debian's packages" >&2
    apt-get install -y valgrind >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y valgrind >/dev/null; } || true
fi
if ! command -v valgrind >/dev/null 2>&1; then
    echo "SKIP: valgrind is not installed and could not be installed"
    exit 0
fi

swift build -c release --build-path "$build_path" --product Benchmarks >&2
bin="$build_path/release/Benchmarks"

work="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

"$bin" serve-at 127.0.0.1 0 >"$work/port" &
server_pid=$!
for _ in $(seq 100); do
    [ -s "$work/port" ] && break
    sleep 0.1
done
port="$(head -n 1 "$work/port")"
[ -n "$port" ] || { echo "the server did not start" >&2; exit 1; }
url="http://127.0.0.1:$port"

# count CONFIGURATION N: prints the instructions of one process that sends N GETs.
count() {
    if ! valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" "$bin" requests "$1" "$2" "$url" "$concurrency" \
        >"$work/stdout" 2>"$work/stderr"; then
        echo "callgrind run failed: configuration $1, $2 GETs" >&2
        tail -n 20 "$work/stderr" >&2
        exit 1
    fi
    # (awk pads by bytes: the events reader's name loses its ellipsis)
    head -n 1 "$work/stdout" | sed -e 's/: [0-9]* GETs$//' -e 's/^… with an events reader$/manager, 1 Header + events reader/' >"$work/name.$1"
    sed -n 's/^totals: *//p' "$work/callgrind.out"
}

for run in $(seq "$runs"); do
    for configuration in $configurations; do
        small_ir="$(count "$configuration" "$small")"
        large_ir="$(count "$configuration" "$large")"
        echo "$configuration $run $small_ir $large_ir" >>"$work/counts"
        echo "run $run, $(cat "$work/name.$configuration"): $small GETs $small_ir Ir, $large GETs $large_ir Ir" >&2
    done
done

echo "URLTaskManager instructions per request: callgrind ($(valgrind --version)), $(uname -m), $(nproc) cores,"
if [ "$concurrency" = 1 ]; then how="sequential GETs of a 2-byte body"; else how="GETs of a 2-byte body, $concurrency at once,"; fi
echo "$how from a server on 127.0.0.1 outside valgrind; every thread of the client"
echo "per request = (Ir of $large GETs - Ir of $small GETs) / $((large - small)); $runs runs; ratio = run 1 / plain's run 1"
echo
awk -v small="$small" -v large="$large" -v runs="$runs" -v dir="$work" '
    {
        per[$1, $2] = ($4 - $3) / (large - small)
        if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 }
    }
    END {
        header = sprintf("  %-36s", "")
        for (r = 1; r <= runs; r++) header = header sprintf("%12s", "run " r)
        print header sprintf("%9s%8s", "spread", "ratio")
        plain = per[order[1], 1]
        for (i = 1; i <= n; i++) {
            c = order[i]
            name = ""
            getline name < (dir "/name." c)
            line = sprintf("  %-36s", name)
            lo = per[c, 1]; hi = per[c, 1]
            for (r = 1; r <= runs; r++) {
                line = line sprintf("%12.0f", per[c, r])
                if (per[c, r] < lo) lo = per[c, r]
                if (per[c, r] > hi) hi = per[c, r]
            }
            printf "%s%8.2f%%%7.2fx\n", line, (hi - lo) / lo * 100, per[c, 1] / plain
        }
    }' "$work/counts"
