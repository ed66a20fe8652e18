#!/usr/bin/env bash
# Runs the per-connection queue shape against a fresh 2-shard server again and again, and
# stops at the first run that does not end in time (docs/benchmarks.md, "Connection
# affinity": this loop found the stall of a connection that never waits).
#
#   tools/soak-per-connection.sh BOLTQ_BIN BENCH_BIN [RUNS=100] [AFFINITY=true]
#
# Each run: fresh data dir, fsync "always", `boltq-bench queue --producers 2 --consumers 4
# --depth 64 --queues 2 --queue-per-connection` for 10 s. A run still going after 15 s is
# a stall: the script saves what the server's threads and sockets were doing (per-thread
# CPU, `io_uring_enter` calls over 3 s, `ss -tni`, `/connections`, `/stats`) in the work
# dir it names, and exits 1.
set -euo pipefail
BIN=$1; BENCH=$2; RUNS=${3:-100}; AFFINITY=${4:-true}
W=$(mktemp -d /tmp/boltq-soak.XXXXXX)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
for i in $(seq "$RUNS"); do
  tcp=$(port); http=$(port)
  rm -rf "$W/data"
  printf '[server]\nhost = "127.0.0.1"\ntcp_port = %s\nhttp_port = %s\nshards = 2\n[storage]\ndata_dir = "%s/data"\nfsync = "always"\n[queue]\nconnection_affinity = %s\n' \
    "$tcp" "$http" "$W" "$AFFINITY" >"$W/boltq.toml"
  taskset -c 0,1 "$BIN" --config "$W/boltq.toml" >"$W/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null && break; sleep 0.1; done
  rm -f "$W/done"
  (taskset -c 1 "$BENCH" queue --producers 2 --consumers 4 --depth 64 --queues 2 \
    --queue-per-connection --prefix scale654 --size 100 --duration-secs 10 --warmup-secs 0 \
    --addr "127.0.0.1:$tcp" --json --quiet >"$W/run.json" || true; touch "$W/done") &
  bench=$!
  t=0
  while [ ! -f "$W/done" ]; do
    sleep 1; t=$((t + 1))
    if [ "$t" = 15 ]; then
      echo "run $i: still going after 15 s; diagnostics in $W"
      ps -L -o tid,comm,pcpu,stat -p "$pid" >"$W/stall.threads" || true
      timeout 3 strace -f -p "$pid" -c -e trace=io_uring_enter 2>"$W/stall.io_uring_enter" || true
      ss -tni "( sport = :$tcp )" >"$W/stall.ss" || true
      curl -s -m 2 "http://127.0.0.1:$http/connections" >"$W/stall.connections" || true
      curl -s -m 2 "http://127.0.0.1:$http/stats" >"$W/stall.stats" || true
    fi
  done
  wait "$bench"
  kill "$pid"; wait "$pid" || true
  echo "run $i: ${t} s, $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["messages"]["acked"], "acked,", r["errors"]["total"], "errors")' "$W/run.json")"
  if [ "$t" -ge 15 ]; then exit 1; fi
done
rm -rf "$W"
