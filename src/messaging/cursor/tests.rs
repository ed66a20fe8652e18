use super::*;
use boltq_io::testutil::Rng;

const NEXT: u64 = 1_000_000;

fn k(topic: &str, partition: u32, group: &str, member: &str) -> CursorKey {
    CursorKey::new(topic, partition, group, member).unwrap()
}

fn device(user: &str, dev: &str) -> CursorKey {
    CursorKey::for_device("chat.inbox.u", 0, user, dev).unwrap()
}

#[test]
fn commit_and_read() {
    let mut m = CursorMap::new();
    let key = device("alice", "phone");
    assert_eq!(m.get(&key), None);
    assert_eq!(
        m.commit(&key, 42, NEXT),
        Ok(Commit::Stored {
            seq: 42,
            clamped: false
        })
    );
    assert_eq!(m.get(&key), Some(42));
    assert_eq!(key.group(), "user:alice");
    assert_eq!(key.member(), "phone");
}

#[test]
fn commit_is_monotonic() {
    let mut m = CursorMap::new();
    let key = device("alice", "phone");
    let _ = m.commit(&key, 500, NEXT).unwrap();
    assert_eq!(
        m.commit(&key, 200, NEXT),
        Ok(Commit::Unchanged { stored: 500 })
    );
    assert_eq!(
        m.commit(&key, 500, NEXT),
        Ok(Commit::Unchanged { stored: 500 })
    );
    assert_eq!(m.get(&key), Some(500));
}

#[test]
fn commit_is_clamped_to_next_seq_d21() {
    let mut m = CursorMap::new();
    let key = device("alice", "phone");
    assert_eq!(
        m.commit(&key, 1_000, 11),
        Ok(Commit::Stored {
            seq: 11,
            clamped: true
        })
    );
    assert_eq!(m.get(&key), Some(11));
    assert_eq!(
        m.commit(&key, 1_000, 11),
        Ok(Commit::Unchanged { stored: 11 })
    );
}

#[test]
fn zero_is_refused() {
    let mut m = CursorMap::new();
    let key = device("alice", "phone");
    assert_eq!(m.commit(&key, 0, NEXT), Err(CursorError::ZeroSeq));
    // An empty partition (next_seq 0 is impossible; treat as refusal, never store 0).
    assert_eq!(m.commit(&key, 5, 0), Err(CursorError::ZeroSeq));
    assert!(m.is_empty());
}

#[test]
fn per_device_cursors_and_watermark() {
    let mut m = CursorMap::new();
    let _ = m.commit(&device("alice", "phone"), 42, NEXT).unwrap();
    let _ = m.commit(&device("alice", "laptop"), 10, NEXT).unwrap();
    let _ = m.commit(&device("alice", "tablet"), 80, NEXT).unwrap();
    assert_eq!(m.get(&device("alice", "phone")), Some(42));
    assert_eq!(m.get(&device("alice", "laptop")), Some(10));
    assert_eq!(m.watermark("chat.inbox.u", 0, "user:alice"), Some(10));
    let _ = m.commit(&device("alice", "laptop"), 90, NEXT).unwrap();
    assert_eq!(m.watermark("chat.inbox.u", 0, "user:alice"), Some(42));
    let members: Vec<_> = m.members("chat.inbox.u", 0, "user:alice").collect();
    assert_eq!(members, [("laptop", 90), ("phone", 42), ("tablet", 80)]);
}

#[test]
fn multi_device_group_watermark_is_the_slowest() {
    let mut m = CursorMap::new();
    for (dev, seq) in [("a", 100), ("b", 80), ("c", 120)] {
        let _ = m.commit(&k("t", 0, "g", dev), seq, NEXT).unwrap();
    }
    assert_eq!(m.watermark("t", 0, "g"), Some(80));
}

