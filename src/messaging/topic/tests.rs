use super::*;
use boltq_io::testutil::Rng;

#[test]
fn encoding_matches_the_spec_examples() {
    assert_eq!(
        encode_dir("chat.direct.alice:bob"),
        "chat.direct.alice%3Abob"
    );
    assert_eq!(encode_dir("a/b"), "a%2Fb");
    assert_eq!(encode_dir("Az09.-_"), "Az09.-_");
    assert_eq!(encode_dir("é"), "%C3%A9");
    assert_eq!(encode_dir(" %"), "%20%25");
    assert_eq!(encoded_len("chat.direct.alice:bob"), 23);
}

#[test]
fn leading_dot_is_escaped_d33() {
    assert_eq!(encode_dir("."), "%2E");
    assert_eq!(encode_dir(".."), "%2E.");
    assert_eq!(encode_dir(".hidden"), "%2Ehidden");
    assert_eq!(encode_dir("a.b."), "a.b.");
    for t in [".", "..", ".hidden"] {
        assert_eq!(decode_dir(&encode_dir(t)).as_deref(), Some(t));
    }
    // The unescaped spellings are not topic directories.
    assert_eq!(decode_dir("."), None);
    assert_eq!(decode_dir(".."), None);
    assert_eq!(decode_dir(".hidden"), None);
}

#[test]
fn topic_name_encoding_is_path_safe() {
    for t in [
        "../../etc/passwd",
        "a/b/c",
        "with space",
        "ünïcødé ☃",
        "nul\0byte",
        "%41",
    ] {
        let dir = encode_dir(t);
        assert!(!dir.contains('/') && !dir.contains('\0'), "{dir:?}");
        assert!(!dir.starts_with('.'), "{dir:?}");
        assert!(dir.bytes().all(|b| is_kept_byte(b) || b == b'%'), "{dir:?}");
        assert_eq!(decode_dir(&dir).as_deref(), Some(t));
    }
}

#[test]
fn decode_rejects_truncated_and_bad_escapes() {
    for bad in ["%", "%4", "abc%", "a%2", "%ZZ", "%G0", "%C3", "%FF", "%e9"] {
        assert_eq!(decode_dir(bad), None, "{bad:?}");
    }
}

#[test]
fn decode_rejects_non_canonical_spellings() {
    // A kept byte escaped, lowercase hex, a raw byte the encoding escapes.
    for bad in ["a%2Db", "%3a", "a b", "a:b", "é"] {
        assert_eq!(decode_dir(bad), None, "{bad:?}");
    }
    assert_eq!(decode_dir("a-b").as_deref(), Some("a-b"));
    assert_eq!(decode_dir("a%3Ab").as_deref(), Some("a:b"));
}

#[test]
fn round_trip_random_strings() {
    let mut rng = Rng::new(0x70_91c);
    for _ in 0..5000 {
        let t = random_string(&mut rng, 40);
        let dir = encode_dir(&t);
        assert_eq!(dir.len(), encoded_len(&t));
        assert_eq!(decode_dir(&dir), Some(t.clone()), "{t:?}");
    }
}

#[test]
fn valid_topic_names() {
    for ok in [
        "a",
        "chat.direct.alice:bob",
        "chat.inbox.alice.archive",
        "match.u1",
        "system.news",
        "spaces are fine",
    ] {
        assert_eq!(validate_topic(ok), Ok(()), "{ok:?}");
    }
    assert_eq!(validate_topic(""), Err(TopicError::Empty));
    assert_eq!(validate_topic("a.#"), Err(TopicError::Wildcard('#')));
    assert_eq!(validate_topic("a*"), Err(TopicError::Wildcard('*')));
    for bad in [".", "..", ".a", "a.", "a..b", "chat.inbox."] {
        assert_eq!(
            validate_topic(bad),
            Err(TopicError::EmptySegment),
            "{bad:?}"
        );
    }
    assert_eq!(validate_topic("a\0b"), Err(TopicError::ControlCharacter));
    assert_eq!(validate_topic("a\nb"), Err(TopicError::ControlCharacter));
}

