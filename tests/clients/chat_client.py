"""A small foreign client of the BoltQ gateway (Python `websockets`), used by the end-to-end
tests: it mints HS256 tokens itself, so it shares no code with the server."""
import asyncio, base64, hashlib, hmac, json, sys, time

import websockets


def b64url(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def mint(secret: str, sub: str, kid: str = "k1", exp_in: int = 3600, did: str = "") -> str:
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    claims = {"sub": sub, "exp": int(time.time()) + exp_in}
    if did:
        claims["did"] = did
    body = b64url(json.dumps(claims).encode())
    sig = hmac.new(secret.encode(), f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{b64url(sig)}"


class Device:
    def __init__(self, ws):
        self.ws = ws
        self.n = 0

    @classmethod
    async def connect(cls, url, token, device, resume=""):
        ws = await websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"})
        d = cls(ws)
        hello = {"op": "hello", "id": "h", "version": 1, "device_id": device}
        if resume:
            hello["resume"] = resume
        d.welcome = await d.request(hello)
        return d

    async def request(self, frame):
        """Sends a frame and returns the reply carrying its id (records seen meanwhile are
        kept in self.pending)."""
        self.n += 1
        frame.setdefault("id", f"r{self.n}")
        await self.ws.send(json.dumps(frame))
        while True:
            msg = json.loads(await asyncio.wait_for(self.ws.recv(), 10))
            if msg.get("id") == frame["id"] and msg["op"] != "gap":
                return msg
            self.pending.append(msg)

    pending = []

    async def records(self, topic, count, timeout=10):
        """Collects `count` records of `topic` from the live stream."""
        got = []
        for m in list(self.pending):
            if m.get("op") == "record" and m.get("topic") == topic and "id" not in m:
                got += m.get("records", [])
                self.pending.remove(m)
        deadline = time.time() + timeout
        while len(got) < count:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError(f"{len(got)} of {count} records")
            msg = json.loads(await asyncio.wait_for(self.ws.recv(), left))
            if msg.get("op") == "record" and msg.get("topic") == topic and "id" not in msg:
                got += msg.get("records", [])
            else:
                self.pending.append(msg)
        return got


async def demo(url, secret):
    alice = await Device.connect(url, mint(secret, "alice"), "phone")
    bob = await Device.connect(url, mint(secret, "bob"), "laptop")
    ack = await bob.request({"op": "subscribe", "topic": "chat.direct.alice:bob"})
    assert ack["op"] == "ack", ack
    for i in range(5):
        sent = await alice.request({"op": "send", "conversation": "alice:bob",
                                    "client_msg_id": f"m{i}",
                                    "payload": base64.b64encode(f"hi {i}".encode()).decode()})
        assert sent["op"] == "sent", sent
    recs = await bob.records("chat.direct.alice:bob", 5)
    seqs = [r["seq"] for r in recs]
    assert seqs == list(range(seqs[0], seqs[0] + 5)), seqs
    print(json.dumps({"ok": True, "seqs": seqs}))


if __name__ == "__main__":
    asyncio.run(demo(sys.argv[1], sys.argv[2]))