#[test]
fn group_isolation() {
    let mut m = CursorMap::new();
    let _ = m.commit(&k("t", 0, "g1", "m"), 5, NEXT).unwrap();
    let _ = m.commit(&k("t", 0, "g2", "m"), 9, NEXT).unwrap();
    let _ = m.commit(&k("t", 1, "g1", "m"), 1, NEXT).unwrap();
    let _ = m.commit(&k("u", 0, "g1", "m"), 2, NEXT).unwrap();
    assert_eq!(m.watermark("t", 0, "g1"), Some(5));
    assert_eq!(m.watermark("t", 0, "g2"), Some(9));
    assert_eq!(m.members("t", 0, "g1").count(), 1);
    assert_eq!(m.watermark("t", 0, "g3"), None);
}

#[test]
fn group_prefix_is_not_ambiguous() {
    let mut m = CursorMap::new();
    let _ = m.commit(&device("1", "d"), 7, NEXT).unwrap();
    let _ = m.commit(&device("10", "d"), 3, NEXT).unwrap();
    assert_eq!(m.watermark("chat.inbox.u", 0, "user:1"), Some(7));
    assert_eq!(m.watermark("chat.inbox.u", 0, "user:10"), Some(3));
    let ones: Vec<_> = m.members("chat.inbox.u", 0, "user:1").collect();
    assert_eq!(ones, [("d", 7)]);
}

#[test]
fn key_with_empty_member() {
    let mut m = CursorMap::new();
    let key = k("chat.inbox.bob", 0, PUSH_DISPATCHER_GROUP, "");
    let _ = m.commit(&key, 4, NEXT).unwrap();
    assert_eq!(m.get(&key), Some(4));
    assert_eq!(
        m.members("chat.inbox.bob", 0, PUSH_DISPATCHER_GROUP)
            .collect::<Vec<_>>(),
        [("", 4)]
    );
}

#[test]
fn delete() {
    let mut m = CursorMap::new();
    let key = device("alice", "phone");
    let _ = m.commit(&key, 5, NEXT).unwrap();
    assert!(m.delete(&key));
    assert_eq!(m.get(&key), None);
    assert!(!m.delete(&key), "deleting an unknown key is a no-op");
    assert!(m.is_empty());
    // A deleted cursor starts over.
    assert_eq!(
        m.commit(&key, 2, NEXT),
        Ok(Commit::Stored {
            seq: 2,
            clamped: false
        })
    );
}

#[test]
fn key_validation_d20() {
    assert_eq!(
        CursorKey::new("", 0, "g", "m"),
        Err(CursorError::Empty { component: "topic" })
    );
    assert_eq!(
        CursorKey::new("t", 0, "", "m"),
        Err(CursorError::Empty { component: "group" })
    );
    assert_eq!(
        CursorKey::for_device("t", 0, "alice", ""),
        Err(CursorError::Empty {
            component: "device"
        })
    );
    assert_eq!(
        CursorKey::new("t", 0, "g\0x", "m"),
        Err(CursorError::Nul { component: "group" })
    );
    assert_eq!(
        CursorKey::new("t", 0, "g", "\0"),
        Err(CursorError::Nul {
            component: "member"
        })
    );
    assert!(CursorKey::new(&"t".repeat(512), 0, &"g".repeat(256), &"m".repeat(256)).is_ok());
    assert_eq!(
        CursorKey::new(&"t".repeat(513), 0, "g", "m"),
        Err(CursorError::TooLong {
            component: "topic",
            bytes: 513,
            bytes_max: 512
        })
    );
    assert!(matches!(
        CursorKey::new("t", 0, "g", &"m".repeat(257)),
        Err(CursorError::TooLong { .. })
    ));
    assert!(matches!(
        CursorKey::new("t", 0, &"g".repeat(257), "m"),
        Err(CursorError::TooLong { .. })
    ));
    let e = CursorKey::new("t", 0, "g", &"m".repeat(70_000)).unwrap_err();
    assert!(e.to_string().contains("70000 bytes"), "{e}");
}