#[test]
fn topic_length_is_measured_encoded() {
    let at_limit = "a".repeat(TOPIC_ENCODED_BYTES_MAX);
    assert_eq!(validate_topic(&at_limit), Ok(()));
    let over = "a".repeat(TOPIC_ENCODED_BYTES_MAX + 1);
    assert_eq!(
        validate_topic(&over),
        Err(TopicError::TooLong {
            encoded_bytes: 201,
            encoded_bytes_max: 200
        })
    );
    // 67 colons are 67 bytes raw but 201 encoded.
    let colons = ":".repeat(67);
    assert!(matches!(
        validate_topic(&colons),
        Err(TopicError::TooLong {
            encoded_bytes: 201,
            ..
        })
    ));
    assert_eq!(validate_topic(&":".repeat(66)), Ok(()));
}

#[test]
fn ids() {
    for ok in [
        "a",
        "alice",
        "user-8891",
        "a_b",
        "x@y",
        "a+b",
        &"z".repeat(128),
    ] {
        assert!(valid_id(ok), "{ok:?}");
    }
    for bad in [
        "",
        "a.b",
        "a:b",
        "a#",
        "a*",
        "a/b",
        "a b",
        "é",
        &"z".repeat(129),
    ] {
        assert!(!valid_id(bad), "{bad:?}");
    }
}

#[test]
fn namespaces() {
    assert_eq!(
        Namespace::of("chat.direct.alice:bob"),
        Ok(Namespace::Direct {
            a: "alice".into(),
            b: "bob".into()
        })
    );
    assert_eq!(
        Namespace::of("chat.group.eng-team"),
        Ok(Namespace::Group {
            id: "eng-team".into()
        })
    );
    assert_eq!(
        Namespace::of("chat.inbox.alice"),
        Ok(Namespace::Inbox {
            user: "alice".into()
        })
    );
    assert_eq!(
        Namespace::of("chat.inbox.alice.archive"),
        Ok(Namespace::Custom)
    );
    assert_eq!(Namespace::of("system.news"), Ok(Namespace::System));
    assert_eq!(Namespace::of("system"), Ok(Namespace::Custom));
    assert_eq!(Namespace::of("match.u1"), Ok(Namespace::Custom));
    assert_eq!(Namespace::of("typing.alice:bob"), Ok(Namespace::Custom));
    assert_eq!(Namespace::of("chat.directx"), Ok(Namespace::Custom));
    assert!(Namespace::of("chat.group.g1").unwrap().is_conversation());
    assert!(!Namespace::of("chat.inbox.g1").unwrap().is_conversation());
}

#[test]
fn namespace_errors() {
    assert_eq!(
        Namespace::of("chat.direct.bob:alice"),
        Err(TopicError::DirectNotCanonical {
            canonical: "chat.direct.alice:bob".into()
        })
    );
    let msg = Namespace::of("chat.direct.bob:alice")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("chat.direct.alice:bob"), "{msg}");
    assert_eq!(
        Namespace::of("chat.direct.alice:alice"),
        Err(TopicError::DirectSameParty)
    );
    for bad in ["chat.direct.alice", "chat.direct.a:b:c", "chat.direct.a::b"] {
        assert_eq!(Namespace::of(bad), Err(TopicError::DirectNotPair), "{bad}");
    }
    for bad in [
        "chat.direct.:bob",
        "chat.direct.a b:c",
        "chat.direct.a:b.c",
        "chat.group.g 1",
        "chat.group.g1.sub",
        "chat.group.a:b",
        "chat.inbox.al:ice",
        "chat.inbox.al:ice.archive",
    ] {
        assert!(
            matches!(Namespace::of(bad), Err(TopicError::InvalidId { .. })),
            "{bad}: {:?}",
            Namespace::of(bad)
        );
    }
    // Generic rules apply before namespace rules.
    assert_eq!(Namespace::of("chat.group."), Err(TopicError::EmptySegment));
    assert_eq!(
        Namespace::of("chat.group.#"),
        Err(TopicError::Wildcard('#'))
    );
    assert_eq!(Namespace::of(""), Err(TopicError::Empty));
}

