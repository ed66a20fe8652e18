use super::*;
use crate::queue::message::MessageExtras;
use crate::queue::protocol::request::{RequestError, NAME_BYTES_MAX};
use bytes::Bytes;

const ID_HEX: &str = "9f86d081884c7d659a2feaa0c55ad015";

fn id() -> MessageId {
    MessageId::parse(ID_HEX).unwrap()
}

fn msg(topic: &str, payload: &str) -> Message {
    Message {
        extras: None,
        id: id(),
        topic: topic.into(),
        payload: Bytes::copy_from_slice(payload.as_bytes()),
        timestamp_ns: 1_700_000_000_123_456_789,
        retry: 2,
        max_retry: 5,
        priority: 4,
        delay_ns: 7,
        ttl_ns: 8,
        deliver_at_ns: 9,
        expires_at_ns: 10,
    }
    .with_extras(MessageExtras {
        headers: BTreeMap::new(),
        exchange: "ex".into(),
        routing_key: "rk".into(),
    })
}

/// Decodes the single frame in `out`: (status, payload text).
fn one_frame(out: &[u8]) -> (u8, String) {
    let (f, used) = frame::decode(out).unwrap().expect("a whole frame");
    assert_eq!(used, out.len(), "exactly one frame");
    (f.code, String::from_utf8(f.payload.to_vec()).unwrap())
}

fn encoded(write: impl FnOnce(&mut Vec<u8>)) -> (u8, String) {
    let mut out = Vec::new();
    write(&mut out);
    one_frame(&out)
}

fn ok_json(write: impl FnOnce(&mut Vec<u8>)) -> String {
    let (code, text) = encoded(write);
    assert_eq!(code, status::OK, "{text}");
    text
}

