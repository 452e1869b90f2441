#!/usr/bin/env bash
# The manager against plain URLSession over a network that is not loopback: the client and the
# server each in a network namespace of their own, joined by a veth pair, with a round trip of
# 0, 1 and 20 ms added, so the ratios show what a user pays when the network is in the way.
#
#     scripts/bench-netem.sh            # BUILD_PATH (default .build) for the release build
#
# Root is needed (ip netns); iproute2 is installed from Debian's packages if missing. Where
# namespaces cannot be made, it prints a SKIP line and exits 0. The delay is `tc netem` on both
# ends of the pair (half the round trip each way); where the kernel has no netem qdisc, the
# server makes it instead (`Benchmarks serve-at ADDRESS PORT DELAY-MS` answers each request
# that long after reading it) and the output says so. Addresses are 10.200.20.1 (client) and
# 10.200.20.2 (server), inside the two namespaces only; both are removed at the end, on
# failure too. Bounded counts: about a minute with a 20 ms round trip.
set -euo pipefail
cd "$(dirname "$0")/.."

build_path="${BUILD_PATH:-.build}"
client_ns="urltm-client-$$"
server_ns="urltm-server-$$"
client_if="u20c$$"
server_if="u20s$$"
client_ip="10.200.20.1"
server_ip="10.200.20.2"
port=8080

if ! command -v swift >/dev/null 2>&1; then
    export PATH="$PATH:/opt/swift/usr/bin"
fi
if { ! command -v ip || ! command -v tc; } >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "== installing iproute2 from Debian's packages" >&2
    apt-get install -y iproute2 >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y iproute2 >/dev/null; } || true
fi
if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
    echo "SKIP: ip and tc (iproute2) are not installed and could not be installed"
    exit 0
fi

server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    ip netns del "$client_ns" 2>/dev/null || true  # takes the veth pair with it
    ip netns del "$server_ns" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! error="$(ip netns add "$server_ns" 2>&1)"; then
    echo "SKIP: network namespaces are not allowed here (ip netns add: $error)"
    exit 0
fi
ip netns add "$client_ns"

swift build -c release --build-path "$build_path" --product Benchmarks >&2
bin="$(pwd)/$build_path/release/Benchmarks"

ip link add "$client_if" netns "$client_ns" type veth peer name "$server_if" netns "$server_ns"
ip -n "$client_ns" addr add "$client_ip/30" dev "$client_if"
ip -n "$server_ns" addr add "$server_ip/30" dev "$server_if"
for ns in "$client_ns" "$server_ns"; do ip -n "$ns" link set lo up; done
ip -n "$client_ns" link set "$client_if" up
ip -n "$server_ns" link set "$server_if" up

netem=yes
if ! error="$(tc -n "$client_ns" qdisc add dev "$client_if" root netem delay 0ms 2>&1)"; then
    netem=no
    echo "NOTE: this kernel has no netem qdisc (tc: $error): the server makes the delay instead,"
    echo "answering each request one round trip after reading it (connection set-up is not delayed)"
    echo
else
    tc -n "$server_ns" qdisc add dev "$server_if" root netem delay 0ms
fi

start_server() {  # DELAY-MS
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    ip netns exec "$server_ns" "$bin" serve-at "$server_ip" "$port" "$1" >/dev/null &
    server_pid=$!
    for _ in $(seq 100); do
        if ip netns exec "$client_ns" bash -c "exec 3<>/dev/tcp/$server_ip/$port" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "the server did not start in $server_ns" >&2
    exit 1
}

# round trip in ms, sequential GETs (over 3 rounds), groups of 10 and of 100 concurrent GETs a round
for setting in "0 600 20 4" "1 300 10 4" "20 60 5 2"; do
    read -r rtt sequential batches_10 batches_100 <<<"$setting"
    if [ "$netem" = yes ]; then
        half="$(awk -v rtt="$rtt" 'BEGIN { printf "%gms", rtt / 2 }')"
        tc -n "$client_ns" qdisc change dev "$client_if" root netem delay "$half"
        tc -n "$server_ns" qdisc change dev "$server_if" root netem delay "$half"
        start_server 0
        how="netem $half each way"
    else
        start_server "$rtt"
        how="the server's delay"
    fi
    title="server in another network namespace over veth, $rtt ms round trip ($how)"
    ip netns exec "$client_ns" "$bin" against "http://$server_ip:$port" --title "$title" \
        --rounds 3 --sequential "$sequential" --concurrent 10 --batches "$batches_10"
    ip netns exec "$client_ns" "$bin" against "http://$server_ip:$port" --title "$title" \
        --rounds 3 --sequential 0 --concurrent 100 --batches "$batches_100" | tail -n +4
done
