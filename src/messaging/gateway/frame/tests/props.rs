//! Property tests: random requests round-trip, random bytes never panic.

use super::*;

// ---- property tests ---------------------------------------------------------------------------

/// Encodes a request the way a client might: defaults randomly omitted, `null`, or
/// explicit; payload in a random base64 variant; unknown fields sprinkled in.
fn encode_for_test(req: &Request, rng: &mut Rng) -> Vec<u8> {
    let payload_variant = rng.below(4);
    let mut m = Map::new();
    m.insert("op".into(), json!(req.op()));
    let mut put = |m: &mut Map<String, Value>, name: &str, v: Value, is_default: bool| {
        if !is_default {
            m.insert(name.into(), v);
            return;
        }
        match rng.below(3) {
            0 => {}
            1 => {
                m.insert(name.into(), Value::Null);
            }
            _ => {
                m.insert(name.into(), v);
            }
        }
    };
    put(&mut m, "id", json!(req.id()), req.id().is_empty());
    let b64 = |p: &[u8]| -> String {
        use base64::engine::general_purpose::*;
        match payload_variant {
            0 => STANDARD.encode(p),
            1 => STANDARD_NO_PAD.encode(p),
            2 => URL_SAFE.encode(p),
            _ => URL_SAFE_NO_PAD.encode(p),
        }
    };
    match req {
        Request::Hello {
            version,
            device_id,
            user_agent,
            resume,
            ..
        } => {
            put(&mut m, "version", json!(version), *version == 0);
            put(&mut m, "device_id", json!(device_id), device_id.is_empty());
            put(
                &mut m,
                "user_agent",
                json!(user_agent),
                user_agent.is_empty(),
            );
            put(&mut m, "resume", json!(resume), resume.is_empty());
        }
        Request::Subscribe {
            topic,
            partition,
            from_seq,
            ..
        } => {
            put(&mut m, "topic", json!(topic), false);
            if let Some(p) = partition {
                put(&mut m, "partition", json!(p), false);
            }
            put(&mut m, "from_seq", json!(from_seq), *from_seq == 0);
        }
        Request::Unsubscribe {
            topic, partition, ..
        } => {
            put(&mut m, "topic", json!(topic), topic.is_empty());
            if let Some(p) = partition {
                put(&mut m, "partition", json!(p), false);
            }
        }
        Request::History {
            topic,
            partition,
            from_seq,
            limit,
            ..
        } => {
            put(&mut m, "topic", json!(topic), false);
            if let Some(p) = partition {
                put(&mut m, "partition", json!(p), false);
            }
            put(&mut m, "from_seq", json!(from_seq), *from_seq == 0);
            put(&mut m, "limit", json!(limit), *limit == 0);
        }
        Request::Send {
            conversation,
            kind,
            client_msg_id,
            payload,
            headers,
            ..
        } => {
            put(&mut m, "conversation", json!(conversation), false);
            put(
                &mut m,
                "kind",
                json!(kind.as_str()),
                *kind == ConversationKind::Direct,
            );
            put(
                &mut m,
                "client_msg_id",
                json!(client_msg_id),
                client_msg_id.is_empty(),
            );
            put(&mut m, "payload", json!(b64(payload)), payload.is_empty());
            put(&mut m, "headers", json!(headers), headers.is_empty());
        }
        Request::Commit {
            topic,
            partition,
            seq,
            ..
        } => {
            put(&mut m, "topic", json!(topic), false);
            if let Some(p) = partition {
                put(&mut m, "partition", json!(p), false);
            }
            put(&mut m, "seq", json!(seq), false);
        }
        Request::Typing {
            conversation,
            typing,
            ..
        } => {
            put(&mut m, "conversation", json!(conversation), false);
            put(&mut m, "typing", json!(typing), *typing);
        }
        Request::Presence { state, .. } => {
            put(&mut m, "state", json!(state.as_str()), false);
        }
        Request::WatchPresence { users, .. } => {
            put(&mut m, "users", json!(users), users.is_empty());
        }
        Request::Ping { .. } => {}
        Request::Publish {
            topic,
            key,
            headers,
            payload,
            ..
        } => {
            put(&mut m, "topic", json!(topic), false);
            put(&mut m, "key", json!(key), key.is_empty());
            put(&mut m, "headers", json!(headers), headers.is_empty());
            put(&mut m, "payload", json!(b64(payload)), payload.is_empty());
        }
    }
    if rng.below(4) == 0 {
        m.insert(
            "extra".into(),
            json!({"nested": [1, "two", null, {"k": false}]}),
        );
    }
    if rng.below(4) == 0 {
        m.insert("Topic".into(), json!(12));
    }
    serde_json::to_vec(&Value::Object(m)).unwrap()
}

