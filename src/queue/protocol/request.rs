//! Request parsing for the v1 TCP protocol (spec §2.4–§2.5): one [`Frame`] in, one
//! [`Request`] or [`RequestError`] out. Pure: no I/O, no broker state, no config.
//!
//! JSON is decoded with Go `encoding/json` semantics (see `request/json.rs`): unknown keys
//! ignored, keys matched case-insensitively, members applied in order so the last duplicate
//! wins (`{"Topic":"a","topic":"b"}` gives `b`, the reverse order `a`, as in Go), `null`
//! leaves the zero value, wrong types fail with `invalid json: <Go-style detail>`, an
//! empty payload fails with `invalid json: unexpected end of JSON input`. PING, STATS,
//! CLUSTER_STATUS and CONFIRM_SELECT ignore their payload entirely, even when it is not
//! JSON. Nesting deeper than [`DEPTH_MAX`] (128, the request object included) fails with
//! `invalid json: exceeded max depth of 128`; containers are walked without recursion.
//!
//! # BoltQ additions (a v1 client never sends these, so it sees exactly v1 behaviour)
//!
//! Optional CONSUME (0x03) fields:
//!
//! | Field | Type | Meaning |
//! |---|---|---|
//! | `wait_ms` | u64 | Long-poll: wait up to this many milliseconds for a message before replying EMPTY. Capped at [`WAIT_MS_MAX`] (30,000) so a reply never waits longer than 30 s; 0 or absent = v1's non-blocking poll. |
//! | `max` | int 1..=[`BATCH_MAX`] | Batch: the OK reply is `{"messages":[<message>,…]}` (each element shaped like a v1 CONSUME reply) instead of one message. EMPTY when there is none. Absent = v1's single-message reply. |
//!
//! Both are ignored when `id` selects SUBSCRIBE.
//!
//! Dead-letter commands (`queue` is the *work queue* name; its dead letters live in
//! `<queue>_dead_letter`, v1's naming, so `orders` addresses `orders_dead_letter`). An
//! empty payload counts as `{}`.
//!
//! | Byte | Name | Request | OK reply |
//! |---|---|---|---|
//! | `0x19` | DLQ_LIST | `{"queue"?}` (filter) | `{"dead_letters":[{"queue","dead_letter","count"},…]}`, plus `"truncated":true` if the list was cut to fit a frame |
//! | `0x1A` | DLQ_READ | `{"queue","offset"?,"limit"?}` (limit 1..=1000, default 100) | `{"queue","offset","messages":[…],"next_offset"}` — messages stay in the DLQ |
//! | `0x1B` | DLQ_REQUEUE | `{"queue","limit"?}` (≥ 1, default all) | `{"queue","requeued":n}` — moved back to the tail of `queue`, `retry` reset to 0 |
//! | `0x1C` | DLQ_PURGE | `{"queue"}` | `{"queue","purged":n}` |
//!
//! Command bytes from [`EXTRA_CODES_FROM`] (`0x1D`) up belong to other planes (the
//! messaging plane's stream commands, `0x1D`–`0x20`): the server registers their handler
//! with the connection (`queue::server::extra`), and this parser refuses them as unknown.
//!
//! # Stricter than v1 (each closes a hole v1 has; no v1 SDK sends such requests)
//!
//! - Exchange types are validated: anything but `direct`, `fanout`, `topic`, `headers`
//!   (empty means `direct`, as in v1) fails with
//!   `unknown exchange type "<t>": expected direct, fanout, topic or headers`
//!   (v1 accepted it and routed nothing).
//! - Names (topic, queue, exchange, ids, keys, node ids and addresses) are at most
//!   [`NAME_BYTES_MAX`] bytes: `<field> is too long: at most 1024 bytes`.
//! - A published message whose payload and headers could not be delivered inside one
//!   4 MiB frame is refused at publish (`message too large: …`) instead of being stored and
//!   then breaking every consumer's connection.

pub mod json;

use super::frame::{op, Frame};
use crate::queue::message::MessageId;
use crate::queue::protocol::reply;
use bytes::Bytes;
use json::{key_matches, IntType, Reader, Syntax};
use std::collections::BTreeMap;
use std::fmt;

pub use json::DEPTH_MAX;

