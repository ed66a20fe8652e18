//! The decoder: base64 variants, every limit, types, defaults and semantic checks.

use super::*;

// ---- base64 ------------------------------------------------------------------------------

fn send_payload(b64: &str) -> Result<Vec<u8>, DecodeError> {
    let frame = json!({"op":"send","id":"b","conversation":"c","payload":b64}).to_string();
    decode_request(frame.as_bytes()).map(|r| match r {
        Request::Send { payload, .. } => payload,
        other => panic!("{other:?}"),
    })
}

#[test]
fn payload_accepts_padded_unpadded_and_url_safe() {
    let bytes = vec![0xfb, 0xff, 0xfe, 0x00, 0x3e];
    for variant in ["+//+AD4=", "+//+AD4", "-__-AD4=", "-__-AD4", "+//+\r\nAD4="] {
        assert_eq!(send_payload(variant).unwrap(), bytes, "{variant}");
    }
    assert_eq!(send_payload("").unwrap(), Vec::<u8>::new());
    // Non-zero trailing bits, tolerated like v1.
    assert_eq!(send_payload("eWVzIR==").unwrap(), b"yes!");
}

#[test]
fn payload_rejects_bad_base64_naming_the_field() {
    for bad in ["+_//", "a", "!!!!", "eWVz=IQ==", "eW VzIQ=="] {
        let e = send_payload(bad).unwrap_err();
        assert!(e.message.contains("payload"), "{bad}: {}", e.message);
        assert_eq!(e.id, "b");
    }
    let e = decode_err(r#"{"op":"send","conversation":"c","payload":[1]}"#);
    assert!(e.message.contains("payload"));
}

#[test]
fn payload_is_always_emitted_standard_padded() {
    let r = RecordOut {
        seq: 1,
        timestamp_ns: 1,
        key: b"",
        headers: HeadersOut::NONE,
        payload: &[0xfb, 0xff, 0xfe, 0x00, 0x3e],
    };
    let v = parsed(|o| records(o, "", "t", 0, &[r], None));
    assert_eq!(v["records"][0]["payload"], "+//+AD4=");
}

// ---- limits --------------------------------------------------------------------------------

/// `(frame with the value at the limit, frame one byte over, field, limit)`.
fn string_limit_cases() -> Vec<(Value, Value, &'static str, usize)> {
    let s = |n: usize| "x".repeat(n);
    let case = |base: Value, field: &'static str, max: usize| {
        let mut ok = base.clone();
        ok[field] = Value::String(s(max));
        let mut over = base;
        over[field] = Value::String(s(max + 1));
        (ok, over, field, max)
    };
    vec![
        case(json!({"op":"ping"}), "id", ID_BYTES_MAX),
        case(json!({"op":"subscribe"}), "topic", TOPIC_BYTES_MAX),
        case(json!({"op":"history"}), "topic", TOPIC_BYTES_MAX),
        case(json!({"op":"unsubscribe"}), "topic", TOPIC_BYTES_MAX),
        case(json!({"op":"commit","seq":1}), "topic", TOPIC_BYTES_MAX),
        case(json!({"op":"publish"}), "topic", TOPIC_BYTES_MAX),
        case(json!({"op":"publish","topic":"t"}), "key", KEY_BYTES_MAX),
        case(json!({"op":"send"}), "conversation", CONVERSATION_BYTES_MAX),
        case(
            json!({"op":"typing"}),
            "conversation",
            CONVERSATION_BYTES_MAX,
        ),
        case(
            json!({"op":"send","conversation":"c"}),
            "client_msg_id",
            CLIENT_MSG_ID_BYTES_MAX,
        ),
        case(json!({"op":"hello"}), "device_id", DEVICE_ID_BYTES_MAX),
        case(json!({"op":"hello"}), "user_agent", USER_AGENT_BYTES_MAX),
        case(json!({"op":"hello"}), "resume", RESUME_BYTES_MAX),
    ]
}

#[test]
fn every_string_limit_is_enforced_and_named() {
    for (ok, over, field, max) in string_limit_cases() {
        decode(&ok.to_string());
        let e = decode_err(&over.to_string());
        assert!(
            e.message.contains(field) && e.message.contains(&max.to_string()),
            "{field}: {}",
            e.message
        );
    }
}

#[test]
fn an_overlong_id_is_refused_and_not_echoed() {
    let e = decode_err(&json!({"op":"ping","id":"i".repeat(ID_BYTES_MAX + 1)}).to_string());
    assert_eq!(e.id, "");
    assert!(e.message.contains("id"));
}