fn random_nonempty(rng: &mut Rng, max: usize) -> String {
    loop {
        let s = random_string(rng, max);
        if !s.is_empty() {
            return s;
        }
    }
}

fn random_u64(rng: &mut Rng) -> u64 {
    match rng.below(4) {
        0 => 0,
        1 => u64::MAX - rng.below(2),
        _ => rng.below(1_000_000),
    }
}

fn random_partition(rng: &mut Rng) -> Option<u32> {
    match rng.below(4) {
        0 => None,
        1 => Some(i32::MAX as u32),
        _ => Some(rng.below(64) as u32),
    }
}

fn random_headers(rng: &mut Rng) -> BTreeMap<String, String> {
    let mut headers = BTreeMap::new();
    let mut total = 0;
    for _ in 0..rng.below(HEADERS_PAIRS_MAX as u64 + 1) {
        let k = random_nonempty(rng, 32);
        let v = random_string(rng, 300);
        if total + k.len() + v.len() > HEADERS_BYTES_MAX {
            break;
        }
        if let Some(old) = headers.insert(k.clone(), v.clone()) {
            total -= k.len() + old.len();
        }
        total += k.len() + v.len();
    }
    headers
}

fn random_payload(rng: &mut Rng) -> Vec<u8> {
    let n = if rng.below(8) == 0 {
        5000
    } else {
        rng.below(40)
    };
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

fn random_request(rng: &mut Rng) -> Request {
    let id = random_string(rng, ID_BYTES_MAX);
    match rng.below(11) {
        0 => Request::Hello {
            id,
            version: rng.below(3) as i64 - 1,
            device_id: random_string(rng, DEVICE_ID_BYTES_MAX),
            user_agent: random_string(rng, USER_AGENT_BYTES_MAX),
            resume: random_string(rng, RESUME_BYTES_MAX),
        },
        1 => Request::Subscribe {
            id,
            topic: random_nonempty(rng, TOPIC_BYTES_MAX),
            partition: random_partition(rng),
            from_seq: random_u64(rng),
        },
        2 => Request::Unsubscribe {
            id,
            topic: random_string(rng, TOPIC_BYTES_MAX),
            partition: random_partition(rng),
        },
        3 => Request::History {
            id,
            topic: random_nonempty(rng, TOPIC_BYTES_MAX),
            partition: random_partition(rng),
            from_seq: random_u64(rng),
            limit: rng.below(500) as u32,
        },
        4 => Request::Send {
            id,
            conversation: random_nonempty(rng, CONVERSATION_BYTES_MAX),
            kind: if rng.below(2) == 0 {
                ConversationKind::Direct
            } else {
                ConversationKind::Group
            },
            client_msg_id: random_string(rng, CLIENT_MSG_ID_BYTES_MAX),
            payload: random_payload(rng),
            headers: random_headers(rng),
        },
        5 => Request::Commit {
            id,
            topic: random_nonempty(rng, TOPIC_BYTES_MAX),
            partition: random_partition(rng),
            seq: random_u64(rng).max(1),
        },
        6 => Request::Typing {
            id,
            conversation: random_nonempty(rng, CONVERSATION_BYTES_MAX),
            typing: rng.below(2) == 0,
        },
        7 => Request::Presence {
            id,
            state: [
                PresenceState::Online,
                PresenceState::Away,
                PresenceState::Offline,
            ][rng.below(3) as usize],
        },
        8 => Request::WatchPresence {
            id,
            users: (0..rng.below(20))
                .map(|_| random_string(rng, USER_ID_BYTES_MAX))
                .collect(),
        },
        9 => Request::Ping { id },
        _ => Request::Publish {
            id,
            topic: random_nonempty(rng, TOPIC_BYTES_MAX),
            key: random_string(rng, KEY_BYTES_MAX),
            headers: random_headers(rng),
            payload: random_payload(rng),
        },
    }
}

#[test]
fn random_requests_round_trip() {
    let mut rng = Rng::new(0x5eed_0002);
    for i in 0..3000 {
        let req = random_request(&mut rng);
        let bytes = encode_for_test(&req, &mut rng);
        match decode_request(&bytes) {
            Ok(got) => assert_eq!(got, req, "case {i}: {}", String::from_utf8_lossy(&bytes)),
            Err(e) => panic!("case {i}: {e}: {}", String::from_utf8_lossy(&bytes)),
        }
    }
}

/// What every decode result must satisfy, whatever the input.
fn check_decode_result(input: &[u8]) {
    match decode_request(input) {
        Err(e) => {
            assert!(!e.message.is_empty());
            assert!(e.id.len() <= ID_BYTES_MAX);
            let v = parsed(|o| decode_error(o, &e));
            assert_eq!(v["error"]["code"], "bad_request");
        }
        Ok(req) => {
            assert!(req.id().len() <= ID_BYTES_MAX);
            match &req {
                Request::Send { headers, .. } | Request::Publish { headers, .. } => {
                    assert!(headers.len() <= HEADERS_PAIRS_MAX);
                    assert!(headers.keys().all(|k| !k.is_empty()));
                }
                Request::WatchPresence { users, .. } => assert!(users.len() <= USERS_MAX),
                Request::Subscribe {
                    topic, partition, ..
                }
                | Request::History {
                    topic, partition, ..
                }
                | Request::Commit {
                    topic, partition, ..
                } => {
                    assert!(!topic.is_empty() && topic.len() <= TOPIC_BYTES_MAX);
                    assert!(partition.is_none_or(|p| p <= i32::MAX as u32));
                }
                _ => {}
            }
        }
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng::new(0x5eed_0003);
    let alphabet = b"{}[]\":,0123456789-.eEtrufalsn \\op";
    for _ in 0..20_000 {
        let len = rng.below(64) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                if rng.below(2) == 0 {
                    rng.next_u64() as u8
                } else {
                    alphabet[rng.below(alphabet.len() as u64) as usize]
                }
            })
            .collect();
        check_decode_result(&bytes);
    }
}

