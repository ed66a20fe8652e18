"""A small foreign client of the BoltQ gateway (Python `websockets`), used by the end-to-end
tests: it mints HS256 tokens itself, so it shares no code with the server."""
import asyncio, base64, hashlib, hmac, json, sys, time

import os
import ssl

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
        kwargs = {}
        if url.startswith("wss://"):
            # Trust exactly the test's self-signed certificate.
            kwargs["ssl"] = ssl.create_default_context(cafile=os.environ["BOLTQ_TEST_CAFILE"])
        ws = await websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"}, **kwargs)
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
            # A subscribe's `gap` precedes its `ack`; a history's `gap` is the answer.
            if msg.get("id") == frame["id"] and (msg["op"] != "gap" or frame["op"] == "history"):
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


def pay(text):
    return base64.b64encode(text.encode()).decode()


async def scenario_dedup(url, secret):
    alice = await Device.connect(url, mint(secret, "alice"), "phone")
    first = await alice.request({"op": "send", "conversation": "alice:bob", "client_msg_id": "x1", "payload": pay("once")})
    again = await alice.request({"op": "send", "conversation": "alice:bob", "client_msg_id": "x1", "payload": pay("once")})
    assert first["op"] == "sent" and again["op"] == "sent", (first, again)
    assert again["sent"].get("duplicate") is True, again
    assert again["sent"]["seq"] == first["sent"]["seq"], (first, again)
    page = await alice.request({"op": "history", "topic": "chat.direct.alice:bob"})
    assert len(page.get("records", [])) == 1, page


async def scenario_acl(url, secret):
    bob = await Device.connect(url, mint(secret, "bob"), "laptop")
    for frame in [{"op": "subscribe", "topic": "chat.inbox.alice"},
                  {"op": "history", "topic": "chat.direct.alice:carol"},
                  {"op": "subscribe", "topic": "chat.direct.alice:carol"},
                  {"op": "send", "conversation": "alice:carol", "payload": pay("x")},
                  {"op": "commit", "topic": "chat.inbox.alice", "seq": 1}]:
        r = await bob.request(frame)
        assert r["op"] == "error" and r["error"]["code"] == "forbidden", (frame, r)
    own = await bob.request({"op": "subscribe", "topic": "chat.inbox.bob"})
    assert own["op"] == "ack", own
    # Wildcard characters never pass as user ids: the upgrade itself is refused.
    for sub in ["#", "*", "alice.x", "a:b"]:
        try:
            await Device.connect(url, mint(secret, sub), "d")
            raise AssertionError(f"token for {sub!r} accepted")
        except websockets.exceptions.InvalidStatus as e:
            assert e.response.status_code == 401, e
    # Reversed direct ids are refused.
    r = await bob.request({"op": "subscribe", "topic": "chat.direct.bob:alice"})
    assert r["op"] == "error" and r["error"]["code"] == "bad_request", r


async def scenario_cursors(url, secret):
    alice = await Device.connect(url, mint(secret, "alice"), "phone")
    for i in range(10):
        r = await alice.request({"op": "send", "conversation": "alice:bob", "payload": pay(str(i))})
        assert r["op"] == "sent", r
    topic = "chat.direct.alice:bob"
    devices = {"d1": 3, "d2": 5, "d3": 8, "d4": 11}
    for dev, pos in devices.items():
        d = await Device.connect(url, mint(secret, "bob"), dev)
        r = await d.request({"op": "commit", "topic": topic, "seq": pos})
        assert r["op"] == "ack", r
        r = await d.request({"op": "commit", "topic": topic, "seq": 2})  # stale: ignored
        assert r["op"] == "ack", r
        await d.ws.close()
    for dev, pos in devices.items():
        d = await Device.connect(url, mint(secret, "bob"), dev)
        ack = await d.request({"op": "subscribe", "topic": topic})
        assert ack["from_seq"] == pos, (dev, ack)
        if pos <= 10:
            recs = await d.records(topic, 11 - pos)
            assert [r["seq"] for r in recs] == list(range(pos, 11)), recs
        await d.ws.close()


async def scenario_resume(url, secret):
    topic = "chat.direct.alice:bob"
    alice = await Device.connect(url, mint(secret, "alice"), "phone")
    bob = await Device.connect(url, mint(secret, "bob"), "laptop")
    token = bob.welcome["token"]
    assert (await bob.request({"op": "subscribe", "topic": topic}))["op"] == "ack"
    for i in range(5):
        await alice.request({"op": "send", "conversation": "alice:bob", "payload": pay(str(i))})
    first = await bob.records(topic, 5)
    bob.ws.transport.abort()  # abrupt: no close frame
    for i in range(5, 12):
        await alice.request({"op": "send", "conversation": "alice:bob", "payload": pay(str(i))})
    bob2 = await Device.connect(url, mint(secret, "bob"), "laptop", resume=token)
    assert bob2.welcome.get("resumed") is True, bob2.welcome
    assert bob2.welcome["token"] != token, "resume tokens rotate"
    rest = await bob2.records(topic, 7)
    seqs = [r["seq"] for r in first + rest]
    assert seqs == list(range(1, 13)), seqs
    # The old token no longer resumes.
    bob3 = await Device.connect(url, mint(secret, "bob"), "laptop", resume=token)
    assert not bob3.welcome.get("resumed"), bob3.welcome


