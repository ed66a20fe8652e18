#!/usr/bin/env bash
# A three-node cluster against one node, measured in one run (docs/benchmarks.md, issue 14).
#
#   tools/bench-cluster.sh            # 10 s per scenario; SECS=3 for a quick look
#   CHAT_ONLY=1 tools/bench-cluster.sh  # only the 3-node chat row (A/B runs of the chat path)
#   RECONNECT_ONLY=1 tools/bench-cluster.sh  # only the reconnect-after-node-death row
#
# Every server: release build, fresh temporary data dir, fsync = "always", one shard. The
# single node and the three cluster nodes share CPU 0 (one host's worth of cores for all
# three: this measures the replication's cost per message, not a cluster's capacity);
# boltq-bench runs on CPU 1 against node 1. Then failover: an open-loop publish at RATE/s
# through node 1 while the node leading the most slots gets SIGKILL; the longest publish
# latency is the time those slots were without a leader. Every server has the messaging
# plane on: chat rows (CHAT_RATE sends/s among CHAT_DEVICES devices on node 1's gateway)
# compare send→sent and send→delivered on one node and on three, and a chat failover kills
# the busiest other leader mid-run. Last, reconnect after a node's death: RECONNECT_DEVICES
# devices on node 1 go away, node 1 gets SIGKILL, a writer on node 2 writes to each of them,
# and they come back on node 3 (fresh sessions, each subscribing from its committed cursor).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-10}
WARM=${WARM:-2}
RATE=${RATE:-500}
CHAT_RATE=${CHAT_RATE:-2000}
CHAT_DEVICES=${CHAT_DEVICES:-1000}
CHAT_ONLY=${CHAT_ONLY:-}
RECONNECT_ONLY=${RECONNECT_ONLY:-}
RECONNECT_DEVICES=${RECONNECT_DEVICES:-10000}
ulimit -n "$(ulimit -Hn)"
SECRET=0123456789abcdef0123456789abcdef
WORK=$(mktemp -d /tmp/boltq-cluster-bench.XXXXXX)
SERVERS=()
trap 'kill "${SERVERS[@]}" 2>/dev/null; pkill -P $$ 2>/dev/null || true; wait 2>/dev/null; rm -rf "$WORK"' EXIT

if [ -z "${BOLTQ_BIN:-}" ] || [ -z "${BENCH_BIN:-}" ]; then
  cargo build --release -q -p boltq -p boltq-tools
fi
BOLTQ_BIN=${BOLTQ_BIN:-target/release/boltq}
BENCH_BIN=${BENCH_BIN:-target/release/boltq-bench}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ready() { for _ in $(seq 300); do curl -sf "http://127.0.0.1:$1/readyz" >/dev/null && return; sleep 0.1; done; echo "node on :$1 not ready" >&2; exit 1; }

# start NAME TCP HTTP [CLUSTER-TOML]: a server on CPU 0; its pid in $STARTED (and in
# SERVERS, which the exit trap kills: not run in a subshell, so the server stays our child)
start() {
  local name=$1 tcp=$2 http=$3 extra=${4:-}
  printf '[server]\nhost = "127.0.0.1"\ntcp_port = %s\nhttp_port = %s\nshards = 1\n[storage]\ndata_dir = "%s"\n%s\n%s' \
    "$tcp" "$http" "$WORK/data-$name" "$MESSAGING" "$extra" >"$WORK/$name.toml"
  taskset -c 0 "$BOLTQ_BIN" --config "$WORK/$name.toml" >"$WORK/$name.log" 2>&1 &
  STARTED=$!
  SERVERS+=("$STARTED")
}

MESSAGING=$(printf '[messaging.stream]\nenabled = true\n[messaging.identity]\nenabled = true\nkeys = [{ id = "k1", secret = "%s" }]\n[messaging.gateway]\nenabled = true' "$SECRET")

