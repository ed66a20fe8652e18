"""Durable publish latency beside a flooding client: one process pipelines PINGs on one TCP
connection as fast as it can for FLOOD seconds; after a second of that, this process opens
a new connection and makes COUNT publishes, one at a time, and prints each one's round trip
and a summary line. Usage:
    python3 tools/flood-latency.py <host:port> [COUNT=20] [FLOOD=6]
Run the server with one shard so that both connections share it (docs/benchmarks.md,
"A client that never waits")."""
import json, socket, struct, subprocess, sys, threading, time

PING = bytes([0x06]) + struct.pack("<I", 2) + b"{}"
PUBLISH = 0x01


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def flood(addr, secs):
    """Writes PINGs from a thread, reads the replies here; prints the reply bytes."""
    s = connect(addr)
    s.settimeout(2)
    stop = time.time() + secs
    chunk = PING * 4096

    def writer():
        while time.time() < stop:
            s.sendall(chunk)

    threading.Thread(target=writer, daemon=True).start()
    got = 0
    while time.time() < stop + 1:
        try:
            d = s.recv(1 << 20)
        except socket.timeout:
            break
        if not d:
            break
        got += len(d)
    print(f"flood: {got} reply bytes")


def publish(s, i):
    body = json.dumps({"topic": "flood-latency", "payload": i}).encode()
    started = time.perf_counter()
    s.sendall(bytes([PUBLISH]) + struct.pack("<I", len(body)) + body)
    head = b""
    while len(head) < 5:
        head += s.recv(5 - len(head))
    n = struct.unpack("<I", head[1:])[0]
    rest = b""
    while len(rest) < n:
        rest += s.recv(n - len(rest))
    assert head[0] == 0x00, (head, rest)
    return (time.perf_counter() - started) * 1000


def main():
    if sys.argv[1] == "--flood":
        flood(sys.argv[2], float(sys.argv[3]))
        return
    addr = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    secs = float(sys.argv[3]) if len(sys.argv) > 3 else 6
    flooder = subprocess.Popen([sys.executable, __file__, "--flood", addr, str(secs)])
    time.sleep(1)
    s = connect(addr)
    s.settimeout(30)
    ms = [publish(s, i) for i in range(count)]
    flooder.wait()
    print("publish ms:", " ".join(f"{x:.1f}" for x in ms))
    ms.sort()
    print(f"publish ms p50 {ms[len(ms) // 2]:.2f} max {ms[-1]:.2f}")


if __name__ == "__main__":
    main()