#[test]
fn caps_refuse_new_keys_only() {
    let mut m = CursorMap::with_limits(3, 2);
    let _ = m.commit(&k("t", 0, "g", "a"), 1, NEXT).unwrap();
    let _ = m.commit(&k("t", 0, "g", "b"), 1, NEXT).unwrap();
    assert_eq!(
        m.commit(&k("t", 0, "g", "c"), 1, NEXT),
        Err(CursorError::GroupFull { members_max: 2 })
    );
    // Existing members still move; other groups are separate.
    let _ = m.commit(&k("t", 0, "g", "a"), 2, NEXT).unwrap();
    let _ = m.commit(&k("t", 1, "g", "c"), 1, NEXT).unwrap();
    assert_eq!(
        m.commit(&k("t", 2, "g", "c"), 1, NEXT),
        Err(CursorError::KeysFull { keys_max: 3 })
    );
    assert_eq!(m.len(), 3);
    assert!(m.delete(&k("t", 0, "g", "b")));
    let _ = m.commit(&k("t", 0, "g", "c"), 1, NEXT).unwrap();
    // Replay obeys the same caps.
    let full = CursorRecord::Commit {
        key: k("x", 0, "g", "m"),
        seq: 1,
    };
    assert_eq!(m.apply(&full), Err(CursorError::KeysFull { keys_max: 3 }));
    let defaults = CursorMap::with_limits(0, 0);
    assert_eq!(
        (defaults.keys_max, defaults.members_per_group_max),
        (CURSOR_KEYS_MAX, CURSOR_MEMBERS_PER_GROUP_MAX)
    );
}

#[test]
fn key_round_trip() {
    let mut rng = Rng::new(0xc0de);
    const PIECES: &[&str] = &["a", ":", ".", "é", " ", "user:", "☃", "%"];
    let pick = |rng: &mut Rng, n_max: u64| -> String {
        (0..rng.below(n_max))
            .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
            .collect()
    };
    for _ in 0..2000 {
        let topic = format!("t{}", pick(&mut rng, 60));
        let group = format!("g{}", pick(&mut rng, 40));
        let member = pick(&mut rng, 40);
        let key = k(&topic, rng.next_u64() as u32, &group, &member);
        let seq = 1 + rng.below(u64::MAX - 1);
        let mut body = Vec::new();
        encode_commit(&key, seq, &mut body);
        assert!(body.len() <= CURSOR_RECORD_BYTES_MAX);
        assert_eq!(decode_commit(&body), Ok((key.clone(), seq)));
        let mut del = Vec::new();
        encode_delete(&key, &mut del);
        assert_eq!(decode_record(&del), Ok(CursorRecord::Delete { key }));
        assert_eq!(decode_commit(&del), Err(CursorError::NotACommit));
    }
}

#[test]
fn largest_record_fits_the_bound() {
    let key = k(
        &"t".repeat(512),
        u32::MAX,
        &"g".repeat(256),
        &"m".repeat(256),
    );
    let mut body = Vec::new();
    encode_commit(&key, u64::MAX, &mut body);
    assert_eq!(body.len(), CURSOR_RECORD_BYTES_MAX);
    assert_eq!(decode_commit(&body), Ok((key, u64::MAX)));
}

#[test]
fn encoding_layout() {
    let mut body = Vec::new();
    encode_commit(&k("t", 2, "g", ""), 7, &mut body);
    assert_eq!(
        body,
        [1, 1, 2, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1, 0, b't', 1, 0, b'g', 0, 0]
    );
}

