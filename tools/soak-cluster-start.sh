#!/usr/bin/env bash
# Starts a fresh three-node cluster again and again, every node on CPU 0, and stops at the
# first node that is not ready within ~15 s, leaving it running for a look
# (docs/benchmarks.md, "A shard asleep on runnable work": this loop found shards that
# glommio parked with runnable tasks).
#
#   tools/soak-cluster-start.sh BOLTQ_BIN [RUNS=60]
#
# Each run: three fresh data dirs, `storage.fsync = "never"`, one shard per node, static
# peers; every node's `/readyz` polled; then kill -9 of all three. On a hang it prints the
# node's pid and work dir; `/proc/<pid>/task/*/wchan` and `/proc/<pid>/fdinfo/<ring fd>`
# then show where the shard sleeps and what its rings hold.
set -euo pipefail
BIN=$1; RUNS=${2:-60}
. "$(dirname "$0")/lib/three-nodes.sh"
declare -a TCP HTTP RAFT PIDS
for run in $(seq "$RUNS"); do
  W=$(mktemp -d /tmp/boltq-cluster-start.XXXXXX)
  start_three_nodes "$BIN" "$W" never
  for i in 1 2 3; do
    ready=0
    for _ in $(seq 150); do
      curl -sf -m 1 "http://127.0.0.1:${HTTP[$i]}/readyz" >/dev/null && { ready=1; break; }
      sleep 0.1
    done
    if [ "$ready" = 0 ]; then
      echo "run $run: n$i (pid ${PIDS[$i]}) not ready; work dir $W"
      exit 1
    fi
  done
  kill -9 "${PIDS[1]}" "${PIDS[2]}" "${PIDS[3]}"
  wait "${PIDS[1]}" "${PIDS[2]}" "${PIDS[3]}" 2>/dev/null || true
  rm -rf "$W"
done
echo "all $RUNS runs ready"
