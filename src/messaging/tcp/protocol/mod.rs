//! Stream commands of the TCP protocol (BoltQ additive, bytes `0x1D`–`0x20`): trusted
//! backends publish to, read and tail the messaging plane's stream topics over the same
//! binary protocol as the queue plane. Pure parsers and reply encoders; `super::run` runs
//! them against the stream engine. Full shapes, byte by
//! byte: `docs/stream-publishing.md`.
//!
//! | Byte | Name | Request | OK reply |
//! |---|---|---|---|
//! | `0x1D` | STREAM_PUBLISH | `{"topic","partition"?,"key"?,"headers"?,"payload"?\|"payload_base64"?}` | `{"topic","partition","seq","timestamp"}` |
//! | `0x1E` | STREAM_READ | `{"topic","partition"?,"key"?,"from"?,"max"?}` | a page (see [`records`]) |
//! | `0x1F` | STREAM_TAIL | READ's fields plus `"group"?,"member"?,"wait_ms"?` | a page, plus `"group"`, `"member"` |
//! | `0x20` | STREAM_COMMIT | `{"topic","partition"?,"key"?,"group","member"?,"seq"}` | `{"topic","partition","group","member","seq"}` |
//!
//! Backends are trusted (API-key AUTH like every TCP command): there is no per-user ACL
//! here. Topic names are validated as everywhere ([`topic::Namespace::of`]); publishing to
//! the chat namespaces (`chat.*`: conversations and inboxes, written only by the gateway's
//! `send`) and to `typing.*` (signals, never stored) is refused.
//!
//! JSON is decoded as every v1 request is (Go `encoding/json` semantics: unknown keys
//! ignored, keys case-insensitive, last duplicate wins, `null` = absent).

pub mod commit;
pub mod publish;
pub mod read;
pub mod records;
pub mod tail;

use crate::messaging::cursor::CURSOR_COMPONENT_BYTES_MAX;
use crate::messaging::topic;
use crate::queue::protocol::request::json::{key_matches, IntType, Reader, Syntax};
use crate::queue::protocol::request::{check_name, invalid_json, read_optional_int, RequestError};

/// The command bytes, right after the DLQ commands (0x19–0x1C).
pub mod stream_op {
    pub const STREAM_PUBLISH: u8 = 0x1D;
    pub const STREAM_READ: u8 = 0x1E;
    pub const STREAM_TAIL: u8 = 0x1F;
    pub const STREAM_COMMIT: u8 = 0x20;
}

/// Records per READ or TAIL reply when `max` is absent, and the largest `max`.
pub const STREAM_RECORDS_DEFAULT: u32 = 64;
pub const STREAM_RECORDS_MAX: u32 = 1000;
/// Prefix of every backend cursor group, so a backend can never move a device's cursor
/// (`user:<id>`) or the push dispatcher's.
pub const BACKEND_GROUP_PREFIX: &str = "backend:";
/// Longest `group`: what is left of a cursor component after the prefix.
pub const GROUP_BYTES_MAX: usize = CURSOR_COMPONENT_BYTES_MAX - BACKEND_GROUP_PREFIX.len();
/// Longest `member`.
pub const MEMBER_BYTES_MAX: usize = CURSOR_COMPONENT_BYTES_MAX;

/// One parsed stream command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamRequest {
    Publish(publish::Publish),
    Read(read::Read),
    Tail(tail::Tail),
    Commit(commit::Commit),
}

impl StreamRequest {
    pub fn code(&self) -> u8 {
        match self {
            StreamRequest::Publish(_) => stream_op::STREAM_PUBLISH,
            StreamRequest::Read(_) => stream_op::STREAM_READ,
            StreamRequest::Tail(_) => stream_op::STREAM_TAIL,
            StreamRequest::Commit(_) => stream_op::STREAM_COMMIT,
        }
    }
}

/// Parses a stream command; `None` when `code` is not one.
pub fn parse(code: u8, payload: &[u8]) -> Option<Result<StreamRequest, RequestError>> {
    Some(match code {
        stream_op::STREAM_PUBLISH => publish::parse(payload).map(StreamRequest::Publish),
        stream_op::STREAM_READ => read::parse(payload).map(StreamRequest::Read),
        stream_op::STREAM_TAIL => tail::parse(payload).map(StreamRequest::Tail),
        stream_op::STREAM_COMMIT => commit::parse(payload).map(StreamRequest::Commit),
        _ => return None,
    })
}

/// Which partition of which topic: `partition` when given, else the partition of `key`
/// (`topic::partition_for`, the function devices use), else 0. The count is only known to
/// the engine, so the range is checked there ([`Target::partition_in`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Target {
    pub topic: String,
    pub partition: Option<u32>,
    pub key: String,
}