# row NAME TCP HTTP BENCH-ARGS...: prints "NAME <msgs/s> <p50 ms> <p99 ms> <max ms> <errors>"
row() {
  local name=$1 tcp=$2 http=$3; shift 3
  local report="$WORK/${name//[^A-Za-z0-9]/_}.json"
  "$BENCH_BIN" "$@" --addr "127.0.0.1:$tcp" --cpus 1 --json --quiet >"$report" || true
  python3 - "$name" "$report" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
lats = r["latency_us"]
lat = lats.get("publish") or next(iter(lats.values()))
print(f"{sys.argv[1]:<30} {r['throughput']['msgs_per_sec']:>10,.0f} {lat['p50'] / 1000:>8.2f} "
      f"{lat['p99'] / 1000:>8.2f} {lat['max'] / 1000:>9.1f} {r['errors']['total']:>7}")
PY
}

# chat_row NAME HTTP BENCH-ARGS...: prints "NAME <sends/s> <sent p50/p99 ms> <delivered p50/p99 ms> <max ms> <errors>"
chat_row() {
  local name=$1 http=$2; shift 2
  local report="$WORK/${name//[^A-Za-z0-9]/_}.json"
  "$BENCH_BIN" "$@" --url "ws://127.0.0.1:$http/ws" --cpus 1 --json --quiet >"$report" || true
  python3 - "$name" "$report" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[2]))
except ValueError:
    sys.exit(f"{sys.argv[1]:<30} no report (the run failed; its error is above)")
lat = r["latency_us"]
s, d = lat.get("send", {}), lat.get("delivery", {})
ms = lambda h, k: h.get(k, 0) / 1000
print(f"{sys.argv[1]:<30} {r['throughput']['msgs_per_sec']:>10,.0f} {ms(s, 'p50'):>6.2f}/{ms(s, 'p99'):<7.2f} "
      f"{ms(d, 'p50'):>6.2f}/{ms(d, 'p99'):<7.2f} {ms(d, 'max'):>9.1f} {r['errors']['total']:>7} "
      f"{json.dumps(r['errors'].get('by_kind', {}))[:120] if r['errors']['total'] else ''}")
PY
}

printf '%-30s %10s %8s %8s %9s %7s\n' "scenario (fsync always)" "msgs/s" "p50 ms" "p99 ms" "max ms" "errors"
QUEUE=(queue --producers 1 --consumers 1 --depth 64 --size 100 --duration-secs "$SECS" --warmup-secs "$WARM")
# Open loop: a window deep enough that the rate, not the window, sets the pace.
OPEN=(publish --rate "$RATE" --connections 4 --depth 64 --size 100 --duration-secs "$SECS")

CHAT=(chat --secret "$SECRET" --devices "$CHAT_DEVICES" --rate "$CHAT_RATE" --duration-secs "$SECS" --warmup-secs "$WARM")
if [ -z "$CHAT_ONLY$RECONNECT_ONLY" ]; then
  tcp=$(free_port); http=$(free_port)
  start single "$tcp" "$http"; pid=$STARTED; ready "$http"
  row "single node: queue" "$tcp" "$http" "${QUEUE[@]}"
  row "single node: publish @${RATE}/s" "$tcp" "$http" "${OPEN[@]}"
  chat_row "single node: chat @${CHAT_RATE}/s" "$http" "${CHAT[@]}"
  kill "$pid"; wait "$pid" 2>/dev/null || true
fi

declare -a TCP HTTP RAFT PID
for i in 1 2 3; do TCP[$i]=$(free_port); HTTP[$i]=$(free_port); RAFT[$i]=$(free_port); done
for i in 1 2 3; do
  peers=""
  for j in 1 2 3; do [ "$j" = "$i" ] || peers="$peers\"n$j@127.0.0.1:${RAFT[$j]}\","; done
  start "n$i" "${TCP[$i]}" "${HTTP[$i]}" \
    "$(printf '[cluster]\nenabled = true\nnode_id = "n%s"\nraft_addr = "127.0.0.1:%s"\npeers = [%s]\n' "$i" "${RAFT[$i]}" "${peers%,}")"
  PID[$i]=$STARTED
done
for i in 1 2 3; do ready "${HTTP[$i]}"; done
sleep 6   # one leader-balancing round
if [ -n "$CHAT_ONLY" ]; then
  chat_row "3 nodes: chat @${CHAT_RATE}/s" "${HTTP[1]}" "${CHAT[@]}"
  exit 0
fi