/// BoltQ's additive command bytes (>= [`op::EXTENSIONS_FIRST`]).
pub mod ext_op {
    pub const DLQ_LIST: u8 = 0x19;
    pub const DLQ_READ: u8 = 0x1A;
    pub const DLQ_REQUEUE: u8 = 0x1B;
    pub const DLQ_PURGE: u8 = 0x1C;
}

/// The first command byte the queue plane leaves to other planes: bytes from here up are
/// served by the handler the server registers (`queue::server::extra`), if any.
pub const EXTRA_CODES_FROM: u8 = 0x1D;

/// Longest long-poll a CONSUME may ask for; larger `wait_ms` values are reduced to this.
pub const WAIT_MS_MAX: u64 = 30_000;
/// Largest CONSUME batch (`max`).
pub const BATCH_MAX: u32 = 1000;
/// DLQ_READ `limit` when absent, and its largest value.
pub const DLQ_READ_LIMIT_DEFAULT: u32 = 100;
pub const DLQ_READ_LIMIT_MAX: u32 = 1000;
/// Longest name accepted in any name-like field. Bounds every reply that echoes a name
/// and keeps per-queue bookkeeping small.
pub const NAME_BYTES_MAX: usize = 1024;

/// One parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// 0x01: to a work queue.
    Publish(Publish),
    /// 0x02: to a pub/sub topic. `delay`/`ttl` are type-checked as in v1, then dropped
    /// (always 0 here).
    PublishTopic(Publish),
    /// 0x03 without `id`.
    Consume(Consume),
    /// 0x03 with a non-empty `id`.
    Subscribe(Subscribe),
    /// 0x04.
    Ack(AckTarget),
    /// 0x05.
    Nack(AckTarget),
    /// 0x04 with `ids` (a BoltQ addition): several messages in one request.
    AckMany(Vec<AckTarget>),
    /// 0x05 with `ids`.
    NackMany(Vec<AckTarget>),
    /// 0x06.
    Ping,
    /// 0x07.
    Stats,
    /// 0x08. v1 parses the payload only when the server has an API key, so a parse
    /// failure is carried here rather than returned: the connection replies with it
    /// (`invalid auth payload`) only when a key is configured, and OK otherwise.
    Auth {
        api_key: Result<String, RequestError>,
    },
    /// 0x09. `count <= 0` means no limit.
    Prefetch { count: i64 },
    /// 0x10. On a server that is not clustered the connection answers
    /// `clustering is not enabled` (v1 checks that first).
    ClusterJoin { node_id: String, addr: String },
    /// 0x11. As for join.
    ClusterLeave { node_id: String },
    /// 0x12.
    ClusterStatus,
    /// 0x13.
    ConfirmSelect,
    /// 0x14.
    ExchangeDeclare(ExchangeDeclare),
    /// 0x15.
    ExchangeDelete { name: String },
    /// 0x16.
    BindQueue(Binding),
    /// 0x17. `headers`/`match_all` are not part of UNBIND (left empty/false).
    UnbindQueue(Binding),
    /// 0x18.
    PublishExchange(PublishExchange),
    /// 0x19: dead-letter queues with their counts, optionally only the one of `queue`.
    DlqList { queue: Option<String> },
    /// 0x1A: up to `limit` dead letters of `queue` from `offset`, not removed.
    DlqRead {
        queue: String,
        offset: u64,
        limit: u32,
    },
    /// 0x1B: move up to `limit` (None = all) dead letters back to `queue`, retry reset.
    DlqRequeue { queue: String, limit: Option<u64> },
    /// 0x1C: drop every dead letter of `queue`.
    DlqPurge { queue: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    pub topic: String,
    /// The payload's JSON text, compacted (whitespace outside strings removed), which is
    /// what v1 echoes: it re-serialises its `json.RawMessage` compactly. Strings are kept
    /// as written, escapes included (even lone surrogate escapes, like v1); invalid UTF-8
    /// is replaced by U+FFFD so stored text is always UTF-8. `null` when absent.
    pub payload: Bytes,
    pub headers: BTreeMap<String, String>,
    pub delay_ns: i64,
    pub ttl_ns: i64,
    /// As sent; the broker clamps to 0..=9 when queueing (v1 keeps the stored value).
    pub priority: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consume {
    pub topic: String,
    /// 0 = v1 non-blocking poll; otherwise at most [`WAIT_MS_MAX`].
    pub wait_ms: u64,
    /// `Some(n)` = batch reply of up to n messages (1..=[`BATCH_MAX`]).
    pub max: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    pub topic: String,
    pub id: String,
    pub durable: bool,
    /// BoltQ addition: the subscriber ACKs each push by its message id, and a push counts
    /// as received only then (durable subscriptions only; see `server/push_acks.rs`).
    pub ack: bool,
}

/// The `id` of an ACK/NACK, kept as sent: v1's error text echoes it
/// (`message <id> not found in pending`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckTarget {
    pub id: String,
}