const WORKED_REQUESTS: &[&str] = &[
    r#"{"op":"hello","id":"r0","version":1,"device_id":"phone-a1","user_agent":"Demo/3.0 iOS"}"#,
    r#"{"op":"subscribe","id":"r1","topic":"chat.inbox.alice"}"#,
    r#"{"op":"typing","id":"r3","conversation":"alice:bob","typing":false}"#,
    r#"{"op":"watch_presence","id":"r4","users":["bob"]}"#,
    r#"{"op":"send","id":"r5","kind":"direct","conversation":"alice:bob","client_msg_id":"a-1001","payload":"eWVzIQ==","headers":{"content_type":"text/plain"}}"#,
    r#"{"op":"commit","id":"r6","topic":"chat.direct.alice:bob","partition":6,"seq":123}"#,
    r#"{"op":"presence","id":"r7","state":"away"}"#,
    r#"{"op":"ping","id":"r8"}"#,
    r#"{"op":"history","id":"h","topic":"t","partition":3,"from_seq":9,"limit":50}"#,
    r#"{"op":"publish","id":"p","topic":"o","key":"k","headers":{"a":"b"},"payload":"aGk="}"#,
];

fn mutate(rng: &mut Rng, mut b: Vec<u8>) -> Vec<u8> {
    const SPECIAL: &[u8] = b"\"{}[],:-0n\\e.9 \xff\x00";
    for _ in 0..=rng.below(4) {
        let at = rng.below(b.len() as u64 + 1) as usize;
        match rng.below(6) {
            0 if at < b.len() => b[at] ^= 1 << rng.below(8),
            1 => b.insert(at, SPECIAL[rng.below(SPECIAL.len() as u64) as usize]),
            2 if at < b.len() => {
                let end = (at + 1 + rng.below(8) as usize).min(b.len());
                b.drain(at..end);
            }
            3 => b.truncate(at),
            4 if at < b.len() => {
                let end = (at + 1 + rng.below(16) as usize).min(b.len());
                let chunk = b[at..end].to_vec();
                b.splice(at..at, chunk);
            }
            _ if at < b.len() => b[at] = SPECIAL[rng.below(SPECIAL.len() as u64) as usize],
            _ => {}
        }
    }
    b
}