impl Target {
    /// The partition addressed among `count`, or the error text.
    pub fn partition_in(&self, count: u32) -> Result<u32, String> {
        let p = self
            .partition
            .unwrap_or_else(|| topic::partition_for(self.key.as_bytes(), count));
        if p < count {
            Ok(p)
        } else {
            Err(format!(
                "partition {p} out of range: {} has {count}",
                self.topic
            ))
        }
    }
}

/// Longest `key` (the partition key of READ/TAIL/COMMIT and the record key of PUBLISH).
pub const KEY_BYTES_MAX: usize = 1024;

/// The raw fields of any stream command, decoded in one pass; each parser takes what it
/// needs and ignores the rest (as Go ignores fields a struct does not have).
#[derive(Default)]
pub(crate) struct Fields {
    pub topic: String,
    pub partition: Option<i128>,
    pub key: String,
    pub headers: std::collections::BTreeMap<String, String>,
    /// Raw JSON of `payload` (compacted); empty when absent.
    pub payload: Vec<u8>,
    pub payload_base64: Option<String>,
    pub from: i128,
    pub max: Option<i128>,
    pub wait_ms: i128,
    pub group: String,
    pub member: String,
    pub seq: i128,
}

/// Decodes `payload` as a stream request object (`struct_name` names it in type errors).
pub(crate) fn decode_fields(
    payload: &[u8],
    struct_name: &'static str,
) -> Result<Fields, RequestError> {
    let mut f = Fields::default();
    let mut b64 = String::new();
    let mut b64_seen = false;
    crate::queue::protocol::request::decode(payload, struct_name, |r, key| {
        member(r, key, &mut f, &mut b64, &mut b64_seen)
    })
    .map_err(invalid_json)?;
    if b64_seen && !b64.is_empty() {
        f.payload_base64 = Some(b64);
    }
    Ok(f)
}

fn member(
    r: &mut Reader<'_>,
    key: &str,
    f: &mut Fields,
    b64: &mut String,
    b64_seen: &mut bool,
) -> Option<Result<(), Syntax>> {
    Some(if key_matches(key, "topic") {
        r.read_str("topic", &mut f.topic)
    } else if key_matches(key, "partition") {
        read_optional_int(r, "partition", &mut f.partition)
    } else if key_matches(key, "key") {
        r.read_str("key", &mut f.key)
    } else if key_matches(key, "headers") {
        r.read_string_map("headers", &mut f.headers)
    } else if key_matches(key, "payload") {
        r.read_raw(&mut f.payload)
    } else if key_matches(key, "payload_base64") {
        *b64_seen = true;
        r.read_str("payload_base64", b64)
    } else if key_matches(key, "from") {
        r.read_int("from", IntType::Uint64, &mut f.from)
    } else if key_matches(key, "max") {
        read_optional_int(r, "max", &mut f.max)
    } else if key_matches(key, "wait_ms") {
        r.read_int("wait_ms", IntType::Uint64, &mut f.wait_ms)
    } else if key_matches(key, "group") {
        r.read_str("group", &mut f.group)
    } else if key_matches(key, "member") {
        r.read_str("member", &mut f.member)
    } else if key_matches(key, "seq") {
        r.read_int("seq", IntType::Uint64, &mut f.seq)
    } else {
        return None;
    })
}

fn invalid(text: String) -> RequestError {
    RequestError::Invalid(text)
}

/// The target of a command: a valid topic name, a partition in `u32`, a bounded key.
pub(crate) fn target(f: &Fields) -> Result<Target, RequestError> {
    if f.topic.is_empty() {
        return Err(RequestError::Required("topic is required"));
    }
    check_name("topic", &f.topic)?;
    topic::Namespace::of(&f.topic).map_err(|e| invalid(format!("invalid topic: {e}")))?;
    if f.key.len() > KEY_BYTES_MAX {
        return Err(invalid(format!(
            "key is too long: at most {KEY_BYTES_MAX} bytes"
        )));
    }
    let partition = match f.partition {
        None => None,
        Some(p) => Some(
            u32::try_from(p)
                .map_err(|_| invalid(format!("partition must be between 0 and {}", u32::MAX)))?,
        ),
    };
    Ok(Target {
        topic: f.topic.clone(),
        partition,
        key: f.key.clone(),
    })
}

/// `max` for READ and TAIL: absent = [`STREAM_RECORDS_DEFAULT`], else 1..=[`STREAM_RECORDS_MAX`].
pub(crate) fn records_max(f: &Fields) -> Result<u32, RequestError> {
    match f.max {
        None => Ok(STREAM_RECORDS_DEFAULT),
        Some(n) if (1..=i128::from(STREAM_RECORDS_MAX)).contains(&n) => Ok(n as u32),
        Some(_) => Err(invalid(format!(
            "max must be between 1 and {STREAM_RECORDS_MAX}"
        ))),
    }
}

