#!/usr/bin/env bash
# Starts a fresh three-node cluster (static peers, `server.shards = 2`: 256 slot groups per
# node over two shards), waits until every node is ready and SETTLE seconds more, then
# measures each node's CPU over SECS seconds of idleness, and the raft messages and
# quiescent groups its metrics count (docs/benchmarks.md, "Idle CPU of a cluster"); then
# kills n1 and times the failover of its idle slots.
#
#   tools/cluster-idle-cpu.sh BOLTQ_BIN [SECS=20] [SETTLE=10]
#
# Set KEEP=1 to leave the nodes running (their pids and work dir are printed).
set -euo pipefail
BIN=$1; SECS=${2:-20}; SETTLE=${3:-10}
metric() { curl -sf "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n { s += $2 } END { print s + 0 }'; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
W=$(mktemp -d /tmp/boltq-cluster-idle.XXXXXX)
declare -a TCP HTTP RAFT PIDS
# Ports in a block of their own: shard 1 listens on the raft port + 1.
BASE=$((20000 + RANDOM % 20000))
for i in 1 2 3; do TCP[$i]=$((BASE + 10 * i)); HTTP[$i]=$((BASE + 10 * i + 1)); RAFT[$i]=$((BASE + 10 * i + 2)); done
for i in 1 2 3; do
  peers=""
  for j in 1 2 3; do [ "$j" = "$i" ] || peers="$peers\"n$j@127.0.0.1:${RAFT[$j]}\","; done
  printf '[server]\nhost = "127.0.0.1"\ntcp_port = %s\nhttp_port = %s\nshards = 2\n[storage]\ndata_dir = "%s/d%s"\n[cluster]\nenabled = true\nnode_id = "n%s"\nraft_addr = "127.0.0.1:%s"\npeers = [%s]\n' \
    "${TCP[$i]}" "${HTTP[$i]}" "$W" "$i" "$i" "${RAFT[$i]}" "${peers%,}" >"$W/n$i.toml"
  "$BIN" --config "$W/n$i.toml" >"$W/n$i.log" 2>&1 &
  PIDS[$i]=$!
done
stop() { [ "${KEEP:-0}" = 1 ] || { kill -9 "${PIDS[@]}" 2>/dev/null || true; rm -rf "$W"; }; }
trap stop EXIT
for i in 1 2 3; do
  for _ in $(seq 300); do
    curl -sf -m 1 "http://127.0.0.1:${HTTP[$i]}/readyz" >/dev/null && break
    sleep 0.1
  done
done
sleep "$SETTLE"
declare -a CPU0 SENT0
for i in 1 2 3; do
  CPU0[$i]=$(cpu_ticks "${PIDS[$i]}")
  SENT0[$i]=$(metric "${HTTP[$i]}" boltq_raft_messages_sent_total)
done
sleep "$SECS"
hz=$(getconf CLK_TCK)
echo "node  cpu%_of_one_core  raft_messages_sent  groups_quiescent"
for i in 1 2 3; do
  cpu=$(( $(cpu_ticks "${PIDS[$i]}") - CPU0[$i] ))
  sent=$(( $(metric "${HTTP[$i]}" boltq_raft_messages_sent_total) - SENT0[$i] ))
  quiet=$(metric "${HTTP[$i]}" boltq_raft_groups_quiescent)
  printf 'n%s    %s              %s                  %s\n' "$i" \
    "$(echo "scale=2; $cpu * 100 / $hz / $SECS" | bc)" "$sent" "$quiet"
done
# Then kill -9 of n1 (idle, its groups quiescent): how long until n2 sees every slot led
# by n2 or n3.
kill -9 "${PIDS[1]}"
killed=$(date +%s%N)
for _ in $(seq ${FAILOVER_POLLS:-1000}); do
  s=$(curl -sf "http://127.0.0.1:${HTTP[2]}/cluster/status" || true)
  if [ -n "$s" ] && echo "$s" | python3 -c 'import json,sys; c=json.load(sys.stdin)["cluster"]; sys.exit(0 if c["slots_without_leader"] == 0 and c["slots_led"].get("n1", 0) == 0 else 1)'; then
    echo "failover: every slot led by n2 or n3 $(( ($(date +%s%N) - killed) / 1000000 )) ms after the kill of n1"
    break
  fi
  sleep 0.05
done
[ "${KEEP:-0}" = 1 ] && echo "pids ${PIDS[*]}; work dir $W; ports http ${HTTP[*]}"
