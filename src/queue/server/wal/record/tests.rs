use super::*;
use boltq_io::testutil::Rng;

const ID_HEX: &str = "03070707070707070000000000000001";

fn id() -> MessageId {
    MessageId::parse(ID_HEX).unwrap()
}

fn message(topic: &str) -> Message {
    Message {
        extras: None,
        id: id(),
        topic: topic.into(),
        payload: Bytes::from_static(br#"{"n":1}"#),
        timestamp_ns: 5,
        retry: 1,
        max_retry: 5,
        priority: 12,
        delay_ns: 0,
        ttl_ns: 7,
        deliver_at_ns: 0,
        expires_at_ns: 12,
    }
    .with_extras(MessageExtras {
        headers: BTreeMap::from([("k".to_string(), "v".to_string())]),
        exchange: String::new(),
        routing_key: String::new(),
    })
}

fn encoded(cmd: &Command) -> Vec<u8> {
    let mut out = Vec::new();
    encode(cmd, &mut out);
    out
}

fn binary_tag(cmd: &Command) -> Option<u8> {
    match cmd {
        Command::Publish { .. } => Some(tag::PUBLISH),
        Command::PublishTopic { .. } => Some(tag::PUBLISH_TOPIC),
        Command::Consume { .. } => Some(tag::CONSUME),
        Command::Ack { .. } => Some(tag::ACK),
        Command::Nack { .. } => Some(tag::NACK),
        Command::Tick { .. } => Some(tag::TICK),
        _ => None,
    }
}

// ---- random commands ----

fn edge_i64(rng: &mut Rng) -> i64 {
    match rng.below(6) {
        0 => 0,
        1 => i64::MIN,
        2 => i64::MAX,
        3 => -1,
        4 => rng.below(1_000) as i64,
        _ => rng.next_u64() as i64,
    }
}

fn edge_u32(rng: &mut Rng) -> u32 {
    match rng.below(4) {
        0 => 0,
        1 => u32::MAX,
        2 => rng.below(10) as u32,
        _ => rng.next_u64() as u32,
    }
}

/// A string of at most `max_bytes`: empty, short, exactly at the limit, or anything up
/// to it, from characters of 1 to 4 UTF-8 bytes (quotes and escapes included).
fn string(rng: &mut Rng, max_bytes: usize) -> String {
    const CHARS: [char; 9] = ['a', 'Z', '0', '"', '\\', '\0', 'é', '€', '🦀'];
    let target = match rng.below(4) {
        0 => 0,
        1 => rng.below(12) as usize,
        2 => max_bytes,
        _ => rng.below(max_bytes as u64 + 1) as usize,
    }
    .min(max_bytes);
    let mut s = String::with_capacity(target);
    while s.len() < target {
        let c = CHARS[rng.below(CHARS.len() as u64) as usize];
        if s.len() + c.len_utf8() > target {
            s.push('a');
        } else {
            s.push(c);
        }
    }
    s
}

fn payload(rng: &mut Rng) -> Bytes {
    let len = match rng.below(4) {
        0 => 0,
        1 => rng.below(200),
        _ => rng.below(5_000),
    };
    // Any bytes, not only JSON text: the record must not care.
    Bytes::from((0..len).map(|_| rng.next_u64() as u8).collect::<Vec<u8>>())
}

fn headers(rng: &mut Rng) -> BTreeMap<String, String> {
    let count = match rng.below(4) {
        0 => 0,
        1 => 1,
        2 => rng.below(8),
        _ => rng.below(400),
    };
    (0..count)
        .map(|_| (string(rng, 24), string(rng, 64)))
        .collect()
}

fn random_message(rng: &mut Rng) -> Message {
    let mut id = [0u8; 16];
    id.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
    Message {
        extras: None,
        id: MessageId(id),
        topic: string(rng, NAME_BYTES_MAX).into(),
        payload: payload(rng),
        timestamp_ns: edge_i64(rng),
        retry: edge_u32(rng),
        max_retry: edge_u32(rng),
        priority: edge_i64(rng),
        delay_ns: edge_i64(rng),
        ttl_ns: edge_i64(rng),
        deliver_at_ns: edge_i64(rng),
        expires_at_ns: edge_i64(rng),
    }
    .with_extras(MessageExtras {
        headers: headers(rng),
        exchange: string(rng, NAME_BYTES_MAX),
        routing_key: if rng.below(8) == 0 {
            string(rng, ROUTING_KEY_BYTES_MAX)
        } else {
            string(rng, 200)
        },
    })
}

/// A random command of one of the binary-tagged kinds, within every limit.
fn random_hot_command(rng: &mut Rng) -> Command {
    let mut id = [0u8; 16];
    id.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
    match rng.below(6) {
        0 => Command::Publish {
            msg: random_message(rng),
        },
        1 => Command::PublishTopic {
            msg: random_message(rng),
        },
        2 => Command::Consume {
            queue: string(rng, NAME_BYTES_MAX),
            consumer: ConsumerRef {
                shard: rng.next_u64() as u16,
                conn: rng.next_u64(),
            },
            max: edge_u32(rng),
            now_ns: edge_i64(rng),
        },
        3 => Command::Ack {
            id: MessageId(id),
            now_ns: edge_i64(rng),
        },
        4 => Command::Nack {
            id: MessageId(id),
            now_ns: edge_i64(rng),
        },
        _ => Command::Tick {
            now_ns: edge_i64(rng),
        },
    }
}

/// What the binary layout says the record's size is.
fn layout_len(cmd: &Command) -> usize {
    match cmd {
        Command::Publish { msg } | Command::PublishTopic { msg } => {
            1 + MESSAGE_FIXED_BYTES
                + msg.topic.len()
                + msg.exchange().len()
                + msg.routing_key().len()
                + headers_bytes(msg.headers())
                + 8 * msg.headers().len()
                + msg.payload.len()
        }
        Command::Consume { queue, .. } => 1 + 8 + 2 + 8 + 4 + 4 + queue.len(),
        Command::Ack { .. } | Command::Nack { .. } => 1 + 16 + 8,
        Command::Tick { .. } => 1 + 8,
        other => panic!("not a binary command: {other:?}"),
    }
}

#[test]
fn hot_commands_round_trip_through_binary_records() {
    let mut rng = Rng::new(0x5EED_0001);
    for case in 0..3_000 {
        let cmd = random_hot_command(&mut rng);
        let bytes = encoded(&cmd);
        assert_eq!(Some(bytes[0]), binary_tag(&cmd), "case {case}");
        assert_eq!(bytes.len(), layout_len(&cmd), "case {case}");
        assert_eq!(decode(&bytes), Ok(cmd.clone()), "case {case}");
        assert_eq!(encoded(&decode(&bytes).unwrap()), bytes, "case {case}");
    }
}

/// The layout pinned byte for byte: tag, little-endian integers, field order.
#[test]
fn binary_layout_is_explicit_little_endian() {
    let ack = Command::Ack {
        id: MessageId([0xA0; 16]),
        now_ns: 0x0102_0304_0506_0708,
    };
    let mut want = vec![0x04];
    want.extend_from_slice(&[0xA0; 16]);
    want.extend_from_slice(&[8, 7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(encoded(&ack), want);

    let consume = Command::Consume {
        queue: "q1".into(),
        consumer: ConsumerRef {
            shard: 0x0201,
            conn: 9,
        },
        max: 0x0A0B_0C0D,
        now_ns: -2,
    };
    let mut want = vec![0x03];
    want.extend_from_slice(&[0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
    want.extend_from_slice(&[0x01, 0x02]);
    want.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0, 0]);
    want.extend_from_slice(&[0x0D, 0x0C, 0x0B, 0x0A]);
    want.extend_from_slice(&[2, 0, 0, 0, b'q', b'1']);
    assert_eq!(encoded(&consume), want);

    let tick = Command::Tick { now_ns: 1 };
    assert_eq!(encoded(&tick), [6, 1, 0, 0, 0, 0, 0, 0, 0]);

    let mut msg = message("q");
    msg.payload = Bytes::from_static(b"7");
    msg.edit_extras(|e| e.routing_key = "rk".into());
    let mut want = vec![0x01];
    want.extend_from_slice(&id().0);
    want.extend_from_slice(&5i64.to_le_bytes());
    want.extend_from_slice(&1u32.to_le_bytes());
    want.extend_from_slice(&5u32.to_le_bytes());
    for v in [12i64, 0, 7, 0, 12] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    want.extend_from_slice(&[1, 0, 0, 0, b'q']); // topic
    want.extend_from_slice(&[0, 0, 0, 0]); // exchange
    want.extend_from_slice(&[2, 0, 0, 0, b'r', b'k']); // routing key
    want.extend_from_slice(&[1, 0, 0, 0]); // one header
    want.extend_from_slice(&[1, 0, 0, 0, b'k', 1, 0, 0, 0, b'v']);
    want.extend_from_slice(&[1, 0, 0, 0, b'7']); // payload
    assert_eq!(encoded(&Command::Publish { msg }), want);
}

/// Builds a command with one length set to the argument.
type MakeCommand = Box<dyn Fn(usize) -> Command>;

/// Each limit is reachable in binary; one byte (or header) past it, the command is
/// logged as JSON and still comes back intact.
#[test]
fn commands_past_a_limit_fall_back_to_json_and_round_trip() {
    let cases: Vec<(&str, MakeCommand, usize)> = vec![
        (
            "topic",
            Box::new(|n| Command::Publish {
                msg: message(&"t".repeat(n)),
            }),
            NAME_BYTES_MAX,
        ),
        (
            "exchange",
            Box::new(|n| {
                let mut msg = message("q");
                msg.edit_extras(|e| e.exchange = "x".repeat(n));
                Command::PublishTopic { msg }
            }),
            NAME_BYTES_MAX,
        ),
        (
            "routing key",
            Box::new(|n| {
                let mut msg = message("q");
                msg.edit_extras(|e| e.routing_key = "r".repeat(n));
                Command::Publish { msg }
            }),
            ROUTING_KEY_BYTES_MAX,
        ),
        (
            "payload",
            Box::new(|n| {
                let mut msg = message("q");
                msg.payload = Bytes::from(vec![b'7'; n]);
                Command::Publish { msg }
            }),
            PAYLOAD_BYTES_MAX,
        ),
        (
            "header bytes",
            Box::new(|n| {
                let mut msg = message("q");
                msg.edit_extras(|e| {
                    e.headers = BTreeMap::from([("k".to_string(), "v".repeat(n - 1))])
                });
                Command::Publish { msg }
            }),
            HEADERS_BYTES_MAX,
        ),
        (
            "header count",
            Box::new(|n| {
                let mut msg = message("q");
                msg.edit_extras(|e| {
                    e.headers = (0..n).map(|i| (format!("{i:06}"), String::new())).collect()
                });
                Command::Publish { msg }
            }),
            HEADERS_MAX,
        ),
        (
            "queue",
            Box::new(|n| Command::Consume {
                queue: "q".repeat(n),
                consumer: ConsumerRef { shard: 0, conn: 1 },
                max: 1,
                now_ns: 1,
            }),
            NAME_BYTES_MAX,
        ),
    ];
    for (name, make, limit) in cases {
        let at = make(limit);
        let bytes = encoded(&at);
        assert_eq!(Some(bytes[0]), binary_tag(&at), "{name} at its limit");
        assert_eq!(decode(&bytes).as_ref(), Ok(&at), "{name} at its limit");

        let past = make(limit + 1);
        let bytes = encoded(&past);
        assert_eq!(bytes[0], JSON_OBJECT_BYTE, "{name} past its limit");
        assert_eq!(bytes, serde_json::to_vec(&past).unwrap(), "{name}");
        assert_eq!(decode(&bytes).as_ref(), Ok(&past), "{name} past its limit");
    }
}

// ---- the old JSON records ----

/// Records as the log held them before binary records: `serde_json::to_vec(cmd)`,
/// frozen as text so that a change to the commands' serde form is noticed here.
const OLD_RECORDS: [&str; 7] = [
    r#"{"Publish":{"msg":{"id":"03070707070707070000000000000001","topic":"jobs","payload":"{\"n\":1}","headers":{"k":"v"},"timestamp_ns":5,"retry":1,"max_retry":5,"priority":12,"delay_ns":0,"ttl_ns":7,"deliver_at_ns":0,"expires_at_ns":12,"exchange":"","routing_key":""}}}"#,
    r#"{"Consume":{"queue":"jobs","consumer":{"shard":1,"conn":42},"max":3,"now_ns":-9}}"#,
    r#"{"Ack":{"id":"03070707070707070000000000000001","now_ns":5}}"#,
    r#"{"Nack":{"id":"03070707070707070000000000000001","now_ns":6}}"#,
    r#"{"Tick":{"now_ns":1700000000000000000}}"#,
    r#"{"Subscribe":{"topic":"t","sub_id":"s","durable":true,"consumer":{"shard":0,"conn":7},"now_ns":3}}"#,
    r#""DisconnectAll""#,
];

fn old_commands() -> [Command; 7] {
    [
        Command::Publish {
            msg: message("jobs"),
        },
        Command::Consume {
            queue: "jobs".into(),
            consumer: ConsumerRef { shard: 1, conn: 42 },
            max: 3,
            now_ns: -9,
        },
        Command::Ack {
            id: id(),
            now_ns: 5,
        },
        Command::Nack {
            id: id(),
            now_ns: 6,
        },
        Command::Tick {
            now_ns: 1_700_000_000_000_000_000,
        },
        Command::Subscribe {
            topic: "t".into(),
            sub_id: "s".into(),
            durable: true,
            consumer: ConsumerRef { shard: 0, conn: 7 },
            now_ns: 3,
        },
        Command::DisconnectAll,
    ]
}

#[test]
fn json_records_of_the_old_log_still_decode() {
    for (text, cmd) in OLD_RECORDS.iter().zip(old_commands()) {
        assert_eq!(serde_json::to_vec(&cmd).unwrap(), text.as_bytes(), "{text}");
        assert_eq!(decode(text.as_bytes()), Ok(cmd), "{text}");
    }
    // A payload that is not UTF-8 went into JSON as an array of numbers.
    let mut msg = message("jobs");
    msg.payload = Bytes::from_static(&[0xFF, 0x00, 0x41]);
    let cmd = Command::PublishTopic { msg };
    assert_eq!(decode(&serde_json::to_vec(&cmd).unwrap()), Ok(cmd));
}

#[test]
fn rare_commands_are_written_as_the_same_json_as_before() {
    let rare = [
        Command::Subscribe {
            topic: "t".into(),
            sub_id: "s".into(),
            durable: false,
            consumer: ConsumerRef { shard: 2, conn: 3 },
            now_ns: 4,
        },
        Command::Disconnect {
            consumer: ConsumerRef { shard: 2, conn: 3 },
        },
        Command::DisconnectAll,
        Command::DeadLetterRequeue {
            queue: "q".into(),
            limit: 10,
            now_ns: 4,
        },
        Command::Purge { queue: "q".into() },
        Command::DeadLetterPurge { queue: "q".into() },
    ];
    for cmd in rare {
        let bytes = encoded(&cmd);
        assert_eq!(bytes, serde_json::to_vec(&cmd).unwrap(), "{cmd:?}");
        assert_eq!(decode(&bytes), Ok(cmd));
    }
}

// ---- refusals ----

/// A PUBLISH record written field by field, independently of `encode`, with lengths
/// as given (possibly lying).
struct Raw(Vec<u8>);

impl Raw {
    fn publish_head() -> Raw {
        let mut r = Raw(vec![tag::PUBLISH]);
        r.0.extend_from_slice(&[0x11; 16]);
        r.0.extend_from_slice(&[0; 8 + 4 + 4 + 5 * 8]);
        r
    }
    fn len(mut self, n: u32) -> Raw {
        self.0.extend_from_slice(&n.to_le_bytes());
        self
    }
    fn str(self, s: &[u8]) -> Raw {
        let mut r = self.len(s.len() as u32);
        r.0.extend_from_slice(s);
        r
    }
    /// Topic, exchange and routing key.
    fn names(self, topic: &[u8]) -> Raw {
        self.str(topic).str(b"").str(b"")
    }
}

#[test]
fn the_decoder_refuses_bad_records_with_a_clear_error() {
    let ok = Raw::publish_head().names(b"q").len(0).str(b"p").0;
    assert!(decode(&ok).is_ok());
    let names_end = 1 + 16 + 8 + 4 + 4 + 40 + 5 + 4 + 4;

    let cases: Vec<(Vec<u8>, RecordError, &str)> = vec![
        (vec![], RecordError::Empty, "empty record"),
        (
            vec![0x00, 1, 2],
            RecordError::UnknownTag(0),
            "unknown record tag 0x00 at byte 0",
        ),
        (
            vec![0x07],
            RecordError::UnknownTag(7),
            "unknown record tag 0x07 at byte 0",
        ),
        (
            Raw::publish_head().names(b"q").0,
            RecordError::Truncated {
                field: "headers",
                at_byte: names_end,
            },
            "truncated headers at byte 86",
        ),
        (
            {
                let mut r = Raw::publish_head().len(NAME_BYTES_MAX as u32 + 1).0;
                r.extend(vec![b'a'; NAME_BYTES_MAX + 1]);
                r
            },
            RecordError::TooLong {
                field: "topic",
                len_bytes: NAME_BYTES_MAX as u64 + 1,
                max_bytes: NAME_BYTES_MAX,
                at_byte: 73,
            },
            "topic too long at byte 73: 1025 bytes, at most 1024",
        ),
        (
            Raw::publish_head().names(b"q").len(0).len(u32::MAX).0,
            RecordError::TooLong {
                field: "payload",
                len_bytes: u32::MAX as u64,
                max_bytes: PAYLOAD_BYTES_MAX,
                at_byte: names_end + 4,
            },
            "payload too long at byte 90: 4294967295 bytes, at most 4194304",
        ),
        (
            Raw::publish_head().names(b"q").len(u32::MAX).0,
            RecordError::TooManyHeaders {
                count: u32::MAX as u64,
                at_byte: names_end,
            },
            "too many headers at byte 86: 4294967295, at most 65536",
        ),
        (
            Raw::publish_head().names(b"q").len(1).str(b"k").len(10).0,
            RecordError::Truncated {
                field: "header value",
                at_byte: names_end + 4 + 5,
            },
            "truncated header value at byte 95",
        ),
        (
            Raw::publish_head()
                .names(b"q")
                .len(2)
                .str(b"b")
                .str(b"")
                .str(b"a")
                .str(b"")
                .str(b"")
                .0,
            RecordError::HeadersNotSorted {
                at_byte: names_end + 4 + 5 + 4,
            },
            "header key at byte 99 is not after the previous one (unsorted or repeated)",
        ),
        (
            Raw::publish_head()
                .names(b"q")
                .len(2)
                .str(b"a")
                .str(b"")
                .str(b"a")
                .str(b"")
                .str(b"")
                .0,
            RecordError::HeadersNotSorted {
                at_byte: names_end + 4 + 5 + 4,
            },
            "header key at byte 99 is not after the previous one (unsorted or repeated)",
        ),
        (
            Raw::publish_head().names(b"a\xC3(").len(0).str(b"").0,
            RecordError::NotUtf8 {
                field: "topic",
                at_byte: 78,
            },
            "topic is not UTF-8 at byte 78",
        ),
        (
            {
                let mut r = ok.clone();
                r.push(0);
                r
            },
            RecordError::TrailingBytes {
                count: 1,
                at_byte: ok.len(),
            },
            "1 trailing bytes at byte 95",
        ),
        (
            vec![tag::ACK, 1, 2, 3],
            RecordError::Truncated {
                field: "message id",
                at_byte: 1,
            },
            "truncated message id at byte 1",
        ),
    ];
    for (bytes, want, text) in cases {
        let got = decode(&bytes).expect_err(text);
        assert_eq!(got, want);
        assert_eq!(got.to_string(), text);
    }
}

#[test]
fn header_bytes_are_bounded_in_total() {
    let third = (HEADERS_BYTES_MAX / 3) as u32;
    let mut r = Raw::publish_head().names(b"q").len(4);
    for key in [b"a", b"b", b"c", b"d"] {
        r = r.str(key).len(third);
        r.0.extend(vec![b'v'; third as usize]);
    }
    let err = decode(&r.0).expect_err("over the headers budget");
    let RecordError::TooLong {
        field: "headers",
        len_bytes,
        max_bytes: HEADERS_BYTES_MAX,
        ..
    } = err
    else {
        panic!("{err:?}");
    };
    assert!(len_bytes > HEADERS_BYTES_MAX as u64, "{len_bytes}");
}

#[test]
fn a_broken_json_record_names_the_json_error() {
    let err = decode(br#"{"Ack":{"id":"zz","now_ns":1}}"#).unwrap_err();
    assert!(matches!(err, RecordError::Json(_)), "{err:?}");
    assert!(err
        .to_string()
        .starts_with("JSON command does not decode: "));
    assert!(err.to_string().contains("invalid message id"), "{err}");
}

// ---- mutations ----

fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(3) {
        let len = bytes.len() as u64;
        match rng.below(6) {
            0 => bytes.truncate(rng.below(len + 1) as usize),
            1 if len > 0 => {
                let i = rng.below(len) as usize;
                bytes[i] ^= 1 << rng.below(8);
            }
            2 if len > 0 => {
                let i = rng.below(len) as usize;
                bytes[i] = [0x00, 0xFF, 0x7F, 0x80, b'{', b'"', 0x01][rng.below(7) as usize];
            }
            3 => {
                let i = rng.below(len + 1) as usize;
                bytes.insert(i, rng.next_u64() as u8);
            }
            4 if len > 0 => {
                bytes.remove(rng.below(len) as usize);
            }
            // A length-like value over four bytes, to reach the limit checks.
            _ if len >= 4 => {
                let i = rng.below(len - 3) as usize;
                let v: u32 = [0, 1, 1025, 65_537, 1 << 22, u32::MAX][rng.below(6) as usize];
                bytes[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            _ => bytes.push(rng.next_u64() as u8),
        }
    }
}

/// Cuts `s` to at most 64 bytes, on a character boundary.
fn cut(s: &mut String) {
    while s.len() > 64 {
        s.pop();
    }
}

/// Truncated, flipped, shifted and patched records: decode never panics, and whatever
/// it accepts re-encodes to a record that decodes to the same command — byte for byte
/// the input when that was binary (the binary form is canonical).
#[test]
fn mutated_records_never_panic_and_accepted_ones_re_encode() {
    let mut rng = Rng::new(0x5EED_0002);
    let mut valid: Vec<Vec<u8>> = OLD_RECORDS.iter().map(|t| t.as_bytes().to_vec()).collect();
    while valid.len() < 64 {
        let mut cmd = random_hot_command(&mut rng);
        // Keep inputs small so that many mutations fit the test's time.
        if let Command::Publish { msg } | Command::PublishTopic { msg } = &mut cmd {
            let mut topic = msg.topic.to_string();
            cut(&mut topic);
            msg.topic = topic.into();
            msg.edit_extras(|e| {
                cut(&mut e.routing_key);
                cut(&mut e.exchange);
            });
            msg.payload.truncate(64);
            msg.edit_extras(|e| {
                while e.headers.len() > 3 {
                    e.headers.pop_last();
                }
            });
        }
        if let Command::Consume { queue, .. } = &mut cmd {
            cut(queue);
        }
        valid.push(encoded(&cmd));
    }
    let (mut accepted, mut refused) = (0u32, 0u32);
    for case in 0..120_000u32 {
        let mut bytes = valid[rng.below(valid.len() as u64) as usize].clone();
        mutate(&mut rng, &mut bytes);
        let Ok(cmd) = decode(&bytes) else {
            refused += 1;
            continue;
        };
        accepted += 1;
        let again = encoded(&cmd);
        assert_eq!(decode(&again).as_ref(), Ok(&cmd), "case {case}: {bytes:?}");
        if bytes[0] != JSON_OBJECT_BYTE && bytes[0] != JSON_STRING_BYTE {
            assert_eq!(again, bytes, "case {case}: binary is canonical");
        }
    }
    // Both outcomes are common, so both paths above were exercised.
    assert!(
        accepted > 10_000 && refused > 10_000,
        "{accepted} / {refused}"
    );
}