/// A backend consumer: `group` (required when `required`) and `member` (may be empty).
/// Checked here so the engine's cursor key can always be built from them.
pub(crate) fn consumer(f: &Fields, required: bool) -> Result<Option<Consumer>, RequestError> {
    if f.group.is_empty() {
        if required {
            return Err(RequestError::Required("group is required"));
        }
        if !f.member.is_empty() {
            return Err(RequestError::Required("member needs a group"));
        }
        return Ok(None);
    }
    check_component("group", &f.group, GROUP_BYTES_MAX)?;
    check_component("member", &f.member, MEMBER_BYTES_MAX)?;
    Ok(Some(Consumer {
        group: f.group.clone(),
        member: f.member.clone(),
    }))
}

fn check_component(field: &str, value: &str, bytes_max: usize) -> Result<(), RequestError> {
    if value.len() > bytes_max {
        return Err(invalid(format!(
            "{field} is too long: at most {bytes_max} bytes"
        )));
    }
    if value.contains('\0') {
        return Err(invalid(format!("{field} must not contain NUL")));
    }
    Ok(())
}

/// A named backend consumer whose position is kept as a cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    pub group: String,
    pub member: String,
}

impl Consumer {
    /// The cursor key's group: [`BACKEND_GROUP_PREFIX`] + group.
    pub fn cursor_group(&self) -> String {
        format!("{BACKEND_GROUP_PREFIX}{}", self.group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(json: &str) -> Fields {
        decode_fields(json.as_bytes(), "streamRequest").unwrap()
    }

    #[test]
    fn target_takes_the_partition_else_the_key_else_zero() {
        let t = target(&fields(r#"{"topic":"match.a","partition":3}"#)).unwrap();
        assert_eq!((t.partition, t.partition_in(4)), (Some(3), Ok(3)));
        assert!(t.partition_in(3).unwrap_err().contains("out of range"));
        let t = target(&fields(r#"{"topic":"match.a","key":"alice"}"#)).unwrap();
        assert_eq!(
            t.partition_in(8),
            Ok(topic::partition_for(b"alice", 8)),
            "the partition devices compute for the same key"
        );
        let t = target(&fields(r#"{"topic":"match.a"}"#)).unwrap();
        assert_eq!(t.partition_in(8), Ok(0));
    }

    #[test]
    fn targets_are_validated() {
        let err = |j: &str| target(&fields(j)).unwrap_err().text();
        assert_eq!(err(r#"{}"#), "topic is required");
        assert!(err(r#"{"topic":"a..b"}"#).starts_with("invalid topic"));
        assert!(err(r#"{"topic":"a.*"}"#).starts_with("invalid topic"));
        assert_eq!(
            err(r#"{"topic":"a","partition":-1}"#),
            format!("partition must be between 0 and {}", u32::MAX)
        );
        let long_key = format!(
            r#"{{"topic":"a","key":"{}"}}"#,
            "k".repeat(KEY_BYTES_MAX + 1)
        );
        assert!(err(&long_key).starts_with("key is too long"));
        let ok_key = format!(r#"{{"topic":"a","key":"{}"}}"#, "k".repeat(KEY_BYTES_MAX));
        assert!(target(&fields(&ok_key)).is_ok());
    }

    #[test]
    fn consumers_are_bounded_and_prefixed() {
        let c = consumer(&fields(r#"{"group":"billing","member":"w1"}"#), true)
            .unwrap()
            .unwrap();
        assert_eq!(c.cursor_group(), "backend:billing");
        assert_eq!(consumer(&fields("{}"), false), Ok(None));
        assert_eq!(
            consumer(&fields("{}"), true).unwrap_err().text(),
            "group is required"
        );
        assert_eq!(
            consumer(&fields(r#"{"member":"w"}"#), false)
                .unwrap_err()
                .text(),
            "member needs a group"
        );
        let long = format!(r#"{{"group":"{}"}}"#, "g".repeat(GROUP_BYTES_MAX + 1));
        assert!(consumer(&fields(&long), true).is_err());
        let at = format!(r#"{{"group":"{}"}}"#, "g".repeat(GROUP_BYTES_MAX));
        let c = consumer(&fields(&at), true).unwrap().unwrap();
        // The longest group still makes a valid cursor key.
        assert!(crate::messaging::cursor::CursorKey::new("t", 0, &c.cursor_group(), "").is_ok());
        assert!(consumer(&fields(r#"{"group":"a\u0000b"}"#), true).is_err());
    }

    #[test]
    fn max_defaults_and_is_bounded() {
        assert_eq!(records_max(&fields("{}")), Ok(STREAM_RECORDS_DEFAULT));
        assert_eq!(records_max(&fields(r#"{"max":1}"#)), Ok(1));
        assert_eq!(
            records_max(&fields(r#"{"max":1000}"#)),
            Ok(STREAM_RECORDS_MAX)
        );
        assert!(records_max(&fields(r#"{"max":0}"#)).is_err());
        assert!(records_max(&fields(r#"{"max":1001}"#)).is_err());
    }

    /// Mutated valid requests never panic; whatever is accepted names a valid topic, keeps
    /// its command byte, and (for a publish) makes a record that fits one reply page.
    #[test]
    fn mutated_requests_never_panic_and_accepted_publishes_fit_a_page() {
        use boltq_io::testutil::Rng;
        let bases: [&[u8]; 4] = [
            br#"{"topic":"match.alice","key":"alice","headers":{"t":"1"},"payload":{"s":[1,2]}}"#,
            br#"{"topic":"orders.eu","partition":2,"payload_base64":"AP8BAg=="}"#,
            br#"{"topic":"orders.eu","from":5,"max":10,"group":"g","member":"m","wait_ms":9}"#,
            br#"{"topic":"orders.eu","key":"k","group":"billing","seq":42}"#,
        ];
        let alphabet = br#"{}[]",:0123456789-.aAzZ\u*# "#;
        let mut rng = Rng::new(0x5712);
        let mut accepted = 0;
        for _ in 0..20_000 {
            let mut bytes = bases[rng.below(bases.len() as u64) as usize].to_vec();
            for _ in 0..rng.below(4) {
                let at = rng.below(bytes.len() as u64 + 1) as usize;
                let c = alphabet[rng.below(alphabet.len() as u64) as usize];
                match rng.below(3) {
                    0 => bytes.insert(at, c),
                    1 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    _ if at < bytes.len() => bytes[at] = c,
                    _ => {}
                }
            }
            let code = stream_op::STREAM_PUBLISH + rng.below(4) as u8;
            let Some(result) = parse(code, &bytes) else {
                panic!("0x{code:02x} is a stream command");
            };
            let req = match result {
                Ok(req) => req,
                Err(e) => {
                    assert!(!e.text().is_empty());
                    continue;
                }
            };
            accepted += 1;
            assert_eq!(req.code(), code);
            if let StreamRequest::Publish(p) = req {
                topic::Namespace::of(&p.target.topic).unwrap();
                let rec = boltq_io::record::Record {
                    seq: 1,
                    timestamp_ns: 0,
                    flags: 0,
                    epoch: 0,
                    key: bytes::Bytes::from(p.target.key.clone()),
                    headers: Vec::new(),
                    payload: bytes::Bytes::from(p.payload),
                };
                let head = records::PageHead {
                    topic: &p.target.topic,
                    partition: 0,
                    from: 1,
                    first_seq: 1,
                    next_seq: 2,
                    gap: false,
                    consumer: None,
                };
                let mut out = Vec::new();
                assert_eq!(records::page(&head, &[rec], &mut out), 1);
            }
        }
        assert!(
            accepted > 1000,
            "the mutations leave many requests valid: {accepted}"
        );
    }

    #[test]
    fn the_queue_parser_leaves_stream_bytes_to_this_plane() {
        use crate::queue::protocol::frame::Frame;
        use crate::queue::protocol::request::{self, RequestError, EXTRA_CODES_FROM};
        assert_eq!(stream_op::STREAM_PUBLISH, EXTRA_CODES_FROM);
        for code in stream_op::STREAM_PUBLISH..=stream_op::STREAM_COMMIT {
            let payload: &[u8] = br#"{"topic":"orders.eu","group":"g","seq":1}"#;
            match request::parse(Frame { code, payload }) {
                Err(RequestError::UnknownCommand(c)) => assert_eq!(c, code),
                other => panic!("the queue parser took 0x{code:02x}: {other:?}"),
            }
            match parse(code, payload) {
                Some(Ok(r)) => assert_eq!(r.code(), code),
                other => panic!("0x{code:02x}: {other:?}"),
            }
        }
    }

    #[test]
    fn unknown_codes_are_not_stream_commands() {
        assert!(parse(0x1C, b"{}").is_none());
        assert!(parse(0x21, b"{}").is_none());
        for code in 0x1D..=0x20 {
            assert!(parse(code, b"not json").unwrap().is_err(), "0x{code:02x}");
        }
    }
}
