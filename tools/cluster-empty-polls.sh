#!/usr/bin/env bash
# Polls of an empty queue on a fresh three-node cluster (docs/benchmarks.md, "Empty polls in
# a cluster"): 5,000 CONSUMEs of `bench.0` (slot 223), one at a time, through the slot's
# leader (VIA=leader) or through another node (VIA=other). Prints the time per poll and
# what the leader spent on them: entries applied, raft messages sent, and polls it answered
# from its applied state without an entry.
#
#   tools/cluster-empty-polls.sh BOLTQ_BIN    # VIA=leader|other
set -euo pipefail
BIN=$1
W=$(mktemp -d /tmp/boltq-empty-polls.XXXXXX)
declare -a TCP HTTP RAFT PIDS
. "$(dirname "$0")/lib/three-nodes.sh"
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT
start_three_nodes "$BIN" "$W" never
wait_three_ready
leader=$(leader_of_slot 223)
via=$leader; [ "${VIA:-leader}" = other ] && via=$((leader % 3 + 1)); echo "through n$via"
a0=$(metric ${HTTP[$leader]} boltq_raft_apply_count); m0=$(metric ${HTTP[$leader]} boltq_raft_messages_sent_total)
python3 - ${TCP[$via]} <<'PY'
import socket, struct, sys, time, json
s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
body = json.dumps({"topic": "bench.0"}).encode()
req = bytes([0x03]) + struct.pack("<I", len(body)) + body
def recv_frame():
    h = b""
    while len(h) < 5: h += s.recv(5 - len(h))
    n = struct.unpack("<I", h[1:5])[0]; d = b""
    while len(d) < n: d += s.recv(n - len(d))
    return h[0]
statuses = {}
t = time.time()
for i in range(5000):
    s.sendall(req); st = recv_frame(); statuses[st] = statuses.get(st, 0) + 1
el = time.time() - t
print(f"5000 polls in {el:.2f} s ({el/5000*1e6:.0f} us each), statuses {statuses}")
PY
echo "leader n$leader: entries applied $(( $(metric ${HTTP[$leader]} boltq_raft_apply_count) - a0 )), raft messages sent $(( $(metric ${HTTP[$leader]} boltq_raft_messages_sent_total) - m0 )), answered without entry $(metric ${HTTP[$leader]} boltq_raft_answered_without_entry_total)"
