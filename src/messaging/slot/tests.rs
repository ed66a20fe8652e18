use super::command::{self, Append, DedupClaim, StreamCommand};
use super::*;
use crate::messaging::cursor::{Commit, CursorKey};
use crate::messaging::dedup::DedupKey;
use boltq_io::testutil::Rng;
use bytes::Bytes;

const SECOND_NS: i64 = 1_000_000_000;

fn append(topic: &str, partition: u32, now_ns: i64, dedup: Option<&str>, body: &str) -> Append {
    Append {
        topic: topic.into(),
        partition,
        now_ns,
        dedup: dedup.map(|id| DedupClaim::Send(DedupKey::new("alice", topic, id).expect("key"))),
        key: Bytes::from_static(b"k"),
        headers: vec![(
            Bytes::from_static(b"message_id"),
            Bytes::from(format!("m-{body}")),
        )],
        payload: Bytes::from(body.to_string()),
    }
}

fn apply_append(slot: &mut StreamSlot, a: Append) -> (StreamOutcome, Option<Appended>) {
    slot.apply(&StreamCommand::Append(a))
}

fn snapshot_bytes(slot: &StreamSlot) -> Vec<u8> {
    let mut out = Vec::new();
    slot.encode_snapshot(&mut out);
    out
}

#[test]
fn appends_are_numbered_from_one_per_partition_and_chain_their_digest() {
    let mut slot = StreamSlot::new(StreamSlotConfig::default());
    let (first, effect) = apply_append(&mut slot, append("chat.dm.a", 0, 5, None, "one"));
    let StreamOutcome::Appended { coords, duplicate } = first else {
        panic!("stored: {first:?}");
    };
    assert!(!duplicate);
    assert_eq!((coords.seq, coords.timestamp_ns), (1, 5));
    assert_eq!(coords.message_id, "m-one");
    let effect = effect.expect("an appended record");
    assert_eq!((effect.record.seq, effect.record.timestamp_ns), (1, 5));
    assert_eq!(effect.record.payload, "one");
    let after_one = slot.position("chat.dm.a", 0);
    assert_eq!(after_one.next_seq, 2);
    let (second, _) = apply_append(&mut slot, append("chat.dm.a", 0, 6, None, "two"));
    assert!(matches!(second, StreamOutcome::Appended { coords, .. } if coords.seq == 2));
    let (other, _) = apply_append(&mut slot, append("chat.dm.a", 1, 7, None, "x"));
    assert!(matches!(other, StreamOutcome::Appended { coords, .. } if coords.seq == 1));
    let after_two = slot.position("chat.dm.a", 0);
    assert_eq!(after_two.next_seq, 3);
    assert_ne!(after_two.digest, after_one.digest);

    // The same records in another slot chain to the same digest; a different payload not.
    let mut same = StreamSlot::new(StreamSlotConfig::default());
    let mut differs = StreamSlot::new(StreamSlotConfig::default());
    let _ = apply_append(&mut same, append("chat.dm.a", 0, 5, None, "one"));
    let _ = apply_append(&mut same, append("chat.dm.a", 0, 6, None, "two"));
    let _ = apply_append(&mut differs, append("chat.dm.a", 0, 5, None, "one"));
    let _ = apply_append(&mut differs, append("chat.dm.a", 0, 6, None, "TWO"));
    assert_eq!(same.position("chat.dm.a", 0), after_two);
    assert_ne!(differs.position("chat.dm.a", 0).digest, after_two.digest);
}