#[test]
fn mutated_valid_frames_never_panic() {
    let mut rng = Rng::new(0x5eed_0004);
    for i in 0..20_000 {
        let base = if i % 2 == 0 {
            WORKED_REQUESTS[rng.below(WORKED_REQUESTS.len() as u64) as usize]
                .as_bytes()
                .to_vec()
        } else {
            let req = random_request(&mut rng);
            encode_for_test(&req, &mut rng)
        };
        check_decode_result(&mutate(&mut rng, base));
    }
}

/// key, headers, payload, seq, timestamp.
type OwnedRecord = (Vec<u8>, Vec<(String, String)>, Vec<u8>, u64, i64);

#[test]
fn random_record_frames_parse_back_to_their_records() {
    let mut rng = Rng::new(0x5eed_0005);
    for _ in 0..500 {
        let topic = random_nonempty(&mut rng, 64);
        let partition = rng.below(1 << 31) as u32;
        let n = rng.below(5) as usize;
        let owned: Vec<OwnedRecord> = (0..n)
            .map(|_| {
                let key = random_string(&mut rng, 16).into_bytes();
                let headers: Vec<(String, String)> = random_headers(&mut rng).into_iter().collect();
                (
                    key,
                    headers,
                    random_payload(&mut rng),
                    rng.next_u64(),
                    rng.next_u64() as i64,
                )
            })
            .collect();
        let batch: Vec<RecordOut<'_>> = owned
            .iter()
            .map(|(k, h, p, seq, ts)| RecordOut {
                seq: *seq,
                timestamp_ns: *ts,
                key: k,
                headers: HeadersOut::Text(h),
                payload: p,
            })
            .collect();
        let id = random_string(&mut rng, ID_BYTES_MAX);
        let v = parsed(|o| records(o, &id, &topic, partition, &batch, None));
        assert_eq!(v["op"], "record");
        assert_eq!(v["id"].as_str().unwrap_or(""), id);
        assert_eq!(v["topic"], topic.as_str());
        assert_eq!(v["partition"], partition);
        let got = v["records"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        assert_eq!(got.len(), n);
        for (r, (k, h, p, seq, ts)) in got.iter().zip(&owned) {
            assert_eq!(r["seq"], *seq);
            assert_eq!(r["timestamp"], *ts);
            assert_eq!(r["key"].as_str().unwrap_or("").as_bytes(), &k[..]);
            let headers: BTreeMap<String, String> = h.iter().cloned().collect();
            let got_headers: BTreeMap<String, String> =
                serde_json::from_value(r.get("headers").cloned().unwrap_or(json!({}))).unwrap();
            assert_eq!(got_headers, headers);
            let b64 = r["payload"].as_str().unwrap_or("");
            assert_eq!(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap(),
                *p
            );
        }
    }
}