async def scenario_expiry(url, secret):
    d = await Device.connect(url, mint(secret, "alice", exp_in=1), "phone")
    assert (await d.request({"op": "subscribe", "topic": "chat.inbox.alice"}))["op"] == "ack"
    t0 = time.time()
    try:
        while True:
            await asyncio.wait_for(d.ws.recv(), 20)
    except websockets.exceptions.ConnectionClosed as e:
        assert e.rcvd is not None and e.rcvd.code == 1008, e
        assert "expired" in e.rcvd.reason, e
    assert time.time() - t0 < 15


async def scenario_send_until_killed(url, secret, acked_path, round_no):
    """Sends until the server dies; appends `client_msg_id seq` of every acknowledged send."""
    alice = await Device.connect(url, mint(secret, "alice"), "phone")
    deadline = time.time() + 5  # if it connected after the kill, stop on its own
    with open(acked_path, "a") as out:
        i = 0
        try:
            while time.time() < deadline:
                cid = f"r{round_no}-{i}"
                r = await alice.request({"op": "send", "conversation": "alice:bob", "client_msg_id": cid, "payload": pay(cid)})
                assert r["op"] == "sent", r
                out.write(f"{cid} {r['sent']['seq']}\n")
                out.flush()
                i += 1
        except (websockets.exceptions.ConnectionClosed, OSError, asyncio.TimeoutError):
            return


async def history_of(device, topic):
    """Every record of `topic` from seq 1, read page by page."""
    out, frm = [], 1
    while True:
        page = await device.request({"op": "history", "topic": topic, "from_seq": frm, "limit": 200})
        recs = page.get("records", [])
        if not recs:
            return out
        out += recs
        frm = recs[-1]["seq"] + 1


async def scenario_verify_acked(url, secret, acked_path):
    # A sender killed mid-line leaves a partial last line: only whole lines count.
    acked = [f for f in (l.split() for l in open(acked_path).read().splitlines()) if len(f) == 2]
    bob = await Device.connect(url, mint(secret, "bob"), "laptop")
    seen = await history_of(bob, "chat.direct.alice:bob")
    seqs = [r["seq"] for r in seen]
    assert seqs == list(range(1, len(seqs) + 1)), "gap-free"
    ids = [r["headers"]["client_msg_id"] for r in seen]
    assert len(ids) == len(set(ids)), "no send stored twice"
    by_id = {r["headers"]["client_msg_id"]: r["seq"] for r in seen}
    for cid, seq in acked:
        assert by_id.get(cid) == int(seq), f"acknowledged {cid} at {seq} missing or moved"
    # Each acknowledged send has its pointer in bob's inbox (fan-out on write): the `sent`
    # reply comes once the pointers are durable too.
    pointers = await history_of(bob, "chat.inbox.bob")
    pointed = {(p["headers"].get("client_msg_id"), p["headers"].get("conv_seq")) for p in pointers}
    for cid, seq in acked:
        assert (cid, seq) in pointed, f"acknowledged {cid} at {seq} has no pointer in bob's inbox"
    print(json.dumps({"acked": len(acked), "stored": len(seen), "pointers": len(pointers)}))


async def scenario_commit_many(url, secret):
    """1100 sends, a commit after each (enough records to compact the cursor log), and 50
    subscriptions to conversations that do not exist (which must create nothing)."""
    topic = "chat.direct.alice:bob"
    alice = await Device.connect(url, mint(secret, "alice"), "phone")
    bob = await Device.connect(url, mint(secret, "bob"), "laptop")
    for i in range(1100):
        r = await alice.request({"op": "send", "conversation": "alice:bob", "payload": pay(str(i))})
        assert r["op"] == "sent", r
        c = await bob.request({"op": "commit", "topic": topic, "seq": r["sent"]["seq"] + 1})
        assert c["op"] == "ack", c
    for i in range(50):
        a = await bob.request({"op": "subscribe", "topic": f"chat.direct.bob:zz{i:03d}"})
        assert a["op"] == "ack" and a["next_seq"] == 1, a


