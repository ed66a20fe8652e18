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
        fanout: Vec::new(),
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
        anchor_push_cursors: false,
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
    let topic = ["chat.dm.a", "chat.inbox.b", "chat.group.g"][rng.below(3) as usize];
    let partition = rng.below(2) as u32;
    if rng.below(4) == 0 {
        let device = format!("d{}", rng.below(3));
        let key = CursorKey::for_device(topic, partition, "alice", &device).expect("key");
        return StreamCommand::Commit {
            key,
            seq: rng.below(30),
        };
    }
    if rng.below(6) == 0 {
        let sends = (0..1 + rng.below(3))
            .map(|_| (topic.to_string(), partition, 1 + rng.below(30)))
            .collect();
        return StreamCommand::FannedOut { sends };
    }
    let id = format!("c{}", rng.below(40));
    let dedup = (rng.below(2) == 0).then_some(id.as_str());
    let body = format!("b{}", rng.below(1000));
    let mut a = append(topic, partition, *now_ns, dedup, &body);
    if rng.below(2) == 0 {
        a.dedup = a.dedup.map(|c| DedupClaim::Pointer(c.key().clone()));
    } else if rng.below(2) == 0 {
        a.fanout = ["bob", "carol", "dave"][..1 + rng.below(3) as usize]
            .iter()
            .map(|m| m.to_string())
            .collect();
    }
    StreamCommand::Append(a)
}

/// A device's send to bob and carol, as the gateway writes it: the server's headers and
/// one of the client's.
fn fanning_out(now_ns: i64, client_msg_id: Option<&str>, body: &str) -> Append {
    let mut a = append("chat.dm.a", 0, now_ns, client_msg_id, body);
    a.headers
        .push((Bytes::from_static(b"mood"), Bytes::from_static(b"calm")));
    a.headers
        .push((Bytes::from_static(b"sender"), Bytes::from_static(b"alice")));
    a.headers.sort();
    a.fanout = vec!["bob".into(), "carol".into()];
    a
}

/// Issue 15: a send that fans out owes its pointers from the command that stores it until a
/// report says they are written, whichever node writes them; a retried send owes nothing
/// more; the outbox is bounded, and a send past its bounds is refused as busy with nothing
/// stored, so the same send succeeds once reports free room.
#[test]
fn a_send_that_fans_out_is_owed_in_the_outbox_until_reported() {
    let mut slot = StreamSlot::new(StreamSlotConfig::default());
    let (first, _) = apply_append(&mut slot, fanning_out(SECOND_NS, Some("c1"), "hi"));
    assert!(matches!(
        first,
        StreamOutcome::Appended {
            duplicate: false,
            ..
        }
    ));
    let key = ("chat.dm.a".to_string(), 0, 1);
    let owed = slot.outbox().get(&key).expect("owed").clone();
    assert_eq!(owed.members, ["bob", "carol"]);
    let names: Vec<&[u8]> = owed.headers.iter().map(|(k, _)| k.as_ref()).collect();
    assert_eq!(
        names,
        [&b"message_id"[..], b"sender"],
        "only the headers pointers repeat"
    );
    let (again, _) = apply_append(&mut slot, fanning_out(2 * SECOND_NS, Some("c1"), "hi"));
    assert!(matches!(
        again,
        StreamOutcome::Appended {
            duplicate: true,
            ..
        }
    ));
    let _ = apply_append(&mut slot, append("chat.dm.a", 0, 3, None, "plain"));
    assert_eq!(
        slot.outbox().len(),
        1,
        "a retry and a plain append owe nothing"
    );

    let report = |sends: Vec<(String, u32, u64)>| StreamCommand::FannedOut { sends };
    let other = ("chat.dm.a".to_string(), 0, 99);
    let (cleared, _) = slot.apply(&report(vec![key.clone(), other.clone()]));
    assert_eq!(cleared, StreamOutcome::FannedOut { cleared: 1 });
    assert!(slot.outbox().is_empty());
    let (cleared, _) = slot.apply(&report(vec![key]));
    assert_eq!(
        cleared,
        StreamOutcome::FannedOut { cleared: 0 },
        "reports repeat harmlessly"
    );

    // Full by sends: the next one is busy, stores nothing and keeps no claim.
    for n in 0..OUTBOX_SENDS_PER_SLOT_MAX {
        let (o, _) = apply_append(&mut slot, fanning_out(4, None, &n.to_string()));
        assert!(matches!(o, StreamOutcome::Appended { .. }), "{o:?}");
    }
    let position = slot.position("chat.dm.a", 0);
    let (busy, effect) = apply_append(&mut slot, fanning_out(5, Some("c2"), "late"));
    assert!(matches!(busy, StreamOutcome::Busy(_)), "{busy:?}");
    assert!(effect.is_none());
    assert_eq!(slot.position("chat.dm.a", 0), position);
    let (_, oldest) = slot.outbox().first_key_value().expect("full");
    let oldest = oldest.clone();
    let first_owed = slot.outbox().keys().next().cloned().expect("full");
    let _ = slot.apply(&report(vec![first_owed]));
    assert_eq!(oldest.members.len(), 2);
    let (stored, _) = apply_append(&mut slot, fanning_out(6, Some("c2"), "late"));
    assert!(
        matches!(
            stored,
            StreamOutcome::Appended {
                duplicate: false,
                ..
            }
        ),
        "the busy send's claim was released: {stored:?}"
    );

    // Full by members.
    let mut slot = StreamSlot::new(StreamSlotConfig::default());
    let many: Vec<String> = (0..FANOUT_MEMBERS_MAX)
        .map(|i| format!("u{i:05}"))
        .collect();
    let per_send = OUTBOX_MEMBERS_PER_SLOT_MAX / FANOUT_MEMBERS_MAX;
    for n in 0..=per_send {
        let mut a = fanning_out(7, None, &n.to_string());
        a.fanout = many.clone();
        let (o, _) = apply_append(&mut slot, a);
        let expect_busy = n == per_send;
        assert_eq!(
            matches!(o, StreamOutcome::Busy(_)),
            expect_busy,
            "send {n}: {o:?}"
        );
    }

    // A header the pointers repeat that is too long is refused for good.
    let mut long = fanning_out(8, None, "long");
    long.headers.retain(|(k, _)| k.as_ref() != b"sender");
    long.headers.push((
        Bytes::from_static(b"sender"),
        Bytes::from(vec![b'a'; POINTER_HEADER_VALUE_BYTES_MAX + 1]),
    ));
    long.headers.sort();
    let (refused, _) = apply_append(&mut StreamSlot::new(StreamSlotConfig::default()), long);
    assert!(matches!(refused, StreamOutcome::Refused(_)), "{refused:?}");
}