#[test]
fn parse_rejects_malformed() {
    let mut good = Vec::new();
    encode_commit(&k("topic", 1, "group", "member"), 9, &mut good);
    // Every strict prefix is truncated.
    for n in 0..good.len() {
        assert_eq!(
            decode_record(&good[..n]),
            Err(CursorError::Truncated),
            "{n}"
        );
    }
    let with = |at: usize, byte: u8| {
        let mut b = good.clone();
        b[at] = byte;
        b
    };
    assert_eq!(
        decode_record(&with(0, 2)),
        Err(CursorError::UnknownVersion(2))
    );
    assert_eq!(decode_record(&with(1, 3)), Err(CursorError::UnknownKind(3)));
    // A lying topic length: longer than what follows, or shorter (then the rest
    // misparses and fails somewhere).
    assert_eq!(decode_record(&with(14, 200)), Err(CursorError::Truncated));
    assert!(decode_record(&with(14, 4)).is_err());
    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(
        decode_record(&trailing),
        Err(CursorError::TrailingBytes { bytes: 1 })
    );
    assert_eq!(
        decode_record(&with(16, 0)),
        Err(CursorError::Nul { component: "topic" })
    );
    assert_eq!(
        decode_record(&with(16, 0xff)),
        Err(CursorError::NotUtf8 { component: "topic" })
    );
    let mut zero = Vec::new();
    encode_header(KIND_COMMIT, 0, &mut zero);
    zero.extend_from_slice(&0u64.to_le_bytes());
    encode_components(&k("t", 0, "g", ""), &mut zero);
    assert_eq!(decode_record(&zero), Err(CursorError::ZeroSeq));
    // An empty group and an over-long member are refused even though they fit u16.
    let mut empty_group = Vec::new();
    encode_header(KIND_DELETE, 0, &mut empty_group);
    empty_group.extend_from_slice(&[1, 0, b't', 0, 0, 0, 0]);
    assert_eq!(
        decode_record(&empty_group),
        Err(CursorError::Empty { component: "group" })
    );
    let mut long_member = Vec::new();
    encode_header(KIND_DELETE, 0, &mut long_member);
    long_member.extend_from_slice(&[1, 0, b't', 1, 0, b'g']);
    long_member.extend_from_slice(&300u16.to_le_bytes());
    long_member.extend_from_slice(&[b'm'; 300]);
    assert!(matches!(
        decode_record(&long_member),
        Err(CursorError::TooLong {
            component: "member",
            ..
        })
    ));
    let huge = vec![1u8; CURSOR_RECORD_BYTES_MAX + 1];
    assert!(matches!(
        decode_record(&huge),
        Err(CursorError::TooLarge { .. })
    ));
}

/// A log as the store would hold it: one record body per entry.
fn replay(log: &[Vec<u8>]) -> CursorMap {
    let mut m = CursorMap::new();
    for body in log {
        m.apply(&decode_record(body).unwrap()).unwrap();
    }
    m
}

#[test]
fn replay_restores_state_and_later_records_win() {
    let mut m = CursorMap::new();
    let mut log = Vec::new();
    let write = |rec: &CursorRecord, log: &mut Vec<Vec<u8>>| {
        let mut body = Vec::new();
        match rec {
            CursorRecord::Commit { key, seq } => encode_commit(key, *seq, &mut body),
            CursorRecord::Delete { key } => encode_delete(key, &mut body),
        }
        log.push(body);
    };
    let (a, b) = (device("alice", "phone"), device("bob", "phone"));
    for (key, seq) in [(&a, 5), (&b, 3), (&a, 9)] {
        if let Commit::Stored { seq, .. } = m.commit(key, seq, NEXT).unwrap() {
            write(
                &CursorRecord::Commit {
                    key: key.clone(),
                    seq,
                },
                &mut log,
            );
        }
    }
    assert!(m.delete(&b));
    write(&CursorRecord::Delete { key: b.clone() }, &mut log);
    let restored = replay(&log);
    assert_eq!(restored, m);
    assert_eq!(restored.get(&a), Some(9));
    assert_eq!(restored.get(&b), None);
}

#[test]
fn compaction_preserves_state() {
    let mut m = CursorMap::new();
    let mut log: Vec<Vec<u8>> = Vec::new();
    let keys: Vec<CursorKey> = (0..5).map(|i| device("u", &format!("d{i}"))).collect();
    for i in 0..10_000u64 {
        let key = &keys[(i % 5) as usize];
        if let Commit::Stored { seq, .. } = m.commit(key, i + 1, NEXT).unwrap() {
            let mut body = Vec::new();
            encode_commit(key, seq, &mut body);
            log.push(body);
        }
    }
    assert_eq!(log.len(), 10_000);
    assert!(should_compact(log.len() as u64, m.len()));
    let compacted: Vec<Vec<u8>> = m
        .snapshot()
        .map(|(key, seq)| {
            let mut body = Vec::new();
            encode_commit(key, seq, &mut body);
            body
        })
        .collect();
    assert_eq!(compacted.len(), 5);
    let bytes: usize = compacted.iter().map(Vec::len).sum();
    assert!(bytes < 2000, "{bytes}");
    assert_eq!(replay(&compacted), m);
    assert_eq!(replay(&log), m);
    assert_eq!(m.get(&keys[4]), Some(10_000));
}

