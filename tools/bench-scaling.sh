#!/usr/bin/env bash
# Messages per CPU-second of the queue plane with 1 and 2 shards (docs/benchmarks.md,
# "Per-core scaling", issue 18 item 6).
#
#   tools/bench-scaling.sh              # both fsync policies, 1 and 2 shards, 2 runs each
#   RUNS=1 tools/bench-scaling.sh never # one policy, one run each
#   SHAPE=per-connection AFFINITY=off tools/bench-scaling.sh never
#
# SHAPE=round-robin (default): every connection goes round-robin over 8 queues.
# SHAPE=per-connection: 2 queues, each connection keeps to one (--queue-per-connection),
# as a service holding a connection per queue does, with 4 consumers (with 2, the
# producers outrun them into the queue's capacity and the journal's backpressure).
# AFFINITY=off starts the server with queue.connection_affinity = false (connections stay
# on the shard that accepted them).
#
# Each run: a fresh `boltq` (release build, new data dir) with SHARDS shards, pinned to CPU
# 0 (1 shard) or CPUs 0-1 (2 shards); boltq-bench on CPU 1 runs the work queue (2
# producers and the consumers above, 64 in flight each, 100 B, 10 s). The server's own CPU
# (utime + stime of all its threads, from /proc) is sampled over 5 s in the middle of the
# run, so the generator's CPU is not counted; msgs per server CPU-second = consumed
# msgs/s ÷ server cores busy. Prints one line per run.
set -euo pipefail
cd "$(dirname "$0")/.."
POLICIES=${*:-never always}
RUNS=${RUNS:-2}
case "${SHAPE:-round-robin}" in
  round-robin) QUEUE_ARGS="--consumers 2 --queues 8" ;;
  per-connection) QUEUE_ARGS="--consumers 4 --queues 2 --queue-per-connection" ;;
  *) echo "SHAPE must be round-robin or per-connection" >&2; exit 2 ;;
esac
case "${AFFINITY:-on}" in
  on) AFFINITY_BOOL=true ;;
  off) AFFINITY_BOOL=false ;;
  *) echo "AFFINITY must be on or off" >&2; exit 2 ;;
esac
if [ -z "${BOLTQ_BIN:-}" ] || [ -z "${BENCH_BIN:-}" ]; then
  cargo build --release -q -p boltq -p boltq-tools
fi
BOLTQ_BIN=${BOLTQ_BIN:-target/release/boltq}
BENCH_BIN=${BENCH_BIN:-target/release/boltq-bench}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# A fresh run prefix whose queues <prefix>.0 and <prefix>.1 live on different shards of
# two (owner = FNV-1a 64 of the name mod 256 mod 2), so the per-connection shape loads both.
spread_prefix() {
  python3 - "$RANDOM" <<'PY'
import sys
def fnv(s):
    h = 0xcbf29ce484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001b3) % (1 << 64)
    return h
n = int(sys.argv[1])
while True:
    p = f"scale{n}"
    if fnv(p + ".0") % 256 % 2 != fnv(p + ".1") % 256 % 2:
        print(p)
        break
    n += 1
PY
}

# one SHARDS FSYNC SERVER_CPUS
one() {
  local shards=$1 fsync=$2 cpus=$3 work tcp http pid bench a b
  work=$(mktemp -d /tmp/boltq-scaling.XXXXXX)
  tcp=$(free_port); http=$(free_port)
  printf '[server]\nhost = "127.0.0.1"\ntcp_port = %s\nhttp_port = %s\nshards = %s\n[storage]\ndata_dir = "%s"\nfsync = "%s"\n[queue]\nconnection_affinity = %s\n' \
    "$tcp" "$http" "$shards" "$work/data" "$fsync" "$AFFINITY_BOOL" >"$work/boltq.toml"
  taskset -c "$cpus" "$BOLTQ_BIN" --config "$work/boltq.toml" >"$work/boltq.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null && break; sleep 0.1; done
  taskset -c 1 "$BENCH_BIN" queue --producers 2 --depth "${DEPTH:-64}" $QUEUE_ARGS --prefix "$(spread_prefix)" --size 100 \
    --duration-secs 10 --warmup-secs 0 --addr "127.0.0.1:$tcp" --json --quiet >"$work/report.json" &
  bench=$!
  sleep 3; a=$(cpu_ticks "$pid"); sleep 5; b=$(cpu_ticks "$pid")
  wait "$bench" || true
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 - "$work/report.json" "$a" "$b" "$(getconf CLK_TCK)" "$shards" "$fsync" "$AFFINITY_BOOL" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
a, b, hz = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
rate = r["messages"]["acked"] / (r.get("window_secs") or 10)
cores = (b - a) / hz / 5
print(f"shards {sys.argv[5]}, fsync {sys.argv[6]:<6}, affinity {sys.argv[7]:<5}: {rate:>9,.0f} msgs/s, server {cores:.2f} cores, "
      f"{rate / cores:>9,.0f} msgs per server CPU-second, errors {r['errors']['total']}")
PY
  rm -rf "$work"
}

for fsync in $POLICIES; do
  for _ in $(seq "$RUNS"); do
    one 1 "$fsync" 0
    one 2 "$fsync" 0,1
  done
done
