# Sourced by the tools that run a fresh three-node cluster on CPU 0 (one shard per node,
# static peers, loopback).
#
# start_three_nodes BOLTQ_BIN WORK_DIR FSYNC: picks a block of ports (TCP, HTTP, RAFT:
# indexes 1-3), writes WORK_DIR/n$i.toml with data in WORK_DIR/data-n$i, and starts each
# node on CPU 0 logging to WORK_DIR/n$i.log; their pids go to PIDS.
start_three_nodes() {
  local bin=$1 work=$2 fsync=$3 base=$((20000 + RANDOM % 20000)) i j peers
  for i in 1 2 3; do
    TCP[$i]=$((base + 10 * i)); HTTP[$i]=$((base + 10 * i + 1)); RAFT[$i]=$((base + 10 * i + 2))
  done
  for i in 1 2 3; do
    peers=""
    for j in 1 2 3; do [ "$j" = "$i" ] || peers="$peers\"n$j@127.0.0.1:${RAFT[$j]}\","; done
    printf '[server]\nhost = "127.0.0.1"\ntcp_port = %s\nhttp_port = %s\nshards = 1\n[storage]\ndata_dir = "%s"\nfsync = "%s"\n[cluster]\nenabled = true\nnode_id = "n%s"\nraft_addr = "127.0.0.1:%s"\npeers = [%s]\n' \
      "${TCP[$i]}" "${HTTP[$i]}" "$work/data-n$i" "$fsync" "$i" "${RAFT[$i]}" "${peers%,}" >"$work/n$i.toml"
    taskset -c 0 "$bin" --config "$work/n$i.toml" >"$work/n$i.log" 2>&1 &
    PIDS[$i]=$!
  done
}

# wait_three_ready: waits (up to 30 s each) for every node's /readyz, then 6 s for one
# leader-balancing round.
wait_three_ready() {
  local i
  for i in 1 2 3; do
    for _ in $(seq 300); do curl -sf "http://127.0.0.1:${HTTP[$i]}/readyz" >/dev/null && break; sleep 0.1; done
  done
  sleep 6
}

# leader_of_slot SLOT: the number (1-3) of the node leading SLOT, as node 1 sees it.
leader_of_slot() {
  curl -sf "http://127.0.0.1:${HTTP[1]}/cluster/status" | python3 -c "
import json, sys
status = json.load(sys.stdin)
groups = status.get('groups') or status['cluster']['groups']
print([g for g in groups if g['slot'] == $1][0]['leader'][1:])"
}

# metric HTTP_PORT NAME: the sum of NAME's series on that node's /metrics (0 if absent).
metric() { curl -sf "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n { s += $2 } END { print s + 0 }'; }
