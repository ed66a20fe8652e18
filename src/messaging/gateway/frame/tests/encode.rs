//! The encoders' presence rules: what is omitted when empty, zero or false.

use super::*;

// ---- presence rules of the encoders ----------------------------------------------------

#[test]
fn record_fields_are_omitted_when_empty() {
    let bare = RecordOut {
        seq: 1,
        timestamp_ns: 0,
        key: b"",
        headers: HeadersOut::NONE,
        payload: b"",
    };
    let v = parsed(|o| records(o, "", "t", 0, &[bare], None));
    assert_eq!(
        v,
        json!({"op":"record","topic":"t","partition":0,
               "records":[{"topic":"t","partition":0,"seq":1,"timestamp":0}]})
    );
}

#[test]
fn history_page_carries_id_and_bounds_and_omits_empty_records() {
    let r = RecordOut {
        seq: 5,
        timestamp_ns: -7,
        key: b"k",
        headers: HeadersOut::NONE,
        payload: b"\x00\xff",
    };
    let v = parsed(|o| records(o, "h1", "t", 2, &[r], Some((3, 9))));
    assert_eq!(
        v,
        json!({"op":"record","id":"h1","topic":"t","partition":2,
               "records":[{"topic":"t","partition":2,"seq":5,"timestamp":-7,"key":"k","payload":"AP8="}],
               "first_seq":3,"next_seq":9})
    );
    let v = parsed(|o| records(o, "h2", "t", 0, &[], Some((1, 1))));
    assert_eq!(
        v,
        json!({"op":"record","id":"h2","topic":"t","partition":0,"first_seq":1,"next_seq":1})
    );
}

#[test]
fn record_key_and_headers_are_written_lossily() {
    let headers = vec![(Bytes::from_static(b"k\xff"), Bytes::from_static(b"v\"\n"))];
    let r = RecordOut {
        seq: 1,
        timestamp_ns: 1,
        key: b"a\xffb",
        headers: HeadersOut::Bytes(&headers),
        payload: b"",
    };
    let v = parsed(|o| records(o, "", "t", 0, &[r], None));
    assert_eq!(v["records"][0]["key"], "a\u{fffd}b");
    assert_eq!(v["records"][0]["headers"], json!({"k\u{fffd}": "v\"\n"}));
}

#[test]
fn records_from_stored_views_and_owned_records_agree() {
    let rec = Record {
        seq: 42,
        timestamp_ns: 1_730_000_000_000_000_000,
        flags: 0,
        epoch: 0,
        key: Bytes::from_static(b"alice:bob"),
        headers: vec![
            (Bytes::from_static(b"sender"), Bytes::from_static(b"bob")),
            (Bytes::from_static(b"kind"), Bytes::from_static(b"direct")),
        ],
        payload: Bytes::from_static(b"hello"),
    };
    let mut stored = Vec::new();
    boltq_io::record::encode(&rec, &mut stored).unwrap();
    let (view, _) = boltq_io::record::decode(&stored).unwrap();
    let from_view = parsed(|o| records(o, "", "t", 1, &[RecordOut::from_view(&view)], None));
    let from_record = parsed(|o| records(o, "", "t", 1, &[RecordOut::from_record(&rec)], None));
    let expected = json!({"op":"record","topic":"t","partition":1,"records":[{
        "topic":"t","partition":1,"seq":42,"timestamp":1_730_000_000_000_000_000i64,"key":"alice:bob",
        "headers":{"sender":"bob","kind":"direct"},"payload":"aGVsbG8="}]});
    assert_eq!(from_view, expected);
    assert_eq!(from_record, expected);
}

#[test]
fn sent_duplicate_only_when_true_and_client_msg_id_only_when_set() {
    let mut s = SentOut {
        message_id: "00112233445566778899aabbccddeeff",
        client_msg_id: "",
        topic: "chat.group.g",
        partition: 0,
        seq: 1,
        timestamp_ns: 2,
        duplicate: false,
    };
    let v = parsed(|o| sent(o, "", &s));
    assert_eq!(
        v,
        json!({"op":"sent","sent":{"message_id":"00112233445566778899aabbccddeeff",
               "topic":"chat.group.g","partition":0,"seq":1,"timestamp":2}})
    );
    s.duplicate = true;
    s.client_msg_id = "c1";
    let v = parsed(|o| sent(o, "x", &s));
    assert_eq!(v["id"], "x");
    assert_eq!(v["sent"]["duplicate"], true);
    assert_eq!(v["sent"]["client_msg_id"], "c1");
}

#[test]
fn a_sent_frame_fits_its_one_reservation() {
    let s = SentOut {
        message_id: "00112233445566778899aabbccddeeff",
        client_msg_id: "client-1",
        topic: "chat.dm.alice~bob",
        partition: u32::MAX,
        seq: u64::MAX,
        timestamp_ns: i64::MIN,
        duplicate: true,
    };
    let mut out = Vec::new();
    sent(&mut out, "request-7", &s);
    let estimate = sent_len_estimate("request-7", &s);
    assert!(out.len() <= estimate, "{} > {estimate}", out.len());
}

#[test]
fn published_shape() {
    let p = PublishedOut {
        topic: "orders.eu",
        partition: 0,
        seq: 17,
        timestamp_ns: 99,
    };
    assert_eq!(
        text(|o| published(o, "p1", &p)),
        r#"{"op":"published","id":"p1","published":{"topic":"orders.eu","partition":0,"seq":17,"timestamp":99}}"#
    );
}

#[test]
fn error_retryable_only_when_true_and_id_only_when_set() {
    let v = parsed(|o| error(o, "", ErrorCode::Internal, "read failed", true));
    assert_eq!(
        v,
        json!({"op":"error","error":{"code":"internal","message":"read failed","retryable":true}})
    );
    let v = parsed(|o| {
        decode_error(
            o,
            &DecodeError {
                id: "q".into(),
                message: "bad".into(),
            },
        )
    });
    assert_eq!(
        v,
        json!({"op":"error","id":"q","error":{"code":"bad_request","message":"bad"}})
    );
}

#[test]
fn every_v1_error_code_has_its_wire_name() {
    let names: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(
        names,
        [
            "bad_request",
            "unauthenticated",
            "forbidden",
            "not_found",
            "rate_limited",
            "conflict",
            "internal",
            "unsupported_version",
            "history_gap"
        ]
    );
}

#[test]
fn signal_with_headers_and_payload_and_presence_without_device() {
    let h = strings(&[("a", "1")]);
    let sig = SignalOut {
        topic: "typing.c",
        sender: "u",
        kind: "",
        headers: HeadersOut::Text(&h),
        payload: b"x",
        at_ns: -1,
    };
    assert_eq!(
        parsed(|o| signal(o, &sig)),
        json!({"op":"signal","signal":{"topic":"typing.c","sender":"u","headers":{"a":"1"},"payload":"eA==","at":-1}})
    );
    let p = PresenceOut {
        user_id: "u",
        device_id: "",
        state: PresenceState::Offline,
        online: false,
        at_ns: 0,
    };
    assert_eq!(
        parsed(|o| presence_event(o, &p)),
        json!({"op":"presence_event","presence":{"user_id":"u","state":"offline","online":false,"at":0}})
    );
}

#[test]
fn encoders_append_without_touching_earlier_bytes() {
    let mut out = b"prefix".to_vec();
    ack(&mut out, "a");
    pong(&mut out, "b");
    assert_eq!(out, br#"prefix{"op":"ack","id":"a"}{"op":"pong","id":"b"}"#);
}