impl AckTarget {
    /// The id, when it is one this server could have issued; `None` → not found.
    pub fn message_id(&self) -> Option<MessageId> {
        MessageId::parse(&self.id)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExchangeKind {
    Direct,
    Fanout,
    Topic,
    Headers,
}

impl ExchangeKind {
    /// v1's type strings (exact, lowercase). Empty means `direct`, as v1 defaults it.
    pub fn parse(s: &str) -> Option<ExchangeKind> {
        match s {
            "" | "direct" => Some(ExchangeKind::Direct),
            "fanout" => Some(ExchangeKind::Fanout),
            "topic" => Some(ExchangeKind::Topic),
            "headers" => Some(ExchangeKind::Headers),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeDeclare {
    pub name: String,
    pub kind: ExchangeKind,
    pub durable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Binding {
    pub exchange: String,
    pub queue: String,
    pub binding_key: String,
    pub headers: BTreeMap<String, String>,
    pub match_all: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishExchange {
    /// `""` = the default exchange (routes to the queue named by `routing_key`).
    pub exchange: String,
    pub routing_key: String,
    /// As [`Publish::payload`].
    pub payload: Bytes,
    pub headers: BTreeMap<String, String>,
    pub priority: i64,
}

impl Request {
    /// The command byte this request came in with.
    pub fn code(&self) -> u8 {
        match self {
            Request::Publish(_) => op::PUBLISH,
            Request::PublishTopic(_) => op::PUBLISH_TOPIC,
            Request::Consume(_) | Request::Subscribe(_) => op::CONSUME,
            Request::Ack(_) | Request::AckMany(_) => op::ACK,
            Request::Nack(_) | Request::NackMany(_) => op::NACK,
            Request::Ping => op::PING,
            Request::Stats => op::STATS,
            Request::Auth { .. } => op::AUTH,
            Request::Prefetch { .. } => op::PREFETCH,
            Request::ClusterJoin { .. } => op::CLUSTER_JOIN,
            Request::ClusterLeave { .. } => op::CLUSTER_LEAVE,
            Request::ClusterStatus => op::CLUSTER_STATUS,
            Request::ConfirmSelect => op::CONFIRM_SELECT,
            Request::ExchangeDeclare(_) => op::EXCHANGE_DECLARE,
            Request::ExchangeDelete { .. } => op::EXCHANGE_DELETE,
            Request::BindQueue(_) => op::BIND_QUEUE,
            Request::UnbindQueue(_) => op::UNBIND_QUEUE,
            Request::PublishExchange(_) => op::PUBLISH_EXCHANGE,
            Request::DlqList { .. } => ext_op::DLQ_LIST,
            Request::DlqRead { .. } => ext_op::DLQ_READ,
            Request::DlqRequeue { .. } => ext_op::DLQ_REQUEUE,
            Request::DlqPurge { .. } => ext_op::DLQ_PURGE,
        }
    }
}

/// Why a request is refused. The reply is ERROR `{"error": text()}`; the connection stays
/// open (the AUTH gate, which does close it, is the connection's own rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// `unknown command: 0x%02x`.
    UnknownCommand(u8),
    /// `invalid json: <detail>`.
    InvalidJson(String),
    /// Plain `invalid json` (ACK, NACK, CLUSTER_JOIN, CLUSTER_LEAVE in v1).
    InvalidJsonNoDetail,
    /// `invalid auth payload`.
    InvalidAuthPayload,
    /// `invalid prefetch payload`.
    InvalidPrefetchPayload,
    /// A v1 validation error with its fixed text, e.g. `topic is required`.
    Required(&'static str),
    /// A BoltQ validation error beyond v1 (see the module docs), full text.
    Invalid(String),
}

impl RequestError {
    /// The text for the `{"error": ...}` reply, exactly as v1 words it.
    pub fn text(&self) -> String {
        match self {
            RequestError::UnknownCommand(code) => format!("unknown command: 0x{code:02x}"),
            RequestError::InvalidJson(detail) => format!("invalid json: {detail}"),
            RequestError::InvalidJsonNoDetail => "invalid json".to_string(),
            RequestError::InvalidAuthPayload => "invalid auth payload".to_string(),
            RequestError::InvalidPrefetchPayload => "invalid prefetch payload".to_string(),
            RequestError::Required(text) => text.to_string(),
            RequestError::Invalid(text) => text.clone(),
        }
    }

    /// Whether the connection must be closed after the error reply. No parse error does:
    /// v1 keeps the connection for every one of them.
    pub fn closes_connection(&self) -> bool {
        false
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

impl std::error::Error for RequestError {}

const TOPIC_REQUIRED: RequestError = RequestError::Required("topic is required");
const ID_REQUIRED: RequestError = RequestError::Required("id is required");
const NAME_REQUIRED: RequestError = RequestError::Required("name is required");
const QUEUE_REQUIRED: RequestError = RequestError::Required("queue is required");
const EXCHANGE_AND_QUEUE_REQUIRED: RequestError =
    RequestError::Required("exchange and queue are required");
const NODE_AND_ADDR_REQUIRED: RequestError =
    RequestError::Required("node_id and addr are required");
const NODE_REQUIRED: RequestError = RequestError::Required("node_id is required");

/// Parses one request frame.
pub fn parse(frame: Frame<'_>) -> Result<Request, RequestError> {
    let p = frame.payload;
    match frame.code {
        op::PUBLISH => parse_publish(p).map(Request::Publish),
        op::PUBLISH_TOPIC => parse_publish_topic(p),
        op::CONSUME => parse_consume(p),
        op::ACK => parse_ack(p, false),
        op::NACK => parse_ack(p, true),
        op::PING => Ok(Request::Ping),
        op::STATS => Ok(Request::Stats),
        op::AUTH => Ok(Request::Auth {
            api_key: parse_auth(p),
        }),
        op::PREFETCH => parse_prefetch(p),
        op::CLUSTER_JOIN => parse_join(p),
        op::CLUSTER_LEAVE => parse_leave(p),
        op::CLUSTER_STATUS => Ok(Request::ClusterStatus),
        op::CONFIRM_SELECT => Ok(Request::ConfirmSelect),
        op::EXCHANGE_DECLARE => parse_exchange_declare(p),
        op::EXCHANGE_DELETE => parse_exchange_delete(p),
        op::BIND_QUEUE => parse_binding(p, true).map(Request::BindQueue),
        op::UNBIND_QUEUE => parse_binding(p, false).map(Request::UnbindQueue),
        op::PUBLISH_EXCHANGE => parse_publish_exchange(p),
        ext_op::DLQ_LIST => parse_dlq_list(p),
        ext_op::DLQ_READ => parse_dlq_read(p),
        ext_op::DLQ_REQUEUE => parse_dlq_requeue(p),
        ext_op::DLQ_PURGE => parse_dlq_purge(p),
        code => Err(RequestError::UnknownCommand(code)),
    }
}

/// Decodes a v1 JSON object; `member` handles the keys it knows (returning `None` for the
/// rest, which are skipped, as Go ignores unknown keys).
pub fn decode<F>(payload: &[u8], struct_name: &'static str, mut member: F) -> Result<(), String>
where
    F: FnMut(&mut Reader<'_>, &str) -> Option<Result<(), Syntax>>,
{
    json::decode_object(payload, struct_name, |r, key| match member(r, key) {
        Some(result) => result,
        None => r.skip(),
    })
}

pub fn invalid_json(detail: String) -> RequestError {
    RequestError::InvalidJson(detail)
}

/// BoltQ addition: refuses over-long names (see [`NAME_BYTES_MAX`]).
pub fn check_name(field: &str, value: &str) -> Result<(), RequestError> {
    if value.len() > NAME_BYTES_MAX {
        return Err(RequestError::Invalid(format!(
            "{field} is too long: at most {NAME_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// BoltQ addition: a message must fit in any frame that will deliver it.
fn check_message_size(
    payload: &[u8],
    headers: &BTreeMap<String, String>,
) -> Result<(), RequestError> {
    let body_bytes = payload.len() + reply::headers_json_len(headers);
    if body_bytes > reply::MESSAGE_BODY_BYTES_MAX {
        return Err(RequestError::Invalid(format!(
            "message too large: payload and headers take {body_bytes} bytes, at most {} fit in a delivery frame",
            reply::MESSAGE_BODY_BYTES_MAX
        )));
    }
    Ok(())
}

/// The fields of v1's publish struct (shared by 0x01 and 0x02).
#[derive(Default)]
struct PublishFields {
    topic: String,
    payload: Vec<u8>,
    headers: BTreeMap<String, String>,
    delay: i128,
    ttl: i128,
    priority: i128,
}

/// Raw-JSON text for an absent payload, as Go marshals a nil `json.RawMessage`.
const NULL_PAYLOAD: &[u8] = b"null";

/// The payload as stored: a `Bytes` keeps its `Vec`'s whole capacity, so spare room left
/// by copying a compact object or array is given back first (a string payload is copied
/// with exact room already).
fn payload_bytes(mut raw: Vec<u8>) -> Bytes {
    if raw.is_empty() {
        Bytes::from_static(NULL_PAYLOAD)
    } else {
        raw.shrink_to_fit();
        Bytes::from(raw)
    }
}

fn decode_publish(payload: &[u8]) -> Result<PublishFields, RequestError> {
    let mut f = PublishFields::default();
    decode(payload, "publishRequest", |r, key| {
        Some(if key_matches(key, "topic") {
            r.read_str("topic", &mut f.topic)
        } else if key_matches(key, "payload") {
            r.read_raw(&mut f.payload)
        } else if key_matches(key, "headers") {
            r.read_string_map("headers", &mut f.headers)
        } else if key_matches(key, "delay") {
            r.read_int("delay", IntType::Int64, &mut f.delay)
        } else if key_matches(key, "ttl") {
            r.read_int("ttl", IntType::Int64, &mut f.ttl)
        } else if key_matches(key, "priority") {
            r.read_int("priority", IntType::Int, &mut f.priority)
        } else {
            return None;
        })
    })
    .map_err(invalid_json)?;
    if f.topic.is_empty() {
        return Err(TOPIC_REQUIRED);
    }
    check_name("topic", &f.topic)?;
    check_message_size(&f.payload, &f.headers)?;
    Ok(f)
}

fn parse_publish(payload: &[u8]) -> Result<Publish, RequestError> {
    let f = decode_publish(payload)?;
    // read_int checked the i64 range.
    Ok(Publish {
        topic: f.topic,
        payload: payload_bytes(f.payload),
        headers: f.headers,
        delay_ns: f.delay as i64,
        ttl_ns: f.ttl as i64,
        priority: f.priority as i64,
    })
}

fn parse_publish_topic(payload: &[u8]) -> Result<Request, RequestError> {
    let mut p = parse_publish(payload)?;
    p.delay_ns = 0;
    p.ttl_ns = 0;
    Ok(Request::PublishTopic(p))
}

fn parse_consume(payload: &[u8]) -> Result<Request, RequestError> {
    let (mut topic, mut id, mut durable, mut ack) = (String::new(), String::new(), false, false);
    let (mut wait_ms, mut max) = (0i128, None::<i128>);
    decode(payload, "consumeRequest", |r, key| {
        Some(if key_matches(key, "topic") {
            r.read_str("topic", &mut topic)
        } else if key_matches(key, "id") {
            r.read_str("id", &mut id)
        } else if key_matches(key, "durable") {
            r.read_bool("durable", &mut durable)
        } else if key_matches(key, "ack") {
            r.read_bool("ack", &mut ack)
        } else if key_matches(key, "wait_ms") {
            r.read_int("wait_ms", IntType::Uint64, &mut wait_ms)
        } else if key_matches(key, "max") {
            read_optional_int(r, "max", &mut max)
        } else {
            return None;
        })
    })
    .map_err(invalid_json)?;
    if topic.is_empty() {
        return Err(TOPIC_REQUIRED);
    }
    check_name("topic", &topic)?;
    if !id.is_empty() {
        check_name("id", &id)?;
        if ack && !durable {
            return Err(RequestError::Invalid(
                "ack needs durable: only a durable subscription keeps pushes until they are acknowledged"
                    .to_string(),
            ));
        }
        return Ok(Request::Subscribe(Subscribe {
            topic,
            id,
            durable,
            ack,
        }));
    }
    let max = match max {
        None => None,
        Some(n) if (1..=BATCH_MAX as i128).contains(&n) => Some(n as u32),
        Some(_) => {
            return Err(RequestError::Invalid(format!(
                "max must be between 1 and {BATCH_MAX}"
            )))
        }
    };
    Ok(Request::Consume(Consume {
        topic,
        wait_ms: (wait_ms as u64).min(WAIT_MS_MAX),
        max,
    }))
}

/// An optional integer (Go: `*int`): `null` resets it to absent.
pub fn read_optional_int(
    r: &mut Reader<'_>,
    field: &str,
    into: &mut Option<i128>,
) -> Result<(), Syntax> {
    let mut value = i128::MIN;
    r.read_int(field, IntType::Int, &mut value)?;
    // read_int leaves the sentinel for `null` and for type errors (the request then fails).
    *into = (value != i128::MIN).then_some(value);
    Ok(())
}

/// Most ids in one ACK/NACK with `ids` (as many as one batch CONSUME hands out).
pub const ACK_IDS_MAX: usize = BATCH_MAX as usize;

/// An ACK (or, with `nack`, a NACK): v1's one `id`, or (a BoltQ addition) several `ids`.
fn parse_ack(payload: &[u8], nack: bool) -> Result<Request, RequestError> {
    let mut id = String::new();
    let mut ids_raw = Vec::new();
    decode(payload, "ackRequest", |r, key| {
        if key_matches(key, "id") {
            Some(r.read_str("id", &mut id))
        } else if key_matches(key, "ids") {
            ids_raw.clear();
            Some(r.read_raw(&mut ids_raw))
        } else {
            None
        }
    })
    .map_err(|_| RequestError::InvalidJsonNoDetail)?;
    if ids_raw.is_empty() || ids_raw == b"null" {
        if id.is_empty() {
            return Err(ID_REQUIRED);
        }
        check_name("id", &id)?;
        let target = AckTarget { id };
        return Ok(if nack {
            Request::Nack(target)
        } else {
            Request::Ack(target)
        });
    }
    if !id.is_empty() {
        return Err(RequestError::Invalid(
            "give either id or ids, not both".to_string(),
        ));
    }
    let ids = parse_ids(&ids_raw)?;
    for id in &ids {
        check_name("ids[]", id)?;
    }
    let targets = ids.into_iter().map(|id| AckTarget { id }).collect();
    Ok(if nack {
        Request::NackMany(targets)
    } else {
        Request::AckMany(targets)
    })
}

/// `ids`: a JSON array of 1 to [`ACK_IDS_MAX`] non-empty strings. Counted while read, so a
/// long array is refused before it is held.
fn parse_ids(raw: &[u8]) -> Result<Vec<String>, RequestError> {
    struct Ids;
    impl<'de> serde::de::Visitor<'de> for Ids {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "an array of at most {ACK_IDS_MAX} message ids")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Vec<String>, A::Error> {
            let mut ids = Vec::new();
            while let Some(id) = seq.next_element::<String>()? {
                if ids.len() == ACK_IDS_MAX {
                    return Err(serde::de::Error::custom(format!(
                        "more than {ACK_IDS_MAX} ids"
                    )));
                }
                ids.push(id);
            }
            Ok(ids)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(raw);
    let ids = serde::Deserializer::deserialize_seq(&mut de, Ids)
        .map_err(|e| RequestError::Invalid(format!("ids: {e}")))?;
    if ids.is_empty() {
        return Err(RequestError::Invalid("ids is empty".to_string()));
    }
    if ids.iter().any(String::is_empty) {
        return Err(RequestError::Invalid("ids: an id is empty".to_string()));
    }
    Ok(ids)
}

fn parse_auth(payload: &[u8]) -> Result<String, RequestError> {
    let mut api_key = String::new();
    decode(payload, "authRequest", |r, key| {
        key_matches(key, "api_key").then(|| r.read_str("api_key", &mut api_key))
    })
    .map_err(|_| RequestError::InvalidAuthPayload)?;
    Ok(api_key)
}

fn parse_prefetch(payload: &[u8]) -> Result<Request, RequestError> {
    let mut count = 0i128;
    decode(payload, "prefetchRequest", |r, key| {
        key_matches(key, "count").then(|| r.read_int("count", IntType::Int, &mut count))
    })
    .map_err(|_| RequestError::InvalidPrefetchPayload)?;
    Ok(Request::Prefetch {
        count: count as i64,
    })
}

fn parse_join(payload: &[u8]) -> Result<Request, RequestError> {
    let (mut node_id, mut addr) = (String::new(), String::new());
    decode(payload, "joinRequest", |r, key| {
        Some(if key_matches(key, "node_id") {
            r.read_str("node_id", &mut node_id)
        } else if key_matches(key, "addr") {
            r.read_str("addr", &mut addr)
        } else {
            return None;
        })
    })
    .map_err(|_| RequestError::InvalidJsonNoDetail)?;
    if node_id.is_empty() || addr.is_empty() {
        return Err(NODE_AND_ADDR_REQUIRED);
    }
    check_name("node_id", &node_id)?;
    check_name("addr", &addr)?;
    Ok(Request::ClusterJoin { node_id, addr })
}

fn parse_leave(payload: &[u8]) -> Result<Request, RequestError> {
    let mut node_id = String::new();
    decode(payload, "leaveRequest", |r, key| {
        key_matches(key, "node_id").then(|| r.read_str("node_id", &mut node_id))
    })
    .map_err(|_| RequestError::InvalidJsonNoDetail)?;
    if node_id.is_empty() {
        return Err(NODE_REQUIRED);
    }
    check_name("node_id", &node_id)?;
    Ok(Request::ClusterLeave { node_id })
}

fn parse_exchange_declare(payload: &[u8]) -> Result<Request, RequestError> {
    let (mut name, mut kind, mut durable) = (String::new(), String::new(), false);
    decode(payload, "exchangeDeclareRequest", |r, key| {
        Some(if key_matches(key, "name") {
            r.read_str("name", &mut name)
        } else if key_matches(key, "type") {
            r.read_str("type", &mut kind)
        } else if key_matches(key, "durable") {
            r.read_bool("durable", &mut durable)
        } else {
            return None;
        })
    })
    .map_err(invalid_json)?;
    if name.is_empty() {
        return Err(NAME_REQUIRED);
    }
    check_name("name", &name)?;
    let kind = ExchangeKind::parse(&kind).ok_or_else(|| {
        RequestError::Invalid(format!(
            "unknown exchange type {}: expected direct, fanout, topic or headers",
            quoted(&kind)
        ))
    })?;
    Ok(Request::ExchangeDeclare(ExchangeDeclare {
        name,
        kind,
        durable,
    }))
}

/// `"<s>"` as Go's `%q` shows it (close enough: JSON string quoting), shortened so an
/// error reply stays small.
fn quoted(s: &str) -> String {
    let mut end = s.len().min(NAME_BYTES_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    serde_json::to_string(&s[..end]).expect("a str always serialises")
}

fn parse_exchange_delete(payload: &[u8]) -> Result<Request, RequestError> {
    let mut name = String::new();
    decode(payload, "exchangeDeleteRequest", |r, key| {
        key_matches(key, "name").then(|| r.read_str("name", &mut name))
    })
    .map_err(invalid_json)?;
    if name.is_empty() {
        return Err(NAME_REQUIRED);
    }
    check_name("name", &name)?;
    Ok(Request::ExchangeDelete { name })
}

/// BIND_QUEUE (`with_headers`) or UNBIND_QUEUE (which has no headers/match_all fields, so
/// those keys are ignored like any unknown key).
fn parse_binding(payload: &[u8], with_headers: bool) -> Result<Binding, RequestError> {
    let mut b = Binding {
        exchange: String::new(),
        queue: String::new(),
        binding_key: String::new(),
        headers: BTreeMap::new(),
        match_all: false,
    };
    let struct_name = if with_headers {
        "bindRequest"
    } else {
        "unbindRequest"
    };
    decode(payload, struct_name, |r, key| {
        Some(if key_matches(key, "exchange") {
            r.read_str("exchange", &mut b.exchange)
        } else if key_matches(key, "queue") {
            r.read_str("queue", &mut b.queue)
        } else if key_matches(key, "binding_key") {
            r.read_str("binding_key", &mut b.binding_key)
        } else if with_headers && key_matches(key, "headers") {
            r.read_string_map("headers", &mut b.headers)
        } else if with_headers && key_matches(key, "match_all") {
            r.read_bool("match_all", &mut b.match_all)
        } else {
            return None;
        })
    })
    .map_err(invalid_json)?;
    if b.exchange.is_empty() || b.queue.is_empty() {
        return Err(EXCHANGE_AND_QUEUE_REQUIRED);
    }
    check_name("exchange", &b.exchange)?;
    check_name("queue", &b.queue)?;
    check_name("binding_key", &b.binding_key)?;
    Ok(b)
}

fn parse_publish_exchange(payload: &[u8]) -> Result<Request, RequestError> {
    let (mut exchange, mut routing_key) = (String::new(), String::new());
    let (mut raw, mut headers, mut priority) = (Vec::new(), BTreeMap::new(), 0i128);
    decode(payload, "publishExchangeRequest", |r, key| {
        Some(if key_matches(key, "exchange") {
            r.read_str("exchange", &mut exchange)
        } else if key_matches(key, "routing_key") {
            r.read_str("routing_key", &mut routing_key)
        } else if key_matches(key, "payload") {
            r.read_raw(&mut raw)
        } else if key_matches(key, "headers") {
            r.read_string_map("headers", &mut headers)
        } else if key_matches(key, "priority") {
            r.read_int("priority", IntType::Int, &mut priority)
        } else {
            return None;
        })
    })
    .map_err(invalid_json)?;
    check_name("exchange", &exchange)?;
    check_name("routing_key", &routing_key)?;
    check_message_size(&raw, &headers)?;
    Ok(Request::PublishExchange(PublishExchange {
        exchange,
        routing_key,
        payload: payload_bytes(raw),
        headers,
        priority: priority as i64,
    }))
}

/// The fields of every DLQ command. An empty payload counts as `{}`.
#[derive(Default)]
struct DlqFields {
    queue: String,
    offset: i128,
    limit: Option<i128>,
}

fn decode_dlq(payload: &[u8]) -> Result<DlqFields, RequestError> {
    let mut f = DlqFields::default();
    if payload
        .iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        return Ok(f);
    }
    decode(payload, "dlqRequest", |r, key| {
        Some(if key_matches(key, "queue") {
            r.read_str("queue", &mut f.queue)
        } else if key_matches(key, "offset") {
            r.read_int("offset", IntType::Uint64, &mut f.offset)
        } else if key_matches(key, "limit") {
            read_optional_int(r, "limit", &mut f.limit)
        } else {
            return None;
        })
    })
    .map_err(invalid_json)?;
    check_name("queue", &f.queue)?;
    Ok(f)
}

fn require_queue(f: &DlqFields) -> Result<(), RequestError> {
    if f.queue.is_empty() {
        return Err(QUEUE_REQUIRED);
    }
    Ok(())
}

fn parse_dlq_list(payload: &[u8]) -> Result<Request, RequestError> {
    let f = decode_dlq(payload)?;
    let queue = (!f.queue.is_empty()).then_some(f.queue);
    Ok(Request::DlqList { queue })
}

fn parse_dlq_read(payload: &[u8]) -> Result<Request, RequestError> {
    let f = decode_dlq(payload)?;
    require_queue(&f)?;
    let limit = match f.limit {
        None => DLQ_READ_LIMIT_DEFAULT,
        Some(n) if (1..=DLQ_READ_LIMIT_MAX as i128).contains(&n) => n as u32,
        Some(_) => {
            return Err(RequestError::Invalid(format!(
                "limit must be between 1 and {DLQ_READ_LIMIT_MAX}"
            )))
        }
    };
    Ok(Request::DlqRead {
        queue: f.queue,
        offset: f.offset as u64,
        limit,
    })
}

fn parse_dlq_requeue(payload: &[u8]) -> Result<Request, RequestError> {
    let f = decode_dlq(payload)?;
    require_queue(&f)?;
    let limit = match f.limit {
        None => None,
        Some(n) if n >= 1 => Some(n as u64),
        Some(_) => {
            return Err(RequestError::Invalid(
                "limit must be at least 1".to_string(),
            ))
        }
    };
    Ok(Request::DlqRequeue {
        queue: f.queue,
        limit,
    })
}

fn parse_dlq_purge(payload: &[u8]) -> Result<Request, RequestError> {
    let f = decode_dlq(payload)?;
    require_queue(&f)?;
    Ok(Request::DlqPurge { queue: f.queue })
}

#[cfg(test)]
mod tests;