/// Fan-out lists are bounded and canonical at both ends of the wire.
#[test]
fn fan_out_lists_out_of_order_repeated_invalid_or_too_long_are_refused() {
    let encode = |fanout: Vec<&str>| {
        let mut a = append("chat.dm.a", 0, 1, None, "x");
        a.fanout = fanout.into_iter().map(String::from).collect();
        command::encode(&StreamCommand::Append(a), &mut Vec::new())
    };
    assert!(encode(vec!["bob", "carol"]).is_ok());
    for bad in [
        vec!["carol", "bob"],
        vec!["bob", "bob"],
        vec!["b#b"],
        vec![""],
    ] {
        assert!(encode(bad.clone()).is_err(), "{bad:?}");
    }
    let too_many: Vec<String> = (0..=FANOUT_MEMBERS_MAX)
        .map(|i| format!("u{i:05}"))
        .collect();
    let mut a = append("chat.dm.a", 0, 1, None, "x");
    a.fanout = too_many;
    assert!(command::encode(&StreamCommand::Append(a), &mut Vec::new()).is_err());
    // On the decoding side: swap two members of a valid command.
    let mut a = append("chat.dm.a", 0, 1, None, "x");
    a.fanout = vec!["bob".into(), "cat".into()];
    let mut bytes = Vec::new();
    command::encode(&StreamCommand::Append(a), &mut bytes).expect("valid");
    let at = bytes.windows(3).position(|w| w == b"bob").expect("bob");
    bytes[at..at + 3].copy_from_slice(b"cat");
    let at = bytes.windows(3).rposition(|w| w == b"cat").expect("cat");
    bytes[at..at + 3].copy_from_slice(b"bob");
    let err = command::decode(&bytes).expect_err("out of order");
    assert!(err.contains("out of order"), "{err}");
    // Reports: none, or past the cap, are refused.
    let report = |n: usize| StreamCommand::FannedOut {
        sends: vec![("chat.dm.a".to_string(), 0, 1); n],
    };
    assert!(command::encode(&report(0), &mut Vec::new()).is_err());
    assert!(command::encode(
        &report(command::FANNED_OUT_PER_COMMAND_MAX),
        &mut Vec::new()
    )
    .is_ok());
    assert!(command::encode(
        &report(command::FANNED_OUT_PER_COMMAND_MAX + 1),
        &mut Vec::new()
    )
    .is_err());
}

