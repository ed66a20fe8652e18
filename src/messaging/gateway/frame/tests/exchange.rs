//! §2.13: every client line decodes, every server line is produced byte for byte.

use super::*;

// ---- §2.13: every client line decodes ------------------------------------------------

#[test]
fn worked_exchange_requests_decode() {
    assert_eq!(
        decode(
            r#"{"op":"hello","id":"r0","version":1,"device_id":"phone-a1","user_agent":"Demo/3.0 iOS"}"#
        ),
        Request::Hello {
            id: "r0".into(),
            version: 1,
            device_id: "phone-a1".into(),
            user_agent: "Demo/3.0 iOS".into(),
            resume: String::new(),
        }
    );
    assert_eq!(
        decode(r#"{"op":"subscribe","id":"r1","topic":"chat.inbox.alice"}"#),
        Request::Subscribe {
            id: "r1".into(),
            topic: "chat.inbox.alice".into(),
            partition: None,
            from_seq: 0,
        }
    );
    assert_eq!(
        decode(r#"{"op":"typing","id":"r3","conversation":"alice:bob","typing":false}"#),
        Request::Typing {
            id: "r3".into(),
            conversation: "alice:bob".into(),
            typing: false,
        }
    );
    assert_eq!(
        decode(r#"{"op":"watch_presence","id":"r4","users":["bob"]}"#),
        Request::WatchPresence {
            id: "r4".into(),
            users: vec!["bob".into()],
        }
    );
    assert_eq!(
        decode(
            r#"{"op":"send","id":"r5","kind":"direct","conversation":"alice:bob","client_msg_id":"a-1001",
   "payload":"eWVzIQ==","headers":{"content_type":"text/plain"}}"#
        ),
        Request::Send {
            id: "r5".into(),
            conversation: "alice:bob".into(),
            kind: ConversationKind::Direct,
            client_msg_id: "a-1001".into(),
            payload: b"yes!".to_vec(),
            headers: map(&[("content_type", "text/plain")]),
        }
    );
    assert_eq!(
        decode(
            r#"{"op":"commit","id":"r6","topic":"chat.direct.alice:bob","partition":6,"seq":123}"#
        ),
        Request::Commit {
            id: "r6".into(),
            topic: "chat.direct.alice:bob".into(),
            partition: Some(6),
            seq: 123,
        }
    );
    assert_eq!(
        decode(r#"{"op":"presence","id":"r7","state":"away"}"#),
        Request::Presence {
            id: "r7".into(),
            state: PresenceState::Away,
        }
    );
    assert_eq!(
        decode(r#"{"op":"ping","id":"r8"}"#),
        Request::Ping { id: "r8".into() }
    );
    assert_eq!(
        decode(
            r#"{"op":"hello","id":"r0","version":1,"device_id":"phone-a1",
   "resume":"BwgJCgsMDQ4PEBESExQVFg.ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1-f4CBgoM"}"#
        ),
        Request::Hello {
            id: "r0".into(),
            version: 1,
            device_id: "phone-a1".into(),
            user_agent: String::new(),
            resume: "BwgJCgsMDQ4PEBESExQVFg.ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1-f4CBgoM".into(),
        }
    );
    assert_eq!(
        decode(r#"{"op":"subscribe","id":"s1","topic":"chat.group.eng-team","from_seq":40}"#),
        Request::Subscribe {
            id: "s1".into(),
            topic: "chat.group.eng-team".into(),
            partition: None,
            from_seq: 40,
        }
    );
}

#[test]
fn ops_outside_the_worked_exchange_decode() {
    assert_eq!(
        decode(r#"{"op":"unsubscribe","id":"u","topic":"t","partition":0}"#),
        Request::Unsubscribe {
            id: "u".into(),
            topic: "t".into(),
            partition: Some(0),
        }
    );
    // v1: unsubscribe is never validated; an empty topic decodes.
    assert_eq!(
        decode(r#"{"op":"unsubscribe"}"#),
        Request::Unsubscribe {
            id: String::new(),
            topic: String::new(),
            partition: None,
        }
    );
    assert_eq!(
        decode(r#"{"op":"history","id":"h","topic":"t","partition":3,"from_seq":9,"limit":50}"#),
        Request::History {
            id: "h".into(),
            topic: "t".into(),
            partition: Some(3),
            from_seq: 9,
            limit: 50,
        }
    );
    assert_eq!(
        decode(
            r#"{"op":"publish","id":"p","topic":"orders.eu","key":"o-1","headers":{"a":"b"},"payload":"aGk="}"#
        ),
        Request::Publish {
            id: "p".into(),
            topic: "orders.eu".into(),
            key: "o-1".into(),
            headers: map(&[("a", "b")]),
            payload: b"hi".to_vec(),
        }
    );
    assert_eq!(
        decode(r#"{"op":"send","conversation":"g1","kind":"group"}"#),
        Request::Send {
            id: String::new(),
            conversation: "g1".into(),
            kind: ConversationKind::Group,
            client_msg_id: String::new(),
            payload: Vec::new(),
            headers: BTreeMap::new(),
        }
    );
}

#[test]
fn request_id_and_op_name_the_frame() {
    let r = decode(r#"{"op":"watch_presence","id":"w1"}"#);
    assert_eq!((r.id(), r.op()), ("w1", "watch_presence"));
    let r = decode(r#"{"op":"publish","id":"p1","topic":"x"}"#);
    assert_eq!((r.id(), r.op()), ("p1", "publish"));
}

// ---- §2.13: every server line is produced byte for byte --------------------------------

#[test]
fn welcome_matches_the_worked_exchange() {
    assert_eq!(
        text(|o| welcome(o, "r0", SESSION, TOKEN, false)),
        format!(
            r#"{{"op":"welcome","id":"r0","version":1,"session":"{SESSION}","token":"{TOKEN}"}}"#
        )
    );
    assert_eq!(
        text(|o| welcome(o, "r0", SESSION, TOKEN, true)),
        format!(
            r#"{{"op":"welcome","id":"r0","version":1,"session":"{SESSION}","token":"{TOKEN}","resumed":true}}"#
        )
    );
}

#[test]
fn acks_match_the_worked_exchange() {
    assert_eq!(
        text(|o| subscribe_ack(o, "r1", "chat.inbox.alice", 0, 58, 1, 58)),
        r#"{"op":"ack","id":"r1","topic":"chat.inbox.alice","partition":0,"from_seq":58,"first_seq":1,"next_seq":58}"#
    );
    assert_eq!(
        text(|o| subscribe_ack(o, "r2", "chat.direct.alice:bob", 6, 120, 1, 122)),
        r#"{"op":"ack","id":"r2","topic":"chat.direct.alice:bob","partition":6,"from_seq":120,"first_seq":1,"next_seq":122}"#
    );
    assert_eq!(text(|o| ack(o, "r3")), r#"{"op":"ack","id":"r3"}"#);
    assert_eq!(text(|o| pong(o, "r8")), r#"{"op":"pong","id":"r8"}"#);
}

#[test]
fn subscribe_ack_omits_zero_seqs_but_keeps_partition_zero() {
    let v = parsed(|o| subscribe_ack(o, "", "t", 0, 0, 0, 0));
    assert_eq!(v, json!({"op":"ack","topic":"t","partition":0}));
}

#[test]
fn record_batches_match_the_worked_exchange() {
    let h1 = strings(&[
        ("message_id", "4f1c…e2"),
        ("sender", "bob"),
        ("kind", "direct"),
        ("conversation", "alice:bob"),
        ("client_msg_id", "b-77"),
    ]);
    let h2 = strings(&[
        ("message_id", "9a02…7d"),
        ("sender", "bob"),
        ("kind", "direct"),
        ("conversation", "alice:bob"),
    ]);
    let batch = [
        RecordOut {
            seq: 120,
            timestamp_ns: 1_730_000_000_000_000_000,
            key: b"alice:bob",
            headers: HeadersOut::Text(&h1),
            payload: b"hi alice",
        },
        RecordOut {
            seq: 121,
            timestamp_ns: 1_730_000_001_000_000_000,
            key: b"alice:bob",
            headers: HeadersOut::Text(&h2),
            payload: b"are you there?",
        },
    ];
    let expected = concat!(
        r#"{"op":"record","topic":"chat.direct.alice:bob","partition":6,"records":["#,
        r#"{"topic":"chat.direct.alice:bob","partition":6,"seq":120,"timestamp":1730000000000000000,"key":"alice:bob","#,
        r#""headers":{"message_id":"4f1c…e2","sender":"bob","kind":"direct","conversation":"alice:bob","client_msg_id":"b-77"},"#,
        r#""payload":"aGkgYWxpY2U="},"#,
        r#"{"topic":"chat.direct.alice:bob","partition":6,"seq":121,"timestamp":1730000001000000000,"key":"alice:bob","#,
        r#""headers":{"message_id":"9a02…7d","sender":"bob","kind":"direct","conversation":"alice:bob"},"#,
        r#""payload":"YXJlIHlvdSB0aGVyZT8="}]}"#
    );
    assert_eq!(
        text(|o| records(o, "", "chat.direct.alice:bob", 6, &batch, None)),
        expected
    );

    // The inbox pointer: partition 0 present, no payload.
    let h = strings(&[
        ("pointer", "1"),
        ("message_id", "c37e…01"),
        ("sender", "alice"),
        ("kind", "direct"),
        ("conversation", "alice:bob"),
        ("conv_seq", "122"),
        ("conv_partition", "6"),
        ("client_msg_id", "a-1001"),
    ]);
    let pointer = RecordOut {
        seq: 58,
        timestamp_ns: 1_730_000_002_000_100_000,
        key: b"alice",
        headers: HeadersOut::Text(&h),
        payload: b"",
    };
    let expected = concat!(
        r#"{"op":"record","topic":"chat.inbox.alice","partition":0,"records":[{"topic":"chat.inbox.alice","partition":0,"seq":58,"#,
        r#""timestamp":1730000002000100000,"key":"alice","headers":{"pointer":"1","message_id":"c37e…01","sender":"alice","#,
        r#""kind":"direct","conversation":"alice:bob","conv_seq":"122","conv_partition":"6","client_msg_id":"a-1001"}}]}"#
    );
    assert_eq!(
        text(|o| records(o, "", "chat.inbox.alice", 0, &[pointer], None)),
        expected
    );
}

#[test]
fn sent_signal_presence_and_error_match_the_worked_exchange() {
    let s = SentOut {
        message_id: "c37e…01",
        client_msg_id: "a-1001",
        topic: "chat.direct.alice:bob",
        partition: 6,
        seq: 122,
        timestamp_ns: 1_730_000_002_000_000_000,
        duplicate: false,
    };
    assert_eq!(
        text(|o| sent(o, "r5", &s)),
        concat!(
            r#"{"op":"sent","id":"r5","sent":{"message_id":"c37e…01","client_msg_id":"a-1001","topic":"chat.direct.alice:bob","#,
            r#""partition":6,"seq":122,"timestamp":1730000002000000000}}"#
        )
    );
    let sig = SignalOut {
        topic: "typing.alice:bob",
        sender: "bob",
        kind: "typing",
        headers: HeadersOut::NONE,
        payload: b"",
        at_ns: 1_730_000_003_000_000_000,
    };
    assert_eq!(
        text(|o| signal(o, &sig)),
        r#"{"op":"signal","signal":{"topic":"typing.alice:bob","sender":"bob","kind":"typing","at":1730000003000000000}}"#
    );
    let p = PresenceOut {
        user_id: "bob",
        device_id: "bob-laptop",
        state: PresenceState::Away,
        online: true,
        at_ns: 1_730_000_004_000_000_000,
    };
    assert_eq!(
        text(|o| presence_event(o, &p)),
        r#"{"op":"presence_event","presence":{"user_id":"bob","device_id":"bob-laptop","state":"away","online":true,"at":1730000004000000000}}"#
    );
    assert_eq!(
        text(|o| error(o, "r9", ErrorCode::Forbidden, "access denied", false)),
        r#"{"op":"error","id":"r9","error":{"code":"forbidden","message":"access denied"}}"#
    );
}

#[test]
fn gap_matches_the_retention_example() {
    assert_eq!(
        text(|o| gap(
            o,
            "s1",
            "chat.group.eng-team",
            7,
            500,
            900,
            "requested position was removed by retention"
        )),
        concat!(
            r#"{"op":"gap","id":"s1","topic":"chat.group.eng-team","partition":7,"first_seq":500,"next_seq":900,"#,
            r#""error":{"code":"history_gap","message":"requested position was removed by retention"}}"#
        )
    );
    assert_eq!(
        text(|o| subscribe_ack(o, "s1", "chat.group.eng-team", 7, 500, 500, 900)),
        r#"{"op":"ack","id":"s1","topic":"chat.group.eng-team","partition":7,"from_seq":500,"first_seq":500,"next_seq":900}"#
    );
}
