#!/usr/bin/env bash
# Publish latency at half the closed-loop maximum, for comparing builds side by side
# (docs/benchmarks.md, issue 13): the `publish 1c at half` row of tools/bench-compare.sh on
# its own, for any pair of binaries.
#
#   tools/publish-half-load.sh BOLTQ_BIN BENCH_BIN [SECS]
#
# Server: fresh temporary data dir, defaults (fsync = "always") but a queue capacity of 4 Mi,
# --shards 1, pinned to CPU 0.
# boltq-bench: publish, 1 connection, 64 in flight, 100 B, on CPU 1 — first SECS closed loop
# for the maximum, then SECS open loop at half of it. Prints the maximum and p50/p99/max.
set -euo pipefail
BIN=$1; BENCH=$2; SECS=${3:-10}
W=$(mktemp -d /tmp/boltq-half.XXXXXX)
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null && wait $pid 2>/dev/null; rm -rf "$W"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tcp=$(port); http=$(port)
# Room for 4 Mi messages: the closed-loop phase alone passes the default capacity (1 Mi) at
# today's rates, and refusals would be measured instead of publishes.
printf '[queue]\ncapacity = 4194304\n' >"$W/boltq.toml"
taskset -c 0 "$BIN" --config "$W/boltq.toml" --data-dir "$W/data" --host 127.0.0.1 \
  --tcp-port "$tcp" --http-port "$http" --shards 1 >"$W/log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null && break; sleep 0.1; done
run() { taskset -c 1 "$BENCH" publish --connections 1 --depth 64 --size 100 --addr "127.0.0.1:$tcp" \
  --cpus 1 --duration-secs "$SECS" --warmup-secs 2 --json --quiet "$@"; }
run >"$W/max.json" || true
max=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["throughput"]["msgs_per_sec"]))' "$W/max.json")
run --rate $((max / 2)) >"$W/half.json" || true
python3 - "$W/max.json" "$W/half.json" <<'PY'
import json, sys
m, h = (json.load(open(p)) for p in sys.argv[1:3])
l = h["latency_us"]["publish"]
print(f"max {m['throughput']['msgs_per_sec']:.0f}/s; at half {h['throughput']['msgs_per_sec']:.0f}/s: "
      f"p50 {l['p50']/1000:.2f} ms p99 {l['p99']/1000:.2f} ms max {l['max']/1000:.1f} ms; "
      f"errors {h['errors']['total']}")
PY