#[test]
fn a_retried_send_gets_the_first_copys_coordinates_until_the_window_passes() {
    let cfg = StreamSlotConfig {
        dedup_ttl_ns: 60 * SECOND_NS,
        dedup_entries_max: 0,
    };
    let mut slot = StreamSlot::new(cfg);
    let (first, _) = apply_append(
        &mut slot,
        append("chat.dm.a", 0, SECOND_NS, Some("c1"), "hi"),
    );
    let StreamOutcome::Appended { coords: first, .. } = first else {
        panic!("stored");
    };
    let (retry, effect) = apply_append(
        &mut slot,
        append("chat.dm.a", 0, 2 * SECOND_NS, Some("c1"), "hi"),
    );
    assert_eq!(
        retry,
        StreamOutcome::Appended {
            coords: first.clone(),
            duplicate: true
        }
    );
    assert!(effect.is_none(), "a duplicate appends nothing");
    assert_eq!(slot.position("chat.dm.a", 0).next_seq, 2);
    // Another id, or the same id in another conversation, is a new send.
    let (other, _) = apply_append(
        &mut slot,
        append("chat.dm.a", 0, 3 * SECOND_NS, Some("c2"), "x"),
    );
    assert!(matches!(
        other,
        StreamOutcome::Appended {
            duplicate: false,
            ..
        }
    ));
    let (elsewhere, _) = apply_append(
        &mut slot,
        append("chat.dm.b", 0, 3 * SECOND_NS, Some("c1"), "x"),
    );
    assert!(matches!(
        elsewhere,
        StreamOutcome::Appended {
            duplicate: false,
            ..
        }
    ));
    // Past the window (the proposed time says so), the id stores again.
    let late = SECOND_NS + 61 * SECOND_NS;
    let (again, _) = apply_append(&mut slot, append("chat.dm.a", 0, late, Some("c1"), "hi"));
    assert!(
        matches!(&again, StreamOutcome::Appended { coords, duplicate: false } if coords.seq == 3),
        "{again:?}"
    );
}

#[test]
fn cursors_move_forward_only_and_never_past_the_partition() {
    let mut slot = StreamSlot::new(StreamSlotConfig::default());
    for i in 0..3 {
        let _ = apply_append(&mut slot, append("chat.dm.a", 0, i, None, "r"));
    }
    let key = CursorKey::for_device("chat.dm.a", 0, "alice", "phone").expect("key");
    let commit = |slot: &mut StreamSlot, seq| {
        slot.apply(&StreamCommand::Commit {
            key: key.clone(),
            seq,
        })
        .0
    };
    assert_eq!(
        commit(&mut slot, 3),
        StreamOutcome::Committed(Commit::Stored {
            seq: 3,
            clamped: false
        })
    );
    assert_eq!(
        commit(&mut slot, 2),
        StreamOutcome::Committed(Commit::Unchanged { stored: 3 })
    );
    assert_eq!(
        commit(&mut slot, 99),
        StreamOutcome::Committed(Commit::Stored {
            seq: 4,
            clamped: true
        }),
        "clamped to next_seq 4"
    );
    assert!(matches!(commit(&mut slot, 0), StreamOutcome::Refused(_)));
    assert_eq!(slot.cursors().get(&key), Some(4));
}

/// A random command against a few partitions, dedup ids and cursors.
fn random_command(rng: &mut Rng, now_ns: &mut i64) -> StreamCommand {
    *now_ns += rng.below(20 * SECOND_NS as u64) as i64;
    let topic = ["chat.dm.a", "chat.dm.b", "chat.group.g"][rng.below(3) as usize];
    let partition = rng.below(2) as u32;
    if rng.below(4) == 0 {
        let device = format!("d{}", rng.below(3));
        let key = CursorKey::for_device(topic, partition, "alice", &device).expect("key");
        return StreamCommand::Commit {
            key,
            seq: rng.below(30),
        };
    }
    let id = format!("c{}", rng.below(40));
    let dedup = (rng.below(2) == 0).then_some(id.as_str());
    let body = format!("b{}", rng.below(1000));
    let mut a = append(topic, partition, *now_ns, dedup, &body);
    if rng.below(2) == 0 {
        a.dedup = a.dedup.map(|c| DedupClaim::Pointer(c.key().clone()));
    }
    StreamCommand::Append(a)
}

/// An inbox pointer's append carrying its claim (the message id in the inbox).
fn pointer(now_ns: i64, message_id: &str) -> Append {
    let mut a = append("chat.inbox.bob", 0, now_ns, None, message_id);
    let key = DedupKey::new("alice", "chat.inbox.bob", message_id).expect("key");
    a.dedup = Some(DedupClaim::Pointer(key));
    a
}

