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
if [ -z "${BOLTQ_BIN:-}" ] || [ -z "${BENCH_BIN:-}" ]; then
  cargo build --release -q -p boltq -p boltq-tools
fi
BOLTQ_BIN=${BOLTQ_BIN:-target/release/boltq}   # prebuilt binaries skip the build
BENCH_BIN=${BENCH_BIN:-target/release/boltq-bench}

# The publish-only rows grow one queue for the whole run (Redis's LPUSH grows a list the
# same way): room for 4 Mi messages, so a 12 s run at today's rates is not cut off by the
# default capacity (1 Mi) and measured as refusals.
printf '[queue]\ncapacity = 4194304\n' >"$WORK/boltq.toml"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# boltq NAME BENCH-ARGS... : prints "NAME <msgs/s> <p99 ms of the first latency kind>"
# (pubsub: deliveries/s and the delivery p99)
boltq() {
  local name=$1; shift
  local key=${name//[^A-Za-z0-9]/_}
  local tcp http data="$WORK/data-$key"
  tcp=$(free_port); http=$(free_port)
  taskset -c 0 "$BOLTQ_BIN" --config "$WORK/boltq.toml" --data-dir "$data" --host 127.0.0.1 \
    --tcp-port "$tcp" --http-port "$http" --shards 1 >"$WORK/$key.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null && break; sleep 0.1; done
  "$BENCH_BIN" "$@" --addr "127.0.0.1:$tcp" --cpus 1 --duration-secs "$SECS" \
    --warmup-secs "$WARM" --json --quiet >"$WORK/$key.json" || true   # errors: shown in the row
  kill "$pid"; wait "$pid" || true
  python3 - "$name" "$WORK/$key.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
lats = r["latency_us"]
lat = lats.get("delivery") or lats.get("publish") or next(iter(lats.values()))
errors = r["errors"]["total"]
note = f"  {errors} errors: {r['errors'].get('by_kind', r['errors'])}" if errors else ""
print(f"{sys.argv[1]:<34} {r['throughput']['msgs_per_sec']:>12,.0f} {lat['p99'] / 1000:>10.2f}{note}")
PY
}

# rate NAME : the msgs/s of an earlier boltq row's report
rate() { python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["throughput"]["msgs_per_sec"]))' "$WORK/${1//[^A-Za-z0-9]/_}.json"; }

# redis NAME AOF(0|1) SUBSCRIBERS BENCH-ARGS... : prints one line per redis-benchmark test;
# SUBSCRIBERS raw sockets (on CPU 1, like boltq-bench's subscribers) subscribe to channel
# `ch` first and read everything into /dev/null (cheaper than redis-cli, which formats each
# message); the PUBLISH row then also shows deliveries/s (= publishes/s x SUBSCRIBERS).
redis() {
  local name=$1 aof=$2 subs=$3; shift 3
  local port dir="$WORK/redis-$name" extra=(--appendonly no)
  port=$(free_port); mkdir -p "$dir"
  [ "$aof" = 1 ] && extra=(--appendonly yes --appendfsync always)
  taskset -c 0 redis-server --bind 127.0.0.1 --port "$port" --save "" --dir "$dir" \
    "${extra[@]}" >"$WORK/$name.redis.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  for _ in $(seq "$subs"); do
    taskset -c 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; printf "SUBSCRIBE ch\r\n" >&3; exec cat <&3 >/dev/null' _ "$port" &
  done
  while [ "$subs" -gt 0 ] && [ "$(redis-cli -p "$port" pubsub numsub ch | tail -1)" != "$subs" ]; do sleep 0.1; done
  taskset -c 1 redis-benchmark -p "$port" --csv "$@" | tail -n +2 | tr -d '"' |
    while IFS=, read -r test rps _; do
      local shown; shown=$(printf '%.0f' "$rps")
      [ "$subs" -gt 0 ] && shown="$shown ($(awk -v r="$rps" -v n="$subs" 'BEGIN { printf "%.0f", r * n }') deliveries/s)"
      printf '%-34s %12s %10s\n' "$name ${test%% *}" "$shown" "-"
    done
  kill "$pid"; wait "$pid" || true
}

printf '%-34s %12s %10s\n' "scenario (durability)" "ops/s" "p99 ms"
boltq "boltq queue 100B d64 (always)" queue --producers 1 --consumers 1 --depth 64 --size 100
boltq "boltq queue 1KiB d64 (always)" queue --producers 1 --consumers 1 --depth 64 --size 1024
# The consumer as BoltQ's own clients can run it: batches of 64, each acknowledged with
# one ACK carrying `ids` (not in v1), long-polling when the queue is empty.
boltq "boltq queue 100B d64 batch+ids (always)" queue --producers 1 --consumers 1 --depth 64 --size 100 \
  --batch 64 --ack-many --wait-ms 100
boltq "boltq publish 50c d1 (always)" publish --connections 50 --depth 1 --size 100
boltq "boltq publish 1c d64 (always)" publish --connections 1 --depth 64 --size 100
half=$(( $(rate "boltq publish 1c d64 (always)") / 2 ))
boltq "boltq publish 1c at half: $half/s" publish --connections 1 --depth 64 --size 100 --rate "$half"
boltq "boltq pubsub 10 subs d64 (deliv.)" pubsub --subscribers 10 --depth 64 --size 100
redis "redis P64 100B (memory)" 0 0 -t lpush,rpop -c 1 -P 64 -n $((SECS * 300000)) -d 100
redis "redis P64 100B (aof always)" 1 0 -t lpush,rpop -c 1 -P 64 -n $((SECS * 40000)) -d 100
redis "redis P64 1KiB (memory)" 0 0 -t lpush,rpop -c 1 -P 64 -n $((SECS * 150000)) -d 1024
redis "redis P64 1KiB (aof always)" 1 0 -t lpush,rpop -c 1 -P 64 -n $((SECS * 20000)) -d 1024
redis "redis c50 P1 100B (memory)" 0 0 -t lpush -c 50 -P 1 -n $((SECS * 60000)) -d 100
redis "redis c50 P1 100B (aof always)" 1 0 -t lpush -c 50 -P 1 -n $((SECS * 20000)) -d 100
redis "redis PUBLISH 10 subs P64 100B" 0 10 -c 1 -P 64 -n $((SECS * 100000)) \
  PUBLISH ch "$(head -c 100 /dev/zero | tr '\0' x)"