fn headers_of(n: usize, value_len: usize) -> Value {
    let m: Map<String, Value> = (0..n)
        .map(|i| (format!("h{i:02}"), Value::String("v".repeat(value_len))))
        .collect();
    Value::Object(m)
}

#[test]
fn header_limits_are_enforced_and_named() {
    for op in ["send", "publish"] {
        let frame = |h: Value| json!({"op":op,"conversation":"c","topic":"t","headers":h});
        // 32 pairs of 3 + 253 bytes = 8192 bytes: exactly at both limits.
        let at_limit = frame(headers_of(HEADERS_PAIRS_MAX, 253)).to_string();
        match decode(&at_limit) {
            Request::Send { headers, .. } | Request::Publish { headers, .. } => {
                assert_eq!(headers.len(), HEADERS_PAIRS_MAX);
                let total: usize = headers.iter().map(|(k, v)| k.len() + v.len()).sum();
                assert_eq!(total, HEADERS_BYTES_MAX);
            }
            other => panic!("{other:?}"),
        }
        let e = decode_err(&frame(headers_of(HEADERS_PAIRS_MAX + 1, 1)).to_string());
        assert!(
            e.message.contains("headers") && e.message.contains("32"),
            "{e}"
        );
        let e = decode_err(&frame(headers_of(HEADERS_PAIRS_MAX, 254)).to_string());
        assert!(
            e.message.contains("headers") && e.message.contains("8192"),
            "{e}"
        );
        let e = decode_err(&frame(json!({"": "v"})).to_string());
        assert!(
            e.message.contains("headers") && e.message.contains("empty"),
            "{e}"
        );
        let e = decode_err(&frame(json!({"a": 1})).to_string());
        assert!(e.message.contains("headers"), "{e}");
        let e = decode_err(&frame(json!(["a"])).to_string());
        assert!(e.message.contains("headers"), "{e}");
    }
}