#[test]
fn error_messages_name_the_problem() {
    let cases = [
        (TopicError::Empty, "required"),
        (
            TopicError::TooLong {
                encoded_bytes: 300,
                encoded_bytes_max: 200,
            },
            "300",
        ),
        (TopicError::Wildcard('#'), "'#'"),
        (TopicError::EmptySegment, "empty segments"),
        (TopicError::ControlCharacter, "control"),
        (
            TopicError::InvalidId {
                what: "group id",
                id: "a.b".into(),
            },
            "group id \"a.b\"",
        ),
        (TopicError::DirectNotPair, "joined by ':'"),
        (TopicError::DirectSameParty, "two different"),
        (
            TopicError::PartitionOutOfRange {
                partition: 16,
                count: 16,
            },
            "partition 16",
        ),
    ];
    for (e, needle) in cases {
        assert!(e.to_string().contains(needle), "{e}");
    }
}

#[test]
fn partition_vectors() {
    assert_eq!(fnv1a_64(b"alice:bob"), 0x3f43_4815_24ca_8596);
    assert_eq!(partition_for(b"alice:bob", 16), 6);
    assert_eq!(partition_for(b"alice:bob", 32), 22);
    assert_eq!(partition_for(b"alice:bob", 8), 6);
    assert_eq!(partition_for(b"g1", 16), 5);
    assert_eq!(partition_for(b"eng-team", 16), 7);
    assert_eq!(partition_for(b"conv-a", 16), 13);
    assert_eq!(partition_for(b"bob", 16), 4);
}

#[test]
fn partition_for_empty_key_and_single_partition() {
    assert_eq!(partition_for(b"", 16), 0);
    assert_eq!(partition_for(b"alice:bob", 1), 0);
    assert_eq!(partition_for(b"alice:bob", 0), 0);
}

#[test]
fn topic_partition_routing_spreads_keys() {
    let mut hit = [false; 8];
    for i in 0..200 {
        let key = format!("key-{i}");
        let p = partition_for(key.as_bytes(), 8);
        assert!(p < 8);
        assert_eq!(p, partition_for(key.as_bytes(), 8), "stable");
        hit[p as usize] = true;
    }
    assert!(hit.iter().filter(|h| **h).count() >= 6);
}

#[test]
fn partition_keys() {
    assert_eq!(partition_key("chat.direct.alice:bob", "carol"), "alice:bob");
    assert_eq!(partition_key("chat.group.eng-team", "carol"), "eng-team");
    assert_eq!(partition_key("chat.inbox.carol", "carol"), "carol");
    assert_eq!(partition_key("match.x", "carol"), "carol");
}

#[test]
fn resolve_partition_is_one_routine() {
    assert_eq!(
        resolve_partition("chat.direct.alice:bob", None, "zed", 16),
        Ok(6)
    );
    assert_eq!(resolve_partition("chat.group.g1", None, "zed", 16), Ok(5));
    assert_eq!(resolve_partition("chat.inbox.bob", None, "bob", 16), Ok(4));
    assert_eq!(resolve_partition("chat.inbox.bob", None, "bob", 1), Ok(0));
    assert_eq!(
        resolve_partition("chat.direct.alice:bob", Some(15), "zed", 16),
        Ok(15)
    );
    assert_eq!(
        resolve_partition("chat.direct.alice:bob", Some(16), "zed", 16),
        Err(TopicError::PartitionOutOfRange {
            partition: 16,
            count: 16
        })
    );
    assert_eq!(
        resolve_partition("x", None, "u", 0),
        Err(TopicError::PartitionOutOfRange {
            partition: 0,
            count: 0
        })
    );
}

#[test]
fn names() {
    assert_eq!(
        conversation_topic(false, "alice:bob"),
        "chat.direct.alice:bob"
    );
    assert_eq!(conversation_topic(true, "g1"), "chat.group.g1");
    assert_eq!(inbox_topic("bob"), "chat.inbox.bob");
    assert_eq!(typing_topic("alice:bob"), "typing.alice:bob");
    assert_eq!(
        log_name("chat.direct.alice:bob", 3),
        "streams/chat.direct.alice%3Abob/3"
    );
    assert_eq!(
        parse_log_name("streams/chat.direct.alice%3Abob/3"),
        Some(("chat.direct.alice:bob".to_string(), 3))
    );
}

