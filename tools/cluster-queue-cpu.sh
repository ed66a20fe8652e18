#!/usr/bin/env bash
# The queue benchmark on a fresh three-node cluster whose nodes share CPU 0 (one shard each,
# static peers), boltq-bench on CPU 1 (docs/benchmarks.md, "Rounds that walked every
# group"). The bench's queue `bench.0` lives in slot 223; it runs through that slot's
# leader (VIA=leader) or through another node, which forwards (VIA=other). Prints the
# throughput and publish latency, each node's CPU over the run and the raft messages it
# sent and entries it applied.
#
#   tools/cluster-queue-cpu.sh BOLTQ_BIN BENCH_BIN    # FSYNC=never|always SECS=6 VIA=leader
#
# PERF=1 also records `perf record -a -g` for 5 s of the run into the work dir (printed);
# build BOLTQ_BIN with RUSTFLAGS="-C force-frame-pointers=yes" for whole call graphs.
set -euo pipefail
BIN=$1; BENCH=$2
FSYNC=${FSYNC:-never}; SECS=${SECS:-6}; VIA=${VIA:-leader}; PERF=${PERF:-}
SLOT=223
W=$(mktemp -d /tmp/boltq-cluster-queue.XXXXXX)
declare -a TCP HTTP RAFT PIDS
. "$(dirname "$0")/lib/three-nodes.sh"
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT
start_three_nodes "$BIN" "$W" "$FSYNC"
wait_three_ready
leader=$(leader_of_slot $SLOT)
if [ "$VIA" = leader ]; then via=$leader; else via=$((leader % 3 + 1)); fi
echo "slot $SLOT led by n$leader; bench through n$via; fsync $FSYNC"
PERF_PID=
if [ -n "$PERF" ]; then
  (sleep 3; perf record -o "$W/perf.data" -a -F 999 -g -- sleep 5 >/dev/null 2>&1) &
  PERF_PID=$!
fi
declare -a CPU0 SENT0 APPLIED0
for i in 1 2 3; do
  CPU0[$i]=$(awk '{ print $14 + $15 }' "/proc/${PIDS[$i]}/stat")
  SENT0[$i]=$(metric "${HTTP[$i]}" boltq_raft_messages_sent_total)
  APPLIED0[$i]=$(metric "${HTTP[$i]}" boltq_raft_apply_count)
done
started=$(date +%s.%N)
taskset -c 1 "$BENCH" queue --producers 1 --consumers 1 --depth 64 --size 100 --duration-secs "$SECS" \
  --warmup-secs 2 --addr "127.0.0.1:${TCP[$via]}" --cpus 1 --json --quiet ${BENCH_ARGS:-} >"$W/report.json"
elapsed=$(echo "$(date +%s.%N) - $started" | bc)
python3 - "$W/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
lat = r["latency_us"].get("publish") or next(iter(r["latency_us"].values()))
print(f"msgs/s {r['throughput']['msgs_per_sec']:.0f}  publish p50 {lat['p50'] / 1000:.2f} ms  "
      f"p99 {lat['p99'] / 1000:.2f} ms  errors {r['errors']['total']}")
PY
for i in 1 2 3; do
  ticks=$(( $(awk '{ print $14 + $15 }' "/proc/${PIDS[$i]}/stat") - CPU0[$i] ))
  sent=$(( $(metric "${HTTP[$i]}" boltq_raft_messages_sent_total) - SENT0[$i] ))
  applied=$(( $(metric "${HTTP[$i]}" boltq_raft_apply_count) - APPLIED0[$i] ))
  echo "n$i: cpu $(echo "scale=1; $ticks / $elapsed" | bc) % of a core, raft messages sent $sent, entries applied $applied"
done
for i in 1 2 3; do curl -sf "http://127.0.0.1:${HTTP[$i]}/metrics" >"$W/metrics-n$i.txt" || true; done
[ -z "$PERF_PID" ] || { wait "$PERF_PID"; echo "perf data: $W/perf.data"; }
echo "work dir: $W"