/// Issue 15: a pointer appended again after its outcome was unknown is stored once, within
/// the retry window; its claim lives in a table of its own, so pointers never evict the
/// claims of sends (whose window is far longer), and sends never evict pointers'.
#[test]
fn a_retried_pointer_is_stored_once_and_its_claim_is_kept_apart_from_sends() {
    let cfg = StreamSlotConfig {
        dedup_ttl_ns: 600 * SECOND_NS,
        dedup_entries_max: 2,
    };
    let mut slot = StreamSlot::new(cfg);
    let (first, effect) = apply_append(&mut slot, pointer(SECOND_NS, "m1"));
    assert!(effect.is_some(), "{first:?}");
    let (again, effect) = apply_append(&mut slot, pointer(2 * SECOND_NS, "m1"));
    assert!(effect.is_none(), "stored twice: {again:?}");
    assert!(
        matches!(again, StreamOutcome::Appended { duplicate: true, coords } if coords.seq == 1)
    );
    assert_eq!(slot.position("chat.inbox.bob", 0).next_seq, 2);
    assert_eq!((slot.pointer_claims().len(), slot.dedup().len()), (1, 0));

    // Sends fill their table past its cap: the pointer's claim stays.
    for id in ["c1", "c2", "c3"] {
        let _ = apply_append(
            &mut slot,
            append("chat.dm.a", 0, 3 * SECOND_NS, Some(id), "x"),
        );
    }
    assert_eq!(slot.dedup().len(), 2);
    let (still, _) = apply_append(&mut slot, pointer(4 * SECOND_NS, "m1"));
    assert!(matches!(
        still,
        StreamOutcome::Appended {
            duplicate: true,
            ..
        }
    ));

    // Pointers fill theirs past its cap: the sends' claims stay.
    for n in 0..POINTER_CLAIMS_PER_SLOT_MAX {
        let _ = apply_append(&mut slot, pointer(5 * SECOND_NS, &format!("p{n}")));
    }
    assert_eq!(slot.pointer_claims().len(), POINTER_CLAIMS_PER_SLOT_MAX);
    let (send, _) = apply_append(
        &mut slot,
        append("chat.dm.a", 0, 6 * SECOND_NS, Some("c3"), "x"),
    );
    assert!(matches!(
        send,
        StreamOutcome::Appended {
            duplicate: true,
            ..
        }
    ));

    // Past the pointer window the claim is gone (the send's window is longer).
    let late = 6 * SECOND_NS + POINTER_CLAIM_TTL_NS;
    let (expired, effect) = apply_append(&mut slot, pointer(late, "p0"));
    assert!(effect.is_some(), "{expired:?}");
    let (send, _) = apply_append(&mut slot, append("chat.dm.a", 0, late, Some("c3"), "x"));
    assert!(matches!(
        send,
        StreamOutcome::Appended {
            duplicate: true,
            ..
        }
    ));
}

/// A snapshot written before pointer claims existed (version 1, no last section) is read.
#[test]
fn a_snapshot_without_pointer_claims_is_still_read() {
    let cfg = StreamSlotConfig::default();
    let mut slot = StreamSlot::new(cfg.clone());
    let _ = apply_append(
        &mut slot,
        append("chat.dm.a", 0, SECOND_NS, Some("c1"), "x"),
    );
    let bytes = snapshot_bytes(&slot);
    let no_pointer_claims = 0u32.to_le_bytes();
    assert!(bytes.ends_with(&no_pointer_claims));
    let mut old = bytes[..bytes.len() - no_pointer_claims.len()].to_vec();
    old[0] = super::snapshot::VERSION_WITHOUT_POINTER_CLAIMS;
    let read = StreamSlot::decode_snapshot(&old, cfg.clone()).expect("a version 1 snapshot");
    assert_eq!(snapshot_bytes(&read), bytes);
    // The current version must carry the section.
    old[0] = VERSION_BYTE;
    assert!(StreamSlot::decode_snapshot(&old, cfg).is_err());
}

#[test]
fn replicas_that_apply_the_same_commands_agree_and_a_snapshot_resumes_exactly() {
    let cfg = StreamSlotConfig {
        dedup_ttl_ns: 60 * SECOND_NS,
        dedup_entries_max: 16,
    };
    for seed in 0..50 {
        let mut rng = Rng::new(seed);
        let mut now_ns = 0;
        let commands: Vec<StreamCommand> = (0..300)
            .map(|_| random_command(&mut rng, &mut now_ns))
            .collect();
        let cut = rng.below(300) as usize;
        let mut straight = StreamSlot::new(cfg.clone());
        let mut answers = Vec::new();
        for cmd in &commands {
            answers.push(straight.apply(cmd));
        }
        // Another replica applies a prefix, is restored from its snapshot (a restart, or a
        // follower given the leader's snapshot), then applies the rest.
        let mut first = StreamSlot::new(cfg.clone());
        for cmd in &commands[..cut] {
            let _ = first.apply(cmd);
        }
        let mut resumed =
            StreamSlot::decode_snapshot(&snapshot_bytes(&first), cfg.clone()).expect("decodes");
        assert_eq!(
            snapshot_bytes(&resumed),
            snapshot_bytes(&first),
            "seed {seed}"
        );
        for (cmd, answer) in commands[cut..].iter().zip(&answers[cut..]) {
            assert_eq!(&resumed.apply(cmd), answer, "seed {seed}: {cmd:?}");
        }
        assert_eq!(
            snapshot_bytes(&resumed),
            snapshot_bytes(&straight),
            "seed {seed}"
        );
        assert!(straight.dedup().len() <= 16);
        assert!(straight.pointer_claims().len() <= POINTER_CLAIMS_PER_SLOT_MAX);
    }
}