#[test]
fn users_limits_are_enforced_and_named() {
    let users = |n: usize, len: usize| -> Vec<String> { (0..n).map(|_| "u".repeat(len)).collect() };
    match decode(&json!({"op":"watch_presence","users":users(USERS_MAX, 3)}).to_string()) {
        Request::WatchPresence { users, .. } => assert_eq!(users.len(), USERS_MAX),
        other => panic!("{other:?}"),
    }
    let e = decode_err(&json!({"op":"watch_presence","users":users(USERS_MAX + 1, 1)}).to_string());
    assert!(
        e.message.contains("users") && e.message.contains("1000"),
        "{e}"
    );
    decode(&json!({"op":"watch_presence","users":users(1, USER_ID_BYTES_MAX)}).to_string());
    let e = decode_err(
        &json!({"op":"watch_presence","users":users(1, USER_ID_BYTES_MAX + 1)}).to_string(),
    );
    assert!(
        e.message.contains("users") && e.message.contains("256"),
        "{e}"
    );
    let e = decode_err(r#"{"op":"watch_presence","users":["a",2]}"#);
    assert!(e.message.contains("users"), "{e}");
    let e = decode_err(r#"{"op":"watch_presence","users":"a"}"#);
    assert!(e.message.contains("users"), "{e}");
}

// ---- types, defaults and semantic checks ----------------------------------------------------

#[test]
fn wrong_types_name_the_field_and_echo_the_id() {
    let cases = [
        (r#"{"op":"hello","id":"i","version":"1"}"#, "version"),
        (r#"{"op":"hello","id":"i","version":1.5}"#, "version"),
        (r#"{"op":"hello","id":"i","device_id":7}"#, "device_id"),
        (r#"{"op":"hello","id":"i","user_agent":{}}"#, "user_agent"),
        (r#"{"op":"hello","id":"i","resume":true}"#, "resume"),
        (r#"{"op":"subscribe","id":"i","topic":["t"]}"#, "topic"),
        (
            r#"{"op":"subscribe","id":"i","topic":"t","partition":"1"}"#,
            "partition",
        ),
        (
            r#"{"op":"subscribe","id":"i","topic":"t","partition":1.0}"#,
            "partition",
        ),
        (
            r#"{"op":"subscribe","id":"i","topic":"t","from_seq":"1"}"#,
            "from_seq",
        ),
        (
            r#"{"op":"subscribe","id":"i","topic":"t","from_seq":-1}"#,
            "from_seq",
        ),
        (
            r#"{"op":"subscribe","id":"i","topic":"t","from_seq":1e3}"#,
            "from_seq",
        ),
        (
            r#"{"op":"history","id":"i","topic":"t","limit":"5"}"#,
            "limit",
        ),
        (
            r#"{"op":"history","id":"i","topic":"t","limit":2.5}"#,
            "limit",
        ),
        (r#"{"op":"commit","id":"i","topic":"t","seq":-3}"#, "seq"),
        (
            r#"{"op":"typing","id":"i","conversation":"c","typing":"yes"}"#,
            "typing",
        ),
        (
            r#"{"op":"send","id":"i","conversation":"c","kind":1}"#,
            "kind",
        ),
        (
            r#"{"op":"send","id":"i","conversation":"c","client_msg_id":1}"#,
            "client_msg_id",
        ),
        (r#"{"op":"presence","id":"i","state":1}"#, "state"),
        (r#"{"op":"publish","id":"i","topic":"t","key":5}"#, "key"),
    ];
    for (frame, field) in cases {
        let e = decode_err(frame);
        assert!(e.message.contains(field), "{frame}: {}", e.message);
        assert_eq!(e.id, "i", "{frame}");
    }
}

#[test]
fn partition_must_be_a_non_negative_int32() {
    let e = decode_err(r#"{"op":"subscribe","id":"n","topic":"t","partition":-1}"#);
    assert!(e.message.contains("partition") && e.message.contains("negative"));
    assert_eq!(e.id, "n");
    let e = decode_err(r#"{"op":"history","topic":"t","partition":2147483648}"#);
    assert!(e.message.contains("partition") && e.message.contains("2147483647"));
    match decode(r#"{"op":"commit","topic":"t","partition":2147483647,"seq":1}"#) {
        Request::Commit { partition, .. } => assert_eq!(partition, Some(i32::MAX as u32)),
        other => panic!("{other:?}"),
    }
    match decode(r#"{"op":"subscribe","topic":"t","partition":null}"#) {
        Request::Subscribe { partition, .. } => assert_eq!(partition, None),
        other => panic!("{other:?}"),
    }
}

#[test]
fn sequences_take_the_full_u64_range() {
    match decode(r#"{"op":"subscribe","topic":"t","from_seq":18446744073709551615}"#) {
        Request::Subscribe { from_seq, .. } => assert_eq!(from_seq, u64::MAX),
        other => panic!("{other:?}"),
    }
    let e = decode_err(r#"{"op":"subscribe","topic":"t","from_seq":18446744073709551616}"#);
    assert!(e.message.contains("from_seq"));
}

#[test]
fn history_limit_negative_means_default_and_large_saturates() {
    let limit_of = |s: &str| match decode(s) {
        Request::History { limit, .. } => limit,
        other => panic!("{other:?}"),
    };
    assert_eq!(limit_of(r#"{"op":"history","topic":"t","limit":-5}"#), 0);
    assert_eq!(limit_of(r#"{"op":"history","topic":"t"}"#), 0);
    assert_eq!(
        limit_of(r#"{"op":"history","topic":"t","limit":99999999999}"#),
        u32::MAX
    );
}

#[test]
fn hello_version_is_passed_through_for_the_handler_to_judge() {
    for (frame, want) in [
        (r#"{"op":"hello"}"#, 0),
        (r#"{"op":"hello","version":2}"#, 2),
        (r#"{"op":"hello","version":-1}"#, -1),
    ] {
        match decode(frame) {
            Request::Hello { version, .. } => assert_eq!(version, want, "{frame}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn kind_absent_is_direct_and_unknown_kinds_are_refused() {
    let kind_of = |k: &str| {
        let frame = format!(r#"{{"op":"send","id":"k","conversation":"c"{k}}}"#);
        decode_request(frame.as_bytes()).map(|r| match r {
            Request::Send { kind, .. } => kind,
            other => panic!("{other:?}"),
        })
    };
    assert_eq!(kind_of(""), Ok(ConversationKind::Direct));
    assert_eq!(kind_of(r#","kind":null"#), Ok(ConversationKind::Direct));
    assert_eq!(kind_of(r#","kind":"""#), Ok(ConversationKind::Direct));
    assert_eq!(kind_of(r#","kind":"direct""#), Ok(ConversationKind::Direct));
    assert_eq!(kind_of(r#","kind":"group""#), Ok(ConversationKind::Group));
    for bad in [r#","kind":"Group""#, r#","kind":"channel""#] {
        let e = kind_of(bad).unwrap_err();
        assert!(e.message.contains("kind"), "{}", e.message);
        assert_eq!(e.id, "k");
    }
}

#[test]
fn typing_absent_or_null_means_true() {
    for frame in [
        r#"{"op":"typing","conversation":"c"}"#,
        r#"{"op":"typing","conversation":"c","typing":null}"#,
        r#"{"op":"typing","conversation":"c","typing":true}"#,
    ] {
        match decode(frame) {
            Request::Typing { typing, .. } => assert!(typing, "{frame}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn presence_state_is_validated() {
    for (s, want) in [
        ("online", PresenceState::Online),
        ("away", PresenceState::Away),
        ("offline", PresenceState::Offline),
    ] {
        let frame = format!(r#"{{"op":"presence","state":"{s}"}}"#);
        assert_eq!(
            decode(&frame),
            Request::Presence {
                id: String::new(),
                state: want
            }
        );
    }
    for frame in [
        r#"{"op":"presence","id":"p","state":"Online"}"#,
        r#"{"op":"presence","id":"p","state":"busy"}"#,
        r#"{"op":"presence","id":"p"}"#,
    ] {
        let e = decode_err(frame);
        assert_eq!(e.message, "state must be online, away or offline");
        assert_eq!(e.id, "p");
    }
}

#[test]
fn required_fields_use_v1_messages() {
    for (frame, msg) in [
        (r#"{"op":"subscribe","id":"q"}"#, "topic is required"),
        (
            r#"{"op":"subscribe","id":"q","topic":""}"#,
            "topic is required",
        ),
        (r#"{"op":"history","id":"q"}"#, "topic is required"),
        (r#"{"op":"publish","id":"q"}"#, "topic is required"),
        (r#"{"op":"send","id":"q"}"#, "conversation is required"),
        (r#"{"op":"typing","id":"q"}"#, "conversation is required"),
        (
            r#"{"op":"commit","id":"q","topic":"t"}"#,
            "topic and seq are required",
        ),
        (
            r#"{"op":"commit","id":"q","seq":4}"#,
            "topic and seq are required",
        ),
        (
            r#"{"op":"commit","id":"q","topic":"t","seq":0}"#,
            "topic and seq are required",
        ),
    ] {
        let e = decode_err(frame);
        assert_eq!((e.id.as_str(), e.message.as_str()), ("q", msg), "{frame}");
    }
}

#[test]
fn unknown_and_missing_ops_are_errors_that_echo_the_id() {
    let e = decode_err(r#"{"op":"subscribe_all","id":"z"}"#);
    assert_eq!(e.id, "z");
    assert!(e.message.starts_with("unknown op") && e.message.contains("subscribe_all"));
    let e = decode_err(r#"{"op":"HELLO","id":"z"}"#);
    assert!(e.message.starts_with("unknown op"));
    let e = decode_err(&json!({"op":"x".repeat(10_000),"id":"z"}).to_string());
    assert!(
        e.message.len() < QUOTE_BYTES_MAX + 32,
        "{}",
        e.message.len()
    );
    let e = decode_err(r#"{"id":"z"}"#);
    assert_eq!((e.id.as_str(), e.message.as_str()), ("z", "op is required"));
    let e = decode_err(r#"{"id":"z","op":5}"#);
    assert_eq!(e.message, "op must be a string");
}

#[test]
fn unreadable_frames_have_no_id() {
    for frame in [
        "",
        "not json",
        "[1,2]",
        "\"op\"",
        r#"{"op":"ping","id":"a"} x"#,
        "{\"op\":\"ping\",\"id\":5}",
    ] {
        let e = decode_err(frame);
        assert_eq!(e.id, "", "{frame}");
    }
    assert_eq!(decode_err("[]").message, "a frame must be a JSON object");
    // Binary garbage, as a binary WebSocket message.
    let e = decode_request(&[0xff, 0x00, 0x7b, 0x80]).unwrap_err();
    assert!(e.message.contains("invalid JSON"));
}

#[test]
fn unknown_fields_are_ignored_and_null_is_absent() {
    assert_eq!(
        decode(
            r#"{"op":"ping","id":"r","extra":{"deep":[1,{"x":null}]},"token":"t","OP":"hello"}"#
        ),
        Request::Ping { id: "r".into() }
    );
    assert_eq!(
        decode(r#"{"op":"ping","id":null}"#),
        Request::Ping { id: String::new() }
    );
    assert_eq!(
        decode(
            r#"{"op":"send","conversation":"c","payload":null,"headers":null,"client_msg_id":null}"#
        ),
        Request::Send {
            id: String::new(),
            conversation: "c".into(),
            kind: ConversationKind::Direct,
            client_msg_id: String::new(),
            payload: Vec::new(),
            headers: BTreeMap::new(),
        }
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let deep = format!(
        r#"{{"op":"ping","x":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let e = decode_err(&deep);
    assert!(e.message.contains("invalid JSON"));
}