#[test]
fn spec_worked_example_replies() {
    let mut out = Vec::new();
    publish_ok(&id(), "jobs", None, &mut out);
    let want: Vec<u8> = "00 38 00 00 00 7b 22 69 64 22 3a 22 39 66 38 36 64 30 38 31 38 38 34 63 37 64 \
                         36 35 39 61 32 66 65 61 61 30 63 35 35 61 64 30 31 35 22 2c 22 74 6f 70 69 63 \
                         22 3a 22 6a 6f 62 73 22 7d"
        .split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    assert_eq!(out, want);

    let mut out = Vec::new();
    error("topic is required", &mut out);
    assert_eq!(&out[..8], &[0x01, 0x1d, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x65]);
    assert_eq!(&out[5..], br#"{"error":"topic is required"}"#);

    let mut out = Vec::new();
    empty(&mut out);
    assert_eq!(out, [0x02, 0, 0, 0, 0]);
}

#[test]
fn publish_ok_in_confirm_mode() {
    assert_eq!(
        ok_json(|o| publish_ok(&id(), "jobs", Some(3), o)),
        format!(r#"{{"id":"{ID_HEX}","topic":"jobs","seq_no":3,"ack":true}}"#)
    );
    assert_eq!(
        ok_json(|o| publish_ok(&id(), "", None, o)),
        format!(r#"{{"id":"{ID_HEX}","topic":""}}"#)
    );
}

#[test]
fn consume_reply_field_order_and_omitted_headers() {
    let m = msg("jobs", r#"{"n":1}"#);
    let want = format!(
        r#"{{"id":"{ID_HEX}","topic":"jobs","payload":{{"n":1}},"timestamp":1700000000123456789,"retry":2}}"#
    );
    assert_eq!(ok_json(|o| message(&m, o).unwrap()), want);
    assert_eq!(message_len(&m), want.len());

    let mut m = msg("jobs", r#""a string stays a string""#);
    m.edit_extras(|e| {
        e.headers.insert("z".into(), "1".into());
    });
    m.edit_extras(|e| {
        e.headers.insert("a".into(), "q\"\n\u{1}é".into());
    });
    m.timestamp_ns = -5;
    let want = format!(
        r#"{{"id":"{ID_HEX}","topic":"jobs","payload":"a string stays a string","headers":{{"a":"q\"\n\u0001é","z":"1"}},"timestamp":-5,"retry":2}}"#
    );
    assert_eq!(ok_json(|o| message(&m, o).unwrap()), want);
    assert_eq!(message_len(&m), want.len());
}

#[test]
fn batch_reply() {
    let a = msg("q", "1");
    let mut b = msg("q", "[true]");
    b.retry = 0;
    let mut out = Vec::new();
    assert_eq!(messages(&[a, b], &mut out), Ok(2));
    let (code, text) = one_frame(&out);
    assert_eq!(code, status::OK);
    assert_eq!(
        text,
        format!(
            r#"{{"messages":[{{"id":"{ID_HEX}","topic":"q","payload":1,"timestamp":1700000000123456789,"retry":2}},{{"id":"{ID_HEX}","topic":"q","payload":[true],"timestamp":1700000000123456789,"retry":0}}]}}"#
        )
    );
    let mut out = Vec::new();
    assert_eq!(messages(&[], &mut out), Ok(0));
    assert_eq!(out, [status::EMPTY, 0, 0, 0, 0]);
}

#[test]
fn batch_stops_before_the_frame_limit() {
    // A message that fills a batch frame exactly on its own.
    const WRAPPER: usize = r#"{"messages":[]}"#.len();
    let fixed = message_len(&msg("q", "\"\""));
    let fill = "x".repeat(PAYLOAD_BYTES_MAX - WRAPPER - fixed);
    let big = msg("q", &format!("\"{fill}\""));
    assert_eq!(WRAPPER + message_len(&big), PAYLOAD_BYTES_MAX);
    let small = msg("q", "1");
    let ms = vec![small.clone(), big.clone(), small.clone()];
    let mut out = Vec::new();
    assert_eq!(
        messages(&ms, &mut out),
        Ok(1),
        "the big one does not fit after the first"
    );
    let (_, text) = one_frame(&out);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["messages"].as_array().unwrap().len(), 1);

    // Alone it fits to the byte, and nothing after it.
    let mut out = vec![0xAA]; // frames are appended after what is already there
    assert_eq!(messages(&ms[1..], &mut out), Ok(1));
    assert_eq!(out[0], 0xAA);
    let (f, _) = frame::decode(&out[1..]).unwrap().unwrap();
    assert_eq!(f.payload.len(), PAYLOAD_BYTES_MAX);

    // Exactly at the limit: fill with small messages until one more would not fit.
    let many = vec![small; 40_000];
    let mut out = Vec::new();
    let n = messages(&many, &mut out).unwrap();
    let per = message_len(&many[0]) + 1;
    assert!(n < many.len());
    assert!(out.len() - HEADER_BYTES + per > PAYLOAD_BYTES_MAX);
    assert!(out.len() - HEADER_BYTES <= PAYLOAD_BYTES_MAX);
    let (_, text) = one_frame(&out);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["messages"].as_array().unwrap().len(), n);

    // A message too big to deliver at all: Err, nothing written.
    let huge = msg("q", &format!("\"{}\"", "x".repeat(PAYLOAD_BYTES_MAX)));
    let mut out = vec![1, 2, 3];
    assert!(messages(std::slice::from_ref(&huge), &mut out).is_err());
    assert!(message(&huge, &mut out).is_err());
    assert!(push(&huge, "s", &mut out).is_err());
    assert_eq!(out, [1, 2, 3]);
}

/// The largest message the parser accepts, with the longest names and worst-case
/// escaping, still fits every delivery shape.
#[test]
fn largest_accepted_message_fits_every_delivery() {
    let name = "\u{1}".repeat(NAME_BYTES_MAX); // each byte escapes to 6
    let mut m = msg(
        &name,
        &format!("\"{}\"", "x".repeat(MESSAGE_BODY_BYTES_MAX - 2)),
    );
    m.timestamp_ns = i64::MIN;
    m.retry = u32::MAX;
    let mut out = Vec::new();
    message(&m, &mut out).unwrap();
    push(&m, &name, &mut out).unwrap();
    assert_eq!(messages(std::slice::from_ref(&m), &mut out), Ok(1));
    assert_eq!(
        dlq_read(&name, u64::MAX, std::slice::from_ref(&m), &mut out),
        1
    );
    let mut rest = &out[..];
    while !rest.is_empty() {
        let (f, used) = frame::decode(rest).unwrap().unwrap();
        assert_eq!(f.code, status::OK);
        rest = &rest[used..];
    }
}

/// One encoded head serves every subscriber of a publish: the frames are the ones `push`
/// makes for each.
#[test]
fn a_push_head_is_shared_by_subscribers() {
    let mut m = msg("news", r#"{"a":1}"#);
    m.edit_extras(|e| {
        e.headers.insert("k".into(), "v\"q".into());
    });
    let head = PushHead::of(&m);
    assert_eq!(head.id(), m.id);
    let mut shared = Vec::new();
    let mut each = Vec::new();
    for sub in ["s1", "", "sub \"two\""] {
        push_from_head(&head, sub, &mut shared).unwrap();
        push(&m, sub, &mut each).unwrap();
    }
    assert_eq!(shared, each);
}

#[test]
fn push_frame() {
    let mut m = msg("news", r#"{"a":1}"#);
    assert_eq!(
        ok_json(|o| push(&m, "s1", o).unwrap()),
        format!(
            r#"{{"id":"{ID_HEX}","topic":"news","payload":{{"a":1}},"timestamp":1700000000123456789,"subscriber_id":"s1"}}"#
        )
    );
    m.edit_extras(|e| {
        e.headers.insert("k".into(), "v".into());
    });
    assert_eq!(
        ok_json(|o| push(&m, "s1", o).unwrap()),
        format!(
            r#"{{"id":"{ID_HEX}","topic":"news","payload":{{"a":1}},"headers":{{"k":"v"}},"timestamp":1700000000123456789,"subscriber_id":"s1"}}"#
        )
    );
}

#[test]
fn status_replies() {
    for (write, s) in [
        (ok as fn(&mut Vec<u8>), "ok"),
        (acked, "acked"),
        (nacked, "nacked"),
        (pong, "pong"),
        (subscribed, "subscribed"),
    ] {
        assert_eq!(ok_json(write), format!(r#"{{"status":"{s}"}}"#));
    }
}

#[test]
fn error_replies() {
    assert_eq!(
        encoded(|o| error("message abc not found in pending", o)),
        (
            status::ERROR,
            r#"{"error":"message abc not found in pending"}"#.to_string()
        )
    );
    assert_eq!(
        encoded(|o| request_error(&RequestError::UnknownCommand(0x0a), o)),
        (
            status::ERROR,
            r#"{"error":"unknown command: 0x0a"}"#.to_string()
        )
    );
    assert_eq!(
        encoded(|o| error("say \"hi\"\n", o)).1,
        r#"{"error":"say \"hi\"\n"}"#
    );
    let (code, text) = encoded(|o| error(&"é".repeat(PAYLOAD_BYTES_MAX), o));
    assert_eq!(code, status::ERROR);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v["error"].as_str().unwrap().len() <= ERROR_TEXT_BYTES_MAX);
}

#[test]
fn not_leader_replies() {
    assert_eq!(
        encoded(|o| not_leader("10.0.0.1:9100", "node1", None, None, o)),
        (
            status::NOT_LEADER,
            r#"{"error":"not leader","leader":"10.0.0.1:9100","leader_id":"node1"}"#.to_string()
        )
    );
    assert_eq!(
        encoded(|o| not_leader("", "", Some("10.0.0.1:9091"), Some("10.0.0.1:9090"), o)).1,
        r#"{"error":"not leader","leader":"","leader_id":"","leader_tcp":"10.0.0.1:9091","leader_http":"10.0.0.1:9090"}"#
    );
}

#[test]
fn stats_reply_and_merge() {
    assert_eq!(
        ok_json(|o| stats(&Stats::default(), o)),
        r#"{"Queues":{},"Topics":{},"DeadLetters":{},"PendingCount":0,"DelayedCount":0}"#
    );
    let mut a = Stats::default();
    a.queues.insert("jobs".into(), 3);
    a.topics.insert("news".into(), 1);
    a.pending_count = 2;
    let mut b = Stats::default();
    b.queues.insert("alpha".into(), 1);
    b.topics.insert("news".into(), 2);
    b.dead_letters.insert("jobs_dead_letter".into(), 4);
    b.delayed_count = 5;
    b.pending_count = 1;
    a.merge(&b);
    assert_eq!(
        ok_json(|o| stats(&a, o)),
        r#"{"Queues":{"alpha":1,"jobs":3},"Topics":{"news":3},"DeadLetters":{"jobs_dead_letter":4},"PendingCount":3,"DelayedCount":5}"#
    );
    // Too many queues for one frame: an ERROR, never an oversized frame.
    let mut huge = Stats::default();
    for i in 0..200_000 {
        huge.queues
            .insert(format!("queue-with-a-long-name-{i:08}"), i);
    }
    let (code, text) = encoded(|o| stats(&huge, o));
    assert_eq!(code, status::ERROR);
    assert!(text.contains("read /stats over HTTP"), "{text}");
}

#[test]
fn cluster_replies() {
    assert_eq!(ok_json(cluster_disabled), r#"{"enabled":false}"#);
    assert_eq!(
        ok_json(|o| cluster_joined("n2", o)),
        r#"{"node_id":"n2","status":"joined"}"#
    );
    assert_eq!(
        ok_json(|o| cluster_removed("n2", o)),
        r#"{"node_id":"n2","status":"removed"}"#
    );
    let info = ClusterInfo {
        node_id: "n1".into(),
        raft_addr: "h:9100".into(),
        state: "Leader".into(),
        leader: "h:9100".into(),
        leader_id: "n1".into(),
        term: 3,
        last_index: 42,
        peers: vec!["n1@h:9100".into(), "n2@g:9100".into()],
    };
    assert_eq!(
        ok_json(|o| cluster_status(&info, o)),
        r#"{"cluster":{"node_id":"n1","raft_addr":"h:9100","state":"Leader","leader":"h:9100","leader_id":"n1","term":3,"last_index":42,"peers":["n1@h:9100","n2@g:9100"]},"enabled":true}"#
    );
}

#[test]
fn dead_letter_replies() {
    let mut counts = BTreeMap::new();
    counts.insert("orders".to_string(), 3u64);
    counts.insert("emails".to_string(), 1u64);
    let mut out = Vec::new();
    assert_eq!(dlq_list(&counts, &mut out), 2);
    assert_eq!(
        one_frame(&out).1,
        r#"{"dead_letters":[{"queue":"emails","dead_letter":"emails_dead_letter","count":1},{"queue":"orders","dead_letter":"orders_dead_letter","count":3}]}"#
    );
    let mut out = Vec::new();
    assert_eq!(dlq_list(&BTreeMap::new(), &mut out), 0);
    assert_eq!(one_frame(&out).1, r#"{"dead_letters":[]}"#);

    let m = msg("orders", "1");
    let mut out = Vec::new();
    assert_eq!(dlq_read("orders", 10, &[m.clone(), m], &mut out), 2);
    assert_eq!(
        one_frame(&out).1,
        format!(
            r#"{{"queue":"orders","offset":10,"messages":[{{"id":"{ID_HEX}","topic":"orders","payload":1,"timestamp":1700000000123456789,"retry":2}},{{"id":"{ID_HEX}","topic":"orders","payload":1,"timestamp":1700000000123456789,"retry":2}}],"next_offset":12}}"#
        )
    );
    let mut out = Vec::new();
    assert_eq!(dlq_read("orders", 0, &[], &mut out), 0);
    assert_eq!(
        one_frame(&out).1,
        r#"{"queue":"orders","offset":0,"messages":[],"next_offset":0}"#
    );
    assert_eq!(
        ok_json(|o| dlq_requeued("orders", 7, o)),
        r#"{"queue":"orders","requeued":7}"#
    );
    assert_eq!(
        ok_json(|o| dlq_purged("orders", 0, o)),
        r#"{"queue":"orders","purged":0}"#
    );
}

#[test]
fn long_lists_are_cut_within_the_limit() {
    let counts: BTreeMap<String, u64> = (0..200_000)
        .map(|i| (format!("a-rather-long-queue-name-{i:010}"), i))
        .collect();
    let mut out = Vec::new();
    let n = dlq_list(&counts, &mut out);
    assert!(n > 0 && n < counts.len());
    let (_, text) = one_frame(&out);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["dead_letters"].as_array().unwrap().len(), n);
    assert_eq!(v["truncated"], serde_json::Value::Bool(true));

    let m = msg("orders", &format!("\"{}\"", "x".repeat(1_000_000)));
    let ms = vec![m; 10];
    let mut out = Vec::new();
    let n = dlq_read("orders", 5, &ms, &mut out);
    assert_eq!(n, 4);
    let (_, text) = one_frame(&out);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["next_offset"], 9);
}

/// Something that appends one reply frame.
type Writer<'a> = dyn Fn(&mut Vec<u8>) + 'a;

/// Every reply shape, fed names and payloads that mention `subscriber_id`, parses to an
/// object without a top-level `subscriber_id` key; only pushes have one.
#[test]
fn no_reply_has_a_top_level_subscriber_id() {
    let tricky = "subscriber_id";
    let mut m = msg(tricky, r#"{"subscriber_id":"x","topic":"t"}"#);
    m.edit_extras(|e| {
        e.headers.insert(tricky.into(), tricky.into());
    });
    let mut stats_in = Stats::default();
    stats_in.queues.insert(tricky.into(), 1);
    stats_in.topics.insert(tricky.into(), 1);
    let mut counts = BTreeMap::new();
    counts.insert(tricky.to_string(), 1);
    let info = ClusterInfo {
        node_id: tricky.into(),
        ..ClusterInfo::default()
    };
    let writers: Vec<Box<Writer>> = vec![
        Box::new(|o| publish_ok(&id(), tricky, Some(1), o)),
        Box::new(|o| message(&m, o).unwrap()),
        Box::new(|o| {
            messages(std::slice::from_ref(&m), o).unwrap();
        }),
        Box::new(|o| status(tricky, o)),
        Box::new(ok),
        Box::new(acked),
        Box::new(nacked),
        Box::new(pong),
        Box::new(subscribed),
        Box::new(|o| error(tricky, o)),
        Box::new(|o| not_leader(tricky, tricky, Some(tricky), Some(tricky), o)),
        Box::new(|o| stats(&stats_in, o)),
        Box::new(cluster_disabled),
        Box::new(|o| cluster_status(&info, o)),
        Box::new(|o| cluster_joined(tricky, o)),
        Box::new(|o| cluster_removed(tricky, o)),
        Box::new(|o| {
            dlq_list(&counts, o);
        }),
        Box::new(|o| {
            dlq_read(tricky, 0, std::slice::from_ref(&m), o);
        }),
        Box::new(|o| dlq_requeued(tricky, 1, o)),
        Box::new(|o| dlq_purged(tricky, 1, o)),
    ];
    for (i, write) in writers.iter().enumerate() {
        let (_, text) = encoded(write);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let obj = v
            .as_object()
            .unwrap_or_else(|| panic!("reply {i} not an object: {text}"));
        assert!(!obj.contains_key("subscriber_id"), "reply {i}: {text}");
    }
    let (_, text) = encoded(|o| push(&m, "s", o).unwrap());
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["subscriber_id"], "s");
    assert_eq!(v["topic"], tricky);
}

#[test]
fn lengths_match_serde_json_for_any_text() {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..5_000 {
        let s: String = (0..next() % 12)
            .map(|_| match next() % 4 {
                0 => char::from_u32((next() % 0x80) as u32).unwrap(),
                1 => *['"', '\\', '\u{7f}', '\u{2028}', 'é', '😀']
                    .get((next() % 6) as usize)
                    .unwrap(),
                _ => char::from_u32((next() % 0x20) as u32).unwrap(),
            })
            .collect();
        assert_eq!(
            json_str_len(&s),
            serde_json::to_string(&s).unwrap().len(),
            "{s:?}"
        );
        let mut m = msg(&s, "null");
        m.edit_extras(|e| {
            e.headers.insert(s.clone(), s.clone());
        });
        m.retry = (next() % 1_000_000) as u32;
        m.timestamp_ns = next() as i64;
        let mut out = Vec::new();
        message(&m, &mut out).unwrap();
        assert_eq!(out.len() - HEADER_BYTES, message_len(&m));
        assert_eq!(
            headers_json_len(m.headers()),
            serde_json::to_string(m.headers()).unwrap().len()
        );
    }
    assert_eq!(headers_json_len(&BTreeMap::new()), 0);
}