#[test]
fn parse_log_name_rejects_other_logs() {
    for bad in [
        "queue/slot-001",
        "streams/a",
        "streams/a/",
        "streams/a/01",
        "streams/a/+1",
        "streams/a/-1",
        "streams/a/4294967296",
        "streams/a/1/2",
        "streams/a%2Db/1",
        "streams/%2E/0",
        "streams/a%23/0",
        "streams//0",
        "streamsx/a/0",
    ] {
        assert_eq!(parse_log_name(bad), None, "{bad:?}");
    }
    assert_eq!(
        parse_log_name("streams/a/4294967295"),
        Some(("a".to_string(), u32::MAX))
    );
    assert_eq!(parse_log_name("streams/a/0"), Some(("a".to_string(), 0)));
}

#[test]
fn every_valid_topic_has_a_valid_log_name() {
    let mut rng = Rng::new(0x106_4a3e);
    let mut checked = 0;
    for _ in 0..20_000 {
        let t = random_topic(&mut rng);
        if validate_topic(&t).is_err() {
            assert!(encoded_len(&t) > TOPIC_ENCODED_BYTES_MAX, "{t:?}");
            continue;
        }
        checked += 1;
        let partition = match rng.below(3) {
            0 => u32::MAX,
            1 => 0,
            _ => rng.next_u64() as u32,
        };
        let name = log_name(&t, partition);
        boltq_io::store::validate_log_name(&name)
            .unwrap_or_else(|e| panic!("{t:?} → {name:?}: {e}"));
        assert_eq!(parse_log_name(&name), Some((t.clone(), partition)));
    }
    assert!(checked > 15_000, "only {checked} valid topics generated");
    // A longest valid topic (almost all escaped) at the largest partition.
    let longest = "é".repeat(33) + "-a";
    assert_eq!(encoded_len(&longest), TOPIC_ENCODED_BYTES_MAX);
    validate_topic(&longest).unwrap();
    boltq_io::store::validate_log_name(&log_name(&longest, u32::MAX)).unwrap();
}

#[test]
fn partition_counts_by_namespace() {
    let counts = PartitionCounts {
        conversation: 4,
        inbox: 1,
        default: 16,
    };
    let of = |t: &str| counts.count_for(&Namespace::of(t).unwrap());
    assert_eq!(of("chat.direct.a:b"), 4);
    assert_eq!(of("chat.group.g"), 4);
    assert_eq!(of("chat.inbox.a"), 1);
    assert_eq!(of("chat.inbox.a.archive"), 16);
    assert_eq!(of("system.news"), 16);
    assert_eq!(of("match.a"), 16);
    let zeros = PartitionCounts {
        conversation: 0,
        inbox: 0,
        default: 0,
    };
    assert_eq!(zeros.count_for(&Namespace::System), 1);
    assert_eq!(
        PartitionCounts {
            conversation: 0,
            ..Default::default()
        }
        .count_for(&Namespace::Group { id: "g".into() }),
        16
    );
    assert_eq!(PartitionCounts::default().inbox, 1);
}

/// A random topic built from non-empty segments without wildcards or control bytes:
/// valid unless its encoding is too long.
fn random_topic(rng: &mut Rng) -> String {
    const PIECES: &[&str] = &[
        "a",
        "Z",
        "0",
        "-",
        "_",
        ":",
        "/",
        " ",
        "%",
        "é",
        "☃",
        "alice",
        "\u{10ffff}",
        "~",
    ];
    let segments = 1 + rng.below(6);
    (0..segments)
        .map(|_| {
            let len = 1 + rng.below(12);
            (0..len)
                .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// A random string mixing kept bytes, separators, escapes-to-be, wildcards and unicode.
fn random_string(rng: &mut Rng, len_max: u64) -> String {
    const PIECES: &[&str] = &[
        "a",
        "Z",
        "0",
        "9",
        ".",
        ".",
        "-",
        "_",
        ":",
        "/",
        " ",
        "%",
        "#",
        "*",
        "é",
        "☃",
        "\0",
        "\u{7f}",
        "chat.",
        "direct.",
        "alice",
        "..",
        "\u{10ffff}",
    ];
    let len = rng.below(len_max + 1);
    (0..len)
        .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
        .collect()
}
