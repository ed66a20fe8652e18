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
