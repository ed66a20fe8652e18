#!/usr/bin/env bash
# The messaging gateway under boltq-bench on this machine (docs/benchmarks.md, "Messaging
# gateway (boltq-bench)").
#
#   tools/bench-gateway.sh                  # every row below
#   tools/bench-gateway.sh chat-10k reconnect-10k   # only these rows
#   SECS=3 DEVICES=2000 tools/bench-gateway.sh      # smaller and shorter
#
# Each row: a fresh `boltq` (release build, --shards 1, pinned to CPU 0, messaging.fsync
# "always", a new data dir under $WORK) and boltq-bench pinned to CPU 1, on loopback and
# free ports; both stopped after. SPIN_US sets the server's spin_before_park_us (default 0). BOLTQ_BIN / BENCH_BIN use prebuilt binaries instead of
# building. Prints one line per row: sends/s acknowledged, deliveries/s, send->delivered
# latency p50/p99/max in ms, errors; the JSON reports stay in $WORK when KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-10}
WARM=${WARM:-2}
DEVICES=${DEVICES:-10000}
CONVS=${CONVS:-4000}          # direct conversations among DEVICES (see the docs for why not 5000)
RATE=${RATE:-10000}
LISTENERS=${LISTENERS:-1000}
SECRET=bench-gateway-secret-0123456789abcdef
WORK=$(mktemp -d "${TMPDIR:-/tmp}/boltq-gateway-bench.XXXXXX")
trap 'pkill -P $$ 2>/dev/null || true; [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"' EXIT

if [ -z "${BOLTQ_BIN:-}" ] || [ -z "${BENCH_BIN:-}" ]; then
  cargo build --release -q -p boltq -p boltq-tools
fi
BOLTQ_BIN=${BOLTQ_BIN:-target/release/boltq}
BENCH_BIN=${BENCH_BIN:-target/release/boltq-bench}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# gw NAME FANOUT_LIMIT SCENARIO ARGS... : one row. FANOUT_LIMIT is
# messaging.chat.fanout_on_write_limit (1 = no inbox pointers for direct conversations).
gw() {
  local name=$1 fanout=$2; shift 2
  local tcp http mp cfg="$WORK/$name.toml"
  tcp=$(free_port); http=$(free_port); mp=$(free_port)
  cat >"$cfg" <<EOF
[server]
spin_before_park_us = ${SPIN_US:-0}

[messaging.stream]
enabled = true

[messaging.identity]
enabled = true
keys = [{ id = "k1", secret = "$SECRET" }]

[messaging.gateway]
enabled = true

[messaging.chat]
membership_url = "http://127.0.0.1:$mp"
fanout_on_write_limit = $fanout
EOF
  taskset -c 0 "$BOLTQ_BIN" --config "$cfg" --data-dir "$WORK/data-$name" --host 127.0.0.1 \
    --tcp-port "$tcp" --http-port "$http" --shards 1 >"$WORK/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null && break; sleep 0.1; done
  [ -n "${PERF_OUT:-}" ] && (sleep "${PERF_AFTER_S:-16}"; perf record --call-graph dwarf,16384 -F 499 -p "$pid" -o "$PERF_OUT" -- sleep 4 >/dev/null 2>&1) &
  "$BENCH_BIN" "$@" --url "ws://127.0.0.1:$http/ws" --secret "$SECRET" \
    --membership-listen "127.0.0.1:$mp" --cpus 1 --json --quiet >"$WORK/$name.json" || true
  kill "$pid"; wait "$pid" || true
  python3 - "$name" "$WORK/$name.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[2]))
except Exception as e:
    print(f"{sys.argv[1]:<24} (no report: {e})"); sys.exit()
t, m = r["throughput"], r["messages"]
lat = r["latency_us"].get("delivery") or r["latency_us"].get("catch_up") or {}
ms = lambda k: f"{lat.get(k, 0) / 1000:.1f}"
extra = f"  caught up in {m['all_caught_up_secs']} s" if "all_caught_up_secs" in m else ""
print(f"{sys.argv[1]:<24} {t.get('published_per_sec', 0):>10,.0f} {t.get('delivered_per_sec', 0):>12,.0f}"
      f" {ms('p50'):>9} {ms('p99'):>9} {ms('max'):>9} {r['errors']['total']:>7}{extra}")
PY
}

rows=("$@")
run() { local name=$1; shift; if [ ${#rows[@]} -eq 0 ] || [[ " ${rows[*]} " == *" $name "* ]]; then gw "$name" "$@"; fi; }

common=(--duration-secs "$SECS" --warmup-secs "$WARM")
printf '%-24s %10s %12s %9s %9s %9s %7s\n' row "sends/s" "delivered/s" "p50 ms" "p99 ms" "max ms" errors
run chat-10k 1 chat --devices "$DEVICES" --conversations "$CONVS" --rate "$RATE" "${common[@]}"
run chat-10k-closed 1 chat --devices "$DEVICES" --conversations "$CONVS" "${common[@]}"
# Every device in a direct conversation, inbox pointers on (the default fan-out limit): one
# inbox partition per user plus one per conversation, which needs the per-shard budget of
# open segment files (the server closes idle partitions' files past it).
run chat-10k-inbox 256 chat --devices "$DEVICES" --conversations $((DEVICES / 2)) --rate "$RATE" "${common[@]}"
run chat-1k-inbox 256 chat --devices 1000 --rate "$RATE" "${common[@]}"
run chat-1k-closed 256 chat --devices 1000 "${common[@]}"
run channel-closed 1 channel --listeners "$LISTENERS" --senders 1 "${common[@]}"
run channel-100ps 1 channel --listeners "$LISTENERS" --senders 1 --rate 100 "${common[@]}"
run reconnect-10k 1 reconnect --devices "$DEVICES" --group-size 10 --away-messages 5 \
  --writers 4 --warmup-secs 0 --drain-timeout-secs 60
run reconnect-1k-direct 1 reconnect --devices 1000 --away-messages 5 --warmup-secs 0 \
  --drain-timeout-secs 60