#[test]
fn snapshot_is_sorted_by_key() {
    let mut m = CursorMap::new();
    for (t, p, g, mem) in [
        ("b", 0, "g", "m"),
        ("a", 1, "g", "m"),
        ("a", 0, "h", ""),
        ("a", 0, "g", "z"),
    ] {
        let _ = m.commit(&k(t, p, g, mem), 1, NEXT).unwrap();
    }
    let keys: Vec<_> = m.snapshot().map(|(key, _)| key.clone()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert_eq!(keys[0], k("a", 0, "g", "z"));
    assert_eq!(keys[3], k("b", 0, "g", "m"));
}

#[test]
fn compaction_threshold() {
    assert!(!should_compact(1024, 0));
    assert!(should_compact(1025, 0));
    assert!(!should_compact(4 * 100 + 1024, 100));
    assert!(should_compact(4 * 100 + 1025, 100));
    assert!(!should_compact(u64::MAX, usize::MAX));
}

#[test]
fn model_based() {
    // The map against a plain list with linear scans.
    for seed in 1..=20u64 {
        let mut rng = Rng::new(seed);
        let mut m = CursorMap::with_limits(12, 3);
        let mut model: Vec<(CursorKey, u64)> = Vec::new();
        let keys: Vec<CursorKey> = (0..24)
            .map(|i| {
                k(
                    ["t", "u"][i % 2],
                    (i / 2 % 2) as u32,
                    ["g", "g1", "g10"][i / 4 % 3],
                    &(i / 12).to_string(),
                )
            })
            .chain((0..4).map(|i| k("t", 0, "g", &format!("x{i}"))))
            .collect();
        for step in 0..3000 {
            let key = &keys[rng.below(keys.len() as u64) as usize];
            let ctx = format!("seed {seed} step {step}");
            let pos = model.iter().position(|(mk, _)| mk == key);
            if rng.below(5) == 0 {
                assert_eq!(m.delete(key), pos.is_some(), "{ctx}");
                if let Some(i) = pos {
                    model.remove(i);
                }
            } else {
                let seq = rng.below(40);
                let next = 1 + rng.below(40);
                let got = m.commit(key, seq, next);
                let effective = seq.min(next);
                let group = |mk: &CursorKey| mk.in_group(&key.topic, key.partition, &key.group);
                let expect = match pos {
                    _ if effective == 0 => Err(CursorError::ZeroSeq),
                    Some(i) if effective <= model[i].1 => {
                        Ok(Commit::Unchanged { stored: model[i].1 })
                    }
                    Some(i) => {
                        model[i].1 = effective;
                        Ok(Commit::Stored {
                            seq: effective,
                            clamped: seq > next,
                        })
                    }
                    None if model.len() >= 12 => Err(CursorError::KeysFull { keys_max: 12 }),
                    None if model.iter().filter(|(mk, _)| group(mk)).count() >= 3 => {
                        Err(CursorError::GroupFull { members_max: 3 })
                    }
                    None => {
                        model.push((key.clone(), effective));
                        Ok(Commit::Stored {
                            seq: effective,
                            clamped: seq > next,
                        })
                    }
                };
                assert_eq!(got, expect, "{ctx}");
            }
            assert_eq!(m.len(), model.len(), "{ctx}");
            let wm = model
                .iter()
                .filter(|(mk, _)| mk.in_group(&key.topic, key.partition, &key.group))
                .map(|(_, s)| *s)
                .min();
            assert_eq!(
                m.watermark(&key.topic, key.partition, &key.group),
                wm,
                "{ctx}"
            );
        }
        let mut sorted = model.clone();
        sorted.sort();
        let snap: Vec<_> = m.snapshot().map(|(key, s)| (key.clone(), s)).collect();
        assert_eq!(snap, sorted, "seed {seed}");
    }
}
