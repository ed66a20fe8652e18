#!/usr/bin/env bash
# BoltQ vs Redis on this machine, measured in one run (docs/benchmarks.md).
#
#   tools/bench-compare.sh            # 10 s per scenario; SECS=3 for a quick look
#
# BoltQ: release build, fresh temporary data dir per run, fsync = "always" (durable), one
# shard pinned to CPU 0; boltq-bench pinned to CPU 1. Redis (Debian's redis-server,
# installed when missing): pinned to CPU 0, in memory and with AOF appendfsync always;
# redis-benchmark pinned to CPU 1. Everything on loopback, on free ports, stopped after.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-10}
WARM=${WARM:-2}
WORK=$(mktemp -d /tmp/boltq-compare.XXXXXX)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$WORK"' EXIT

command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server >/dev/null)
cargo build --release -q -p boltq -p boltq-tools
BIN=target/release

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# boltq NAME BENCH-ARGS... : prints "NAME <msgs/s> <p99 ms of the first latency kind>"
boltq() {
  local name=$1; shift
  local tcp http data="$WORK/data-$name"
  tcp=$(free_port); http=$(free_port)
  taskset -c 0 "$BIN/boltq" --data-dir "$data" --host 127.0.0.1 --tcp-port "$tcp" \
    --http-port "$http" --shards 1 >"$WORK/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null && break; sleep 0.1; done
  "$BIN/boltq-bench" "$@" --addr "127.0.0.1:$tcp" --cpus 1 --duration-secs "$SECS" \
    --warmup-secs "$WARM" --json --quiet >"$WORK/$name.json"
  kill "$pid"; wait "$pid" || true
  python3 - "$name" "$WORK/$name.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
lat = next(iter(r["latency_us"].values()))
print(f"{sys.argv[1]:<34} {r['throughput']['msgs_per_sec']:>12,.0f} {lat['p99'] / 1000:>10.2f}")
PY
}

# redis NAME AOF(0|1) BENCH-ARGS... : prints one line per redis-benchmark test
redis() {
  local name=$1 aof=$2; shift 2
  local port dir="$WORK/redis-$name" extra=(--appendonly no)
  port=$(free_port); mkdir -p "$dir"
  [ "$aof" = 1 ] && extra=(--appendonly yes --appendfsync always)
  taskset -c 0 redis-server --bind 127.0.0.1 --port "$port" --save "" --dir "$dir" \
    "${extra[@]}" >"$WORK/$name.redis.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  taskset -c 1 redis-benchmark -p "$port" "$@" --csv | tail -n +2 | tr -d '"' |
    while IFS=, read -r test rps _; do printf '%-34s %12s %10s\n' "$name $test" "$(printf '%.0f' "$rps")" "-"; done
  kill "$pid"; wait "$pid" || true
}

printf '%-34s %12s %10s\n' "scenario (durability)" "ops/s" "p99 ms"
boltq "boltq queue 100B d64 (always)" queue --producers 1 --consumers 1 --depth 64 --size 100
boltq "boltq queue 1KiB d64 (always)" queue --producers 1 --consumers 1 --depth 64 --size 1024
boltq "boltq publish 50c d1 (always)" publish --connections 50 --depth 1 --size 100
redis "redis P64 100B (memory)" 0 -t lpush,rpop -c 1 -P 64 -n $((SECS * 300000)) -d 100
redis "redis P64 100B (aof always)" 1 -t lpush,rpop -c 1 -P 64 -n $((SECS * 40000)) -d 100
redis "redis c50 P1 100B (memory)" 0 -t lpush -c 50 -P 1 -n $((SECS * 60000)) -d 100
redis "redis c50 P1 100B (aof always)" 1 -t lpush -c 50 -P 1 -n $((SECS * 20000)) -d 100