# restart_node I: node I, killed, starts again with its config and data; then one
# leader-balancing round.
restart_node() {
  wait "${PID[$1]}" 2>/dev/null || true
  taskset -c 0 "$BOLTQ_BIN" --config "$WORK/n$1.toml" >>"$WORK/n$1.log" 2>&1 &
  PID[$1]=$!
  SERVERS+=("${PID[$1]}")
  ready "${HTTP[$1]}"
  sleep 6
}

# reconnect_row: devices on n1 go away, n1 gets SIGKILL, the writer on n2 writes, the
# devices come back on n3. Prints devices, seconds from the reconnect's start until the
# last device held everything written while it was away, welcomes, errors, failed checks.
reconnect_row() {
  local report="$WORK/reconnect.json"
  "$BENCH_BIN" reconnect --secret "$SECRET" --devices "$RECONNECT_DEVICES" --away-messages 2 \
    --url "ws://127.0.0.1:${HTTP[1]}/ws" --writer-url "ws://127.0.0.1:${HTTP[2]}/ws" \
    --resume-url "ws://127.0.0.1:${HTTP[3]}/ws" --while-away-cmd "kill -9 ${PID[1]}" \
    --connect-concurrency 256 --drain-timeout-secs 60 --cpus 1 --json --quiet >"$report" || true
  python3 - "$report" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit("reconnect after n1's death: no report (the run failed; its error is above)")
x = r["messages"]
failed = [name for name, ok in r["checks"].items() if not ok]
print(f"reconnect after n1's death: {x.get('caught_up')} of {x.get('disconnected')} devices caught up "
      f"in {x.get('all_caught_up_secs')} s on n3 (fresh sessions: {x.get('not_resumed')}; "
      f"writes retried after 'retry': {x.get('send_retries')}), "
      f"errors {r['errors']['total']} {json.dumps(r['errors'].get('by_kind', {}))[:300] if r['errors']['total'] else ''}, "
      f"failed checks {failed or 'none'}")
PY
}
if [ -n "$RECONNECT_ONLY" ]; then
  reconnect_row
  exit 0
fi
row "3 nodes: queue via n1" "${TCP[1]}" "${HTTP[1]}" "${QUEUE[@]}"
row "3 nodes: publish @${RATE}/s" "${TCP[1]}" "${HTTP[1]}" "${OPEN[@]}"
chat_row "3 nodes: chat @${CHAT_RATE}/s" "${HTTP[1]}" "${CHAT[@]}"

# Failover: kill the busiest leader other than n1 mid-run.
victim=$(curl -s "http://127.0.0.1:${HTTP[1]}/cluster/status" | python3 -c '
import json, sys
led = json.load(sys.stdin)["cluster"]["slots_led"]
print(max((n for n in led if n != "n1"), key=lambda n: led[n])[1:])')
( sleep $((SECS / 2)); kill -9 "${PID[$victim]}" ) &
row "failover (kill -9 n$victim)" "${TCP[1]}" "${HTTP[1]}" "${OPEN[@]}" --max-errors 1000000
echo "(failover: max ms = the longest a publish waited while n$victim's slots elected new leaders;"
echo " errors = publishes in flight to n$victim, answered 'outcome unknown')"

# Chat failover: the killed node comes back (same config and data), the leaders spread
# again, then the busiest leader other than n1 is killed mid-run.
restart_node "$victim"
victim2=$(curl -s "http://127.0.0.1:${HTTP[1]}/cluster/status" | python3 -c '
import json, sys
led = json.load(sys.stdin)["cluster"]["slots_led"]
print(max((n for n in led if n != "n1"), key=lambda n: led[n])[1:])')
# Later than the publish failover's kill: the devices connect and prime first.
( sleep $((WARM + SECS / 2 + 5)); kill -9 "${PID[$victim2]}" ) &
chat_row "chat failover (kill -9 n$victim2)" "${HTTP[1]}" "${CHAT[@]}" --max-errors 1000000
echo "(chat: sends/s, send->sent p50/p99 ms, send->delivered p50/p99 ms, max delivery ms, errors;"
echo " in the failover row, errors = sends answered 'retry' while n$victim2's slots elected)"

# Reconnect after a node's death, with every node up again first.
restart_node "$victim2"
reconnect_row