/// Issue 15: with push on, an inbox partition's first pointer anchors its push cursor in
/// the same apply (so the next leader's dispatcher finds the inbox), at the pointer; later
/// pointers, other topics and a cursor the dispatcher moved are left alone; with push off
/// nothing is anchored.
#[test]
fn an_inboxs_first_pointer_anchors_its_push_cursor_when_push_is_on() {
    let on = StreamSlotConfig {
        anchor_push_cursors: true,
        ..StreamSlotConfig::default()
    };
    let push_key = |topic: &str| {
        CursorKey::new(
            topic,
            0,
            crate::messaging::cursor::PUSH_DISPATCHER_GROUP,
            "",
        )
        .expect("key")
    };
    let mut slot = StreamSlot::new(on.clone());
    let _ = apply_append(&mut slot, append("chat.inbox.bob", 0, 1, None, "a"));
    let _ = apply_append(&mut slot, append("chat.inbox.bob", 0, 2, None, "b"));
    assert_eq!(slot.cursors().get(&push_key("chat.inbox.bob")), Some(1));
    // The dispatcher moves it; later pointers do not take it back.
    let _ = slot.apply(&StreamCommand::Commit {
        key: push_key("chat.inbox.bob"),
        seq: 3,
    });
    let _ = apply_append(&mut slot, append("chat.inbox.bob", 0, 3, None, "c"));
    assert_eq!(slot.cursors().get(&push_key("chat.inbox.bob")), Some(3));
    // An inbox first written to later is anchored at its own first pointer.
    let _ = apply_append(&mut slot, append("chat.inbox.carol", 0, 4, None, "x"));
    let _ = apply_append(&mut slot, append("chat.inbox.carol", 0, 5, None, "y"));
    assert_eq!(slot.cursors().get(&push_key("chat.inbox.carol")), Some(1));
    let _ = apply_append(&mut slot, append("chat.dm.a", 0, 6, None, "hi"));
    assert_eq!(slot.cursors().get(&push_key("chat.dm.a")), None);
    // A snapshot carries the anchors like any cursor.
    let resumed = StreamSlot::decode_snapshot(&snapshot_bytes(&slot), on).expect("decodes");
    assert_eq!(snapshot_bytes(&resumed), snapshot_bytes(&slot));

    let mut off = StreamSlot::new(StreamSlotConfig::default());
    let _ = apply_append(&mut off, append("chat.inbox.bob", 0, 1, None, "a"));
    assert!(off.cursors().is_empty());
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
        anchor_push_cursors: false,
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

/// Snapshots written before pointer claims (version 1) or the outbox (version 2) existed,
/// without those last sections, are read.
#[test]
fn snapshots_without_pointer_claims_or_outbox_are_still_read() {
    let cfg = StreamSlotConfig::default();
    let mut slot = StreamSlot::new(cfg.clone());
    let _ = apply_append(
        &mut slot,
        append("chat.dm.a", 0, SECOND_NS, Some("c1"), "x"),
    );
    let bytes = snapshot_bytes(&slot);
    let empty_section = 0u32.to_le_bytes();
    for (version, sections) in [
        (super::snapshot::VERSION_WITHOUT_OUTBOX, 1),
        (super::snapshot::VERSION_WITHOUT_POINTER_CLAIMS, 2),
    ] {
        let cut = sections * empty_section.len();
        assert!(bytes[bytes.len() - cut..].iter().all(|b| *b == 0));
        let mut old = bytes[..bytes.len() - cut].to_vec();
        old[0] = version;
        let read = StreamSlot::decode_snapshot(&old, cfg.clone()).expect("an older snapshot");
        assert_eq!(snapshot_bytes(&read), bytes, "version {version}");
        // The current version must carry the sections.
        old[0] = VERSION_BYTE;
        assert!(StreamSlot::decode_snapshot(&old, cfg.clone()).is_err());
    }
}

#[test]
fn replicas_that_apply_the_same_commands_agree_and_a_snapshot_resumes_exactly() {
    let cfg = StreamSlotConfig {
        dedup_ttl_ns: 60 * SECOND_NS,
        dedup_entries_max: 16,
        anchor_push_cursors: true,
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
