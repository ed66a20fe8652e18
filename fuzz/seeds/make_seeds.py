#!/usr/bin/env python3
"""Writes the seed inputs under seeds/<target>/ (valid frames and entries, so the fuzzer
starts from the real formats). Each input starts with the mode byte the targets read:
0 = bytes as given, 1 = checksum fixed up by the target. Run from fuzz/seeds/."""
import os
import struct


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def frame(seq, ts, flags, key, headers, payload, epoch=0, sort=True):
    if epoch:
        flags |= 0x04
    hs = sorted(headers) if sort else headers
    hdr = b"".join(struct.pack("<H", len(k)) + k + struct.pack("<H", len(v)) + v for k, v in hs)
    body = struct.pack("<QqBHII", seq, ts, flags, len(key), len(hdr), len(payload))
    if epoch:
        body += struct.pack("<I", epoch)
    body += key + hdr + payload
    return struct.pack("<II", crc32c(body), len(body)) + body


def entry(kind, log, data):
    body = struct.pack("<BI", kind, log) + data
    return struct.pack("<II", crc32c(body), len(body)) + body


frames = {
    "spec_vector": frame(1, 1_700_000_000_000_000_000, 0, b"alice:bob", [(b"sender", b"alice")], b"hi"),
    "epoch": frame(7, 42, 0, b"k", [], b"v", epoch=9),
    "empty": frame(1, 0, 0, b"", [], b""),
    "tombstone_headers": frame(3, 5, 0x01, b"key", [(b"a", b""), (b"", b"x"), (b"z", b"1")], b"p" * 100),
    "unsorted_headers": frame(3, 5, 0, b"key", [(b"z", b"1"), (b"a", b"2")], b"p", sort=False),
    "kib_payload": frame(99, 1, 0, b"k", [], bytes(range(256)) * 4),
}

os.makedirs("record_decode", exist_ok=True)
for name, f in frames.items():
    for mode in (0, 1):
        with open(f"record_decode/{name}-{mode}", "wb") as out:
            out.write(bytes([mode]) + f)

journal = (
    entry(1, 1, b"queue/slot-003")
    + entry(2, 1, frames["spec_vector"])
    + entry(1, 2, b"streams/chat.direct.alice%3Abob/3")
    + entry(2, 2, frames["epoch"])
    + entry(2, 1, frames["tombstone_headers"])
)
os.makedirs("journal_entry_decode", exist_ok=True)
for mode in (0, 1):
    with open(f"journal_entry_decode/file-{mode}", "wb") as out:
        out.write(bytes([mode]) + journal + bytes(64))
    with open(f"journal_entry_decode/torn-{mode}", "wb") as out:
        out.write(bytes([mode]) + journal[:-7])


# tcp_request: v1 request frames as the Go and Node SDKs send them (spec §10), plus the
# BoltQ additions. Mode 0 = a pipelined stream of whole frames; mode 1 = command byte then
# payload, the target writes the header.
def request(code: int, body: bytes) -> bytes:
    return struct.pack("<BI", code, len(body)) + body


requests = {
    "go_publish": (0x01, b'{"delay":0,"headers":null,"payload":{"n":1},"priority":0,"topic":"jobs","ttl":0}'),
    "node_publish": (0x01, b'{"topic":"jobs","payload":"{\\"n\\":1}","headers":{"k":"v"},"delay":5000,"ttl":0,"priority":3}'),
    "go_publish_topic": (0x02, b'{"headers":null,"payload":[1,"a",null],"priority":0,"topic":"news"}'),
    "consume": (0x03, b'{"topic":"jobs"}'),
    "consume_batch": (0x03, b'{"topic":"jobs","wait_ms":500,"max":10}'),
    "subscribe": (0x03, b'{"durable":true,"id":"s1","topic":"news"}'),
    "ack": (0x04, b'{"id":"9f86d081884c7d659a2feaa0c55ad015"}'),
    "nack": (0x05, b'{"id":"9f86d081884c7d659a2feaa0c55ad015"}'),
    "ack_ids": (0x04, b'{"ids":["9f86d081884c7d659a2feaa0c55ad015","a"]}'),
    "nack_ids": (0x05, b'{"ids":["9f86d081884c7d659a2feaa0c55ad015"]}'),
    "subscribe_acked": (0x03, b'{"ack":true,"durable":true,"id":"s1","topic":"news"}'),
    "ping": (0x06, b"{}"),
    "stats": (0x07, b""),
    "auth": (0x08, b'{"api_key":"secret"}'),
    "prefetch": (0x09, b'{"count":10}'),
    "join": (0x10, b'{"node_id":"n2","addr":"10.0.0.2:9100"}'),
    "leave": (0x11, b'{"node_id":"n2"}'),
    "confirm": (0x13, b"{}"),
    "declare": (0x14, b'{"durable":true,"name":"orders","type":"topic"}'),
    "delete": (0x15, b'{"name":"orders"}'),
    "bind": (0x16, b'{"binding_key":"","exchange":"hx","headers":{"a":"b"},"match_all":true,"queue":"q"}'),
    "unbind": (0x17, b'{"exchange":"ex","queue":"q","binding_key":"a.*"}'),
    "publish_exchange": (0x18, b'{"exchange":"ex","routing_key":"rk","payload":"{\\"n\\":1}","headers":{},"priority":0}'),
    "dlq_list": (0x19, b""),
    "dlq_read": (0x1A, b'{"queue":"orders","offset":0,"limit":10}'),
    "dlq_requeue": (0x1B, b'{"queue":"orders","limit":5}'),
    "dlq_purge": (0x1C, b'{"queue":"orders"}'),
    "stream_publish": (0x1D, b'{"topic":"match.alice","key":"alice","headers":{"trace":"t1"},"payload":{"score":3}}'),
    "stream_publish_b64": (0x1D, b'{"topic":"orders.eu","partition":2,"payload_base64":"AP8B"}'),
    "stream_read": (0x1E, b'{"topic":"orders.eu","key":"shop-1","from":5,"max":10}'),
    "stream_tail": (0x1F, b'{"topic":"orders.eu","key":"shop-1","group":"billing","member":"w1","max":100,"wait_ms":5000}'),
    "stream_commit": (0x20, b'{"topic":"orders.eu","key":"shop-1","group":"billing","member":"w1","seq":42}'),
    "escapes": (0x01, b'{"TOPIC":"q","payload":{"s":"\\u00e9\\ud83d\\ude00\\n"},"Headers":{"k":null}}'),
}
os.makedirs("tcp_request", exist_ok=True)
for name, (code, body) in requests.items():
    with open(f"tcp_request/{name}-0", "wb") as out:
        out.write(bytes([0]) + request(code, body))
    with open(f"tcp_request/{name}-1", "wb") as out:
        out.write(bytes([1, code]) + body)
with open("tcp_request/pipelined-0", "wb") as out:
    out.write(bytes([0]) + b"".join(request(c, b) for c, b in requests.values()))
