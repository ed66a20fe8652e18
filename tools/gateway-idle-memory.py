"""Measures the server's memory per idle gateway connection: opens N connections that say
hello and subscribe to their own inbox, then compares the server's RSS (VmRSS in
/proc/<pid>/status) before and after. Usage:
    python3 tools/gateway-idle-memory.py <server pid> <ws url> <hs256 secret> <N> [--hello-only]
Prints one JSON line. Raise the open-files limit (ulimit -n) for large N."""
import asyncio, json, sys

sys.path.insert(0, __file__.rsplit("/tools/", 1)[0] + "/tests/clients")
from chat_client import Device, mint  # noqa: E402


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def main(pid, url, secret, n, subscribe):
    warm = [await Device.connect(url, mint(secret, f"warm{i}"), "d") for i in range(50)]
    await asyncio.sleep(1)
    before = rss_kib(pid)
    devices = []
    for i in range(n):
        d = await Device.connect(url, mint(secret, f"user{i}"), "d")
        if subscribe:
            ack = await d.request({"op": "subscribe", "topic": f"chat.inbox.user{i}"})
            assert ack["op"] == "ack", ack
        devices.append(d)
    await asyncio.sleep(2)
    after = rss_kib(pid)
    print(json.dumps({"connections": n, "subscribed": subscribe, "rss_before_kib": before, "rss_after_kib": after,
                      "bytes_per_connection": round((after - before) * 1024 / n)}))
    for d in devices + warm:
        await d.ws.close()


if __name__ == "__main__":
    subscribe = "--hello-only" not in sys.argv
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), subscribe))