#[test]
fn appends_past_the_record_limits_are_refused_at_encode_with_the_reason() {
    let mut a = append("chat.dm.a", 0, 1, None, "x");
    a.payload = Bytes::from(vec![0u8; boltq_io::record::BODY_BYTES_MAX]);
    let err = command::encode(&StreamCommand::Append(a), &mut Vec::new()).expect_err("too big");
    assert!(err.contains("body"), "{err}");
    let bad_topic = append("chat..a", 0, 1, None, "x");
    let err =
        command::encode(&StreamCommand::Append(bad_topic), &mut Vec::new()).expect_err("topic");
    assert!(err.contains("topic"), "{err}");
}

#[test]
fn commands_round_trip_and_every_truncation_or_damage_is_refused_without_panic() {
    let mut rng = Rng::new(7);
    let mut now_ns = 0;
    for _ in 0..200 {
        let cmd = random_command(&mut rng, &mut now_ns);
        let mut bytes = Vec::new();
        if command::encode(&cmd, &mut bytes).is_err() {
            continue; // a cursor commit of seq 0
        }
        assert!(command::is_stream_command(&bytes));
        assert_eq!(command::decode(&bytes).as_ref(), Ok(&cmd));
        for cut in 0..bytes.len() {
            assert!(command::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(command::decode(&longer).is_err(), "a trailing byte");
        for _ in 0..20 {
            let mut damaged = bytes.clone();
            let at = rng.below(damaged.len() as u64) as usize;
            damaged[at] ^= 1 << rng.below(8);
            if let Ok(decoded) = command::decode(&damaged) {
                let mut again = Vec::new();
                command::encode(&decoded, &mut again).expect("a decoded command encodes");
                assert_eq!(again, damaged, "decoding is canonical");
            }
        }
    }
    // The queue plane's first bytes are never taken for messaging commands.
    for first in [0x01u8, 0x02, 0x03, 0x04, 0x05, 0x06, b'{', b'"'] {
        assert!(!command::is_stream_command(&[first]));
    }
}

#[test]
fn snapshots_refuse_truncation_damage_and_hostile_counts_without_panic() {
    let cfg = StreamSlotConfig::default();
    let mut rng = Rng::new(11);
    let mut now_ns = 0;
    let mut slot = StreamSlot::new(cfg.clone());
    for _ in 0..60 {
        let _ = slot.apply(&random_command(&mut rng, &mut now_ns));
    }
    let bytes = snapshot_bytes(&slot);
    for cut in 0..bytes.len() {
        assert!(
            StreamSlot::decode_snapshot(&bytes[..cut], cfg.clone()).is_err(),
            "cut at {cut}"
        );
    }
    for _ in 0..5_000 {
        let mut damaged = bytes.clone();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(damaged.len() as u64) as usize;
            damaged[at] = rng.below(256) as u8;
        }
        if let Ok(decoded) = StreamSlot::decode_snapshot(&damaged, cfg.clone()) {
            assert_eq!(snapshot_bytes(&decoded), damaged, "decoding is canonical");
        }
    }
    // A count of 2^32 - 1 partitions in a few bytes allocates nothing and is refused.
    let hostile = [&[VERSION_BYTE][..], &u32::MAX.to_le_bytes()].concat();
    let err = StreamSlot::decode_snapshot(&hostile, cfg).expect_err("hostile count");
    assert!(err.contains("cannot hold"), "{err}");
}

const VERSION_BYTE: u8 = super::snapshot::VERSION;