async def scenario_cursor_after_restart(url, secret):
    topic = "chat.direct.alice:bob"
    bob = await Device.connect(url, mint(secret, "bob"), "laptop")
    c = await bob.request({"op": "commit", "topic": topic, "seq": 5})  # stale: ignored
    assert c["op"] == "ack", c
    ack = await bob.request({"op": "subscribe", "topic": topic})
    assert ack["from_seq"] == 1101 and ack["next_seq"] == 1101, ack


async def scenario_retention(url, secret):
    """With 1 MiB segments and a 1-byte retention cap, old segments go: reading below the
    horizon gets a `gap` naming the real first_seq, then the records from there."""
    topic = "chat.direct.alice:bob"
    alice = await Device.connect(url, mint(secret, "alice"), "phone")
    big = pay("y" * 600_000)
    for i in range(5):
        r = await alice.request({"op": "send", "conversation": "alice:bob", "payload": big})
        assert r["op"] == "sent", r
    bob = await Device.connect(url, mint(secret, "bob"), "laptop")
    first = 1
    for _ in range(40):  # retention runs after a checkpoint (every 2 s while writing)
        await alice.request({"op": "send", "conversation": "alice:bob", "payload": pay("tick")})
        page = await bob.request({"op": "history", "topic": topic, "from_seq": 1, "limit": 1})
        if page["op"] == "gap":
            break
        await asyncio.sleep(0.5)
    assert page["op"] == "gap", page
    assert page["error"]["code"] == "history_gap" and page["first_seq"] > 1, page
    first = page["first_seq"]
    ack = await bob.request({"op": "subscribe", "topic": topic, "from_seq": 1})
    gaps = [m for m in bob.pending if m.get("op") == "gap"]
    assert gaps and gaps[-1]["first_seq"] == first, (gaps, ack)
    assert ack["op"] == "ack" and ack["from_seq"] == first, ack
    recs = await bob.records(topic, 1)
    assert recs[0]["seq"] == first, recs[0]["seq"]
    print(json.dumps({"first_seq_after_retention": first}))


async def scenario_takeover(url, secret):
    """A resume while the old socket still looks alive (a phone switching networks) takes
    the session over: the old socket is closed with 4009, the new one continues. Bad frames
    get bad_request and the connection stays usable."""
    topic = "chat.direct.alice:bob"
    alice = await Device.connect(url, mint(secret, "alice"), "phone")
    bob = await Device.connect(url, mint(secret, "bob"), "laptop")
    for bad in ["not json", "{\"op\": 7}", "{\"op\":\"subscribe\",\"id\":\"x\",\"partition\":-1,\"topic\":\"t\"}",
                "{\"op\":\"send\",\"id\":\"y\",\"conversation\":\"alice:bob\",\"payload\":\"%%%\"}",
                "{\"op\":\"frobnicate\",\"id\":\"z\"}"]:
        await bob.ws.send(bad)
        msg = json.loads(await asyncio.wait_for(bob.ws.recv(), 10))
        assert msg["op"] == "error" and msg["error"]["code"] == "bad_request", (bad, msg)
    assert (await bob.request({"op": "ping"}))["op"] == "pong"
    assert (await bob.request({"op": "subscribe", "topic": topic}))["op"] == "ack"
    for i in range(3):
        await alice.request({"op": "send", "conversation": "alice:bob", "payload": pay(str(i))})
    first = await bob.records(topic, 3)
    bob2 = await Device.connect(url, mint(secret, "bob"), "laptop", resume=bob.welcome["token"])
    assert bob2.welcome.get("resumed") is True, bob2.welcome
    try:
        while True:
            await asyncio.wait_for(bob.ws.recv(), 10)
    except websockets.exceptions.ConnectionClosed as e:
        assert e.rcvd is not None and e.rcvd.code == 4009, e
    for i in range(3, 6):
        await alice.request({"op": "send", "conversation": "alice:bob", "payload": pay(str(i))})
    rest = await bob2.records(topic, 3)
    assert [r["seq"] for r in first + rest] == list(range(1, 7)), [r["seq"] for r in first + rest]


SCENARIOS = {"takeover": scenario_takeover, "retention": scenario_retention, "commit_many": scenario_commit_many,
             "cursor_after_restart": scenario_cursor_after_restart, "dedup": scenario_dedup, "acl": scenario_acl, "cursors": scenario_cursors,
             "resume": scenario_resume, "expiry": scenario_expiry}


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
    name, url, secret, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    if name == "send_until_killed":
        asyncio.run(scenario_send_until_killed(url, secret, extra[0], extra[1]))
    elif name == "verify_acked":
        asyncio.run(scenario_verify_acked(url, secret, extra[0]))
    else:
        asyncio.run((demo if name == "chat" else SCENARIOS[name])(url, secret))
    print("ok")
