//! The gateway frame codec (spec/messaging-edge.md §2.2–§2.7, §2.11, §2.13): one WebSocket
//! message in, one [`Request`] or [`DecodeError`] out; and the encoders for every frame the
//! server sends. Pure functions over byte buffers: no sockets, no session state, no clock.
//!
//! # Decoding
//!
//! Text and binary messages are both JSON bytes, decoded by [`decode_request`]. The rules:
//!
//! - Unknown fields are ignored; `null` counts as absent (so it gives the field's zero
//!   value, as a v1 client that does not omit empty fields expects).
//! - Keys match exactly (lowercase). §2.2 lets a server accept v1's case-folded keys
//!   (`"OP"`); we do not: no v1 client sends them, and exact keys keep one spelling per
//!   field.
//! - A wrong type, a negative value for an unsigned field, bad base64, or a value over one
//!   of the limits below is a [`DecodeError`] that names the field. Unlike v1, which closed
//!   the socket, the connection answers `error`/`bad_request` and stays open (§18 G1, §19
//!   decisions 8 and 9); [`decode_error`] writes that frame, echoing `id` when it could be
//!   read.
//! - Semantic checks that need no server state are done here too, with v1's texts, so a
//!   decoded [`Request`] already satisfies them: `topic is required` (subscribe, history,
//!   publish), `conversation is required` (send, typing), `topic and seq are required`
//!   (commit), `state must be online, away or offline` (presence), an unknown `kind` (§18
//!   G26). Anything that needs the server (ACL, partition ranges, clamping `from_seq` to
//!   `next_seq` per §18 G14, stripping reserved header names per G41) is the handler's.
//!
//! Requests are parsed through a `serde_json::Value`: they are small, one at a time per
//! connection, and not on the delivery path, so the simplicity is worth the allocation.
//! A payload is bounded only by the WebSocket message size, which the connection limits
//! (`gateway.read_limit`).
//!
//! # Encoding
//!
//! Every encoder appends exactly one compact JSON object (one text message) to `out`, in
//! the field order of the §2.13 examples. Top-level fields that are empty, zero or false are
//! omitted, except `partition`, which is present whenever the frame names a partition
//! (§2.2); nested objects follow the §2.3 presence table. Strings are escaped by
//! [`write_json_string`] straight into `out`, payloads base64-encoded straight into it
//! (standard alphabet, padded): `record` frames are on the delivery hot path, so nothing
//! there builds a `serde_json::Value` or an intermediate string.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use boltq_io::record::{Record, RecordView};
use bytes::Bytes;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

// ---- limits ------------------------------------------------------------------------------

/// Longest correlation `id`. Longer ids are refused and not echoed.
pub const ID_BYTES_MAX: usize = 128;
/// Longest `topic`.
pub const TOPIC_BYTES_MAX: usize = 512;
/// Longest `conversation` id.
pub const CONVERSATION_BYTES_MAX: usize = 256;
/// Longest `client_msg_id` (the idempotency key kept in the dedup window).
pub const CLIENT_MSG_ID_BYTES_MAX: usize = 256;
/// Longest `device_id` (it becomes part of cursor keys, §18 G13).
pub const DEVICE_ID_BYTES_MAX: usize = 256;
/// Longest `user_agent`.
pub const USER_AGENT_BYTES_MAX: usize = 256;
/// Longest `resume` token (a real one is 66 bytes: `<22>.<43>`).
pub const RESUME_BYTES_MAX: usize = 256;
/// Longest publish `key`.
pub const KEY_BYTES_MAX: usize = 1024;
/// Most `headers` pairs on a send or publish (§18 G41).
pub const HEADERS_PAIRS_MAX: usize = 32;
/// Most `headers` bytes on a send or publish, keys plus values (§18 G41).
pub const HEADERS_BYTES_MAX: usize = 8 * 1024;
/// Most users in one `watch_presence` (§18 G10).
pub const USERS_MAX: usize = 1000;
/// Longest user id in `watch_presence`.
pub const USER_ID_BYTES_MAX: usize = 256;
/// Longest client-supplied text quoted back in an error message (an unknown `op`).
pub const QUOTE_BYTES_MAX: usize = 64;

/// The protocol version this server speaks; sent in every `welcome`.
pub const PROTOCOL_VERSION: i64 = 1;

// ---- requests ----------------------------------------------------------------------------

/// `send.kind`: which conversation namespace (`chat.direct.*` or `chat.group.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConversationKind {
    #[default]
    Direct,
    Group,
}

impl ConversationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Group => "group",
        }
    }
}

/// A device's presence state (`presence.state`, `presence_event.presence.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresenceState {
    Online,
    Away,
    Offline,
}

impl PresenceState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Online => "online",
            Self::Away => "away",
            Self::Offline => "offline",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "online" => Some(Self::Online),
            "away" => Some(Self::Away),
            "offline" => Some(Self::Offline),
            _ => None,
        }
    }
}

/// One decoded client frame (§2.5, plus `publish` from §18 G28). `id` is the correlation
/// id to echo (empty when the client sent none). Strings are within the limits above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `version` as sent (0 = absent); the handler refuses anything but 0 and 1.
    Hello {
        id: String,
        version: i64,
        device_id: String,
        user_agent: String,
        resume: String,
    },
    /// `topic` is non-empty. `from_seq` 0 = unspecified.
    Subscribe {
        id: String,
        topic: String,
        partition: Option<u32>,
        from_seq: u64,
    },
    /// No validation, as in v1: an empty topic is acked.
    Unsubscribe {
        id: String,
        topic: String,
        partition: Option<u32>,
    },
    /// `topic` is non-empty. `limit` 0 = the server's default; a negative `limit` (which v1
    /// accepted and treated as "default") decodes as 0, one above `u32::MAX` as `u32::MAX`.
    History {
        id: String,
        topic: String,
        partition: Option<u32>,
        from_seq: u64,
        limit: u32,
    },
    /// `conversation` is non-empty; `headers` within the G41 caps, keys non-empty.
    Send {
        id: String,
        conversation: String,
        kind: ConversationKind,
        client_msg_id: String,
        payload: Vec<u8>,
        headers: BTreeMap<String, String>,
    },
    /// `topic` is non-empty and `seq` (next sequence wanted) > 0.
    Commit {
        id: String,
        topic: String,
        partition: Option<u32>,
        seq: u64,
    },
    /// `conversation` is non-empty; `typing` absent = true.
    Typing {
        id: String,
        conversation: String,
        typing: bool,
    },
    Presence {
        id: String,
        state: PresenceState,
    },
    /// The new watch set (replaces the old one; empty clears it).
    WatchPresence {
        id: String,
        users: Vec<String>,
    },
    Ping {
        id: String,
    },
    /// `topic` is non-empty; `headers` as for `send`.
    Publish {
        id: String,
        topic: String,
        key: String,
        headers: BTreeMap<String, String>,
        payload: Vec<u8>,
    },
}

impl Request {
    /// The correlation id to echo on the response.
    pub fn id(&self) -> &str {
        match self {
            Self::Hello { id, .. }
            | Self::Subscribe { id, .. }
            | Self::Unsubscribe { id, .. }
            | Self::History { id, .. }
            | Self::Send { id, .. }
            | Self::Commit { id, .. }
            | Self::Typing { id, .. }
            | Self::Presence { id, .. }
            | Self::WatchPresence { id, .. }
            | Self::Ping { id }
            | Self::Publish { id, .. } => id,
        }
    }

    /// The wire name of the op (for logs and metrics).
    pub fn op(&self) -> &'static str {
        match self {
            Self::Hello { .. } => "hello",
            Self::Subscribe { .. } => "subscribe",
            Self::Unsubscribe { .. } => "unsubscribe",
            Self::History { .. } => "history",
            Self::Send { .. } => "send",
            Self::Commit { .. } => "commit",
            Self::Typing { .. } => "typing",
            Self::Presence { .. } => "presence",
            Self::WatchPresence { .. } => "watch_presence",
            Self::Ping { .. } => "ping",
            Self::Publish { .. } => "publish",
        }
    }
}

/// A frame that could not be decoded. `id` is the frame's correlation id when it could be
/// read (valid JSON object, `id` a string within [`ID_BYTES_MAX`]), else empty. `message`
/// is never empty and names the offending field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub id: String,
    pub message: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecodeError {}

/// Decodes one inbound WebSocket message (text or binary: both are JSON bytes).
pub fn decode_request(bytes: &[u8]) -> Result<Request, DecodeError> {
    let fail = |id: &str, message: String| {
        assert!(!message.is_empty());
        DecodeError {
            id: id.to_string(),
            message,
        }
    };
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| fail("", format!("invalid JSON: {e}")))?;
    let Value::Object(map) = value else {
        return Err(fail("", "a frame must be a JSON object".to_string()));
    };
    let mut fields = Fields(map);
    let id = fields.id().map_err(|m| fail("", m))?;
    match decode_op(&mut fields, &id) {
        Ok(request) => Ok(request),
        Err(m) => Err(fail(&id, m)),
    }
}

/// Dispatches on `op` and reads that op's fields. Errors are messages; the caller attaches
/// the id.
fn decode_op(f: &mut Fields, id: &str) -> Result<Request, String> {
    let op = match f.take("op") {
        None => return Err("op is required".to_string()),
        Some(Value::String(op)) => op,
        Some(_) => return Err("op must be a string".to_string()),
    };
    let id = id.to_string();
    Ok(match op.as_str() {
        "hello" => Request::Hello {
            id,
            version: f.version()?,
            device_id: f.string("device_id", DEVICE_ID_BYTES_MAX)?,
            user_agent: f.string("user_agent", USER_AGENT_BYTES_MAX)?,
            resume: f.string("resume", RESUME_BYTES_MAX)?,
        },
        "subscribe" => Request::Subscribe {
            id,
            topic: f.required_topic()?,
            partition: f.partition()?,
            from_seq: f.unsigned("from_seq")?,
        },
        "unsubscribe" => Request::Unsubscribe {
            id,
            topic: f.string("topic", TOPIC_BYTES_MAX)?,
            partition: f.partition()?,
        },
        "history" => Request::History {
            id,
            topic: f.required_topic()?,
            partition: f.partition()?,
            from_seq: f.unsigned("from_seq")?,
            limit: f.limit()?,
        },
        "send" => Request::Send {
            id,
            conversation: f.required_conversation()?,
            kind: f.kind()?,
            client_msg_id: f.string("client_msg_id", CLIENT_MSG_ID_BYTES_MAX)?,
            payload: f.payload()?,
            headers: f.headers()?,
        },
        "commit" => decode_commit(f, id)?,
        "typing" => Request::Typing {
            id,
            conversation: f.required_conversation()?,
            typing: f.boolean("typing", true)?,
        },
        "presence" => Request::Presence {
            id,
            state: f.state()?,
        },
        "watch_presence" => Request::WatchPresence {
            id,
            users: f.users()?,
        },
        "ping" => Request::Ping { id },
        "publish" => Request::Publish {
            id,
            topic: f.required_topic()?,
            key: f.string("key", KEY_BYTES_MAX)?,
            headers: f.headers()?,
            payload: f.payload()?,
        },
        other => return Err(format!("unknown op {}", quote(other))),
    })
}

fn decode_commit(f: &mut Fields, id: String) -> Result<Request, String> {
    let topic = f.string("topic", TOPIC_BYTES_MAX)?;
    let partition = f.partition()?;
    let seq = f.unsigned("seq")?;
    if topic.is_empty() || seq == 0 {
        return Err("topic and seq are required".to_string());
    }
    Ok(Request::Commit {
        id,
        topic,
        partition,
        seq,
    })
}

/// `s` as a quoted, escaped string of at most [`QUOTE_BYTES_MAX`] bytes of the original,
/// so an error message never carries a client's megabyte back.
fn quote(s: &str) -> String {
    let mut end = s.len().min(QUOTE_BYTES_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let cut = if end < s.len() { "…" } else { "" };
    format!("{:?}{cut}", &s[..end])
}

/// The top-level object of a request; each reader takes its field out (so strings move
/// instead of being copied) and treats `null` as absent.
struct Fields(Map<String, Value>);

impl Fields {
    fn take(&mut self, name: &str) -> Option<Value> {
        match self.0.remove(name) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// The correlation id, validated before anything else so later errors can echo it.
    fn id(&mut self) -> Result<String, String> {
        self.string("id", ID_BYTES_MAX)
    }

    fn string(&mut self, name: &str, max: usize) -> Result<String, String> {
        match self.take(name) {
            None => Ok(String::new()),
            Some(Value::String(s)) => check_len(name, s, max),
            Some(_) => Err(format!("{name} must be a string")),
        }
    }

    fn required_topic(&mut self) -> Result<String, String> {
        let topic = self.string("topic", TOPIC_BYTES_MAX)?;
        if topic.is_empty() {
            return Err("topic is required".to_string());
        }
        Ok(topic)
    }

    fn required_conversation(&mut self) -> Result<String, String> {
        let conversation = self.string("conversation", CONVERSATION_BYTES_MAX)?;
        if conversation.is_empty() {
            return Err("conversation is required".to_string());
        }
        Ok(conversation)
    }

    fn unsigned(&mut self, name: &str) -> Result<u64, String> {
        self.take(name).map_or(Ok(0), |v| unsigned_value(name, v))
    }

    /// Partitions are signed 32-bit on the wire (§0): 0..=i32::MAX.
    fn partition(&mut self) -> Result<Option<u32>, String> {
        let Some(v) = self.take("partition") else {
            return Ok(None);
        };
        match u32::try_from(unsigned_value("partition", v)?) {
            Ok(p) if p <= i32::MAX as u32 => Ok(Some(p)),
            _ => Err(format!("partition must be at most {}", i32::MAX)),
        }
    }

    /// v1 reads `limit` as a signed int and treats anything outside 1..history_limit as the
    /// default, so a negative limit means "default" (0 here) rather than an error.
    fn limit(&mut self) -> Result<u32, String> {
        match self.take("limit") {
            None => Ok(0),
            Some(Value::Number(n)) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Ok(u32::try_from(u).unwrap_or(u32::MAX)),
                (None, Some(_)) => Ok(0),
                (None, None) => Err("limit must be an integer".to_string()),
            },
            Some(_) => Err("limit must be an integer".to_string()),
        }
    }

    fn version(&mut self) -> Result<i64, String> {
        match self.take("version") {
            None => Ok(0),
            Some(Value::Number(n)) => n
                .as_i64()
                .ok_or_else(|| "version must be an integer".to_string()),
            Some(_) => Err("version must be an integer".to_string()),
        }
    }

    fn boolean(&mut self, name: &str, absent: bool) -> Result<bool, String> {
        match self.take(name) {
            None => Ok(absent),
            Some(Value::Bool(b)) => Ok(b),
            Some(_) => Err(format!("{name} must be a boolean")),
        }
    }

    /// Absent or empty = direct (an empty string is a v1 client's zero value); anything but
    /// `direct`/`group` is refused instead of silently becoming direct (§18 G26).
    fn kind(&mut self) -> Result<ConversationKind, String> {
        match self.string("kind", CONVERSATION_BYTES_MAX)?.as_str() {
            "" | "direct" => Ok(ConversationKind::Direct),
            "group" => Ok(ConversationKind::Group),
            other => Err(format!(
                "kind must be \"direct\" or \"group\", not {}",
                quote(other)
            )),
        }
    }

    fn state(&mut self) -> Result<PresenceState, String> {
        let state = match self.take("state") {
            None => String::new(),
            Some(Value::String(s)) => s,
            Some(_) => return Err("state must be a string".to_string()),
        };
        PresenceState::parse(&state).ok_or_else(|| "state must be online, away or offline".into())
    }

    fn payload(&mut self) -> Result<Vec<u8>, String> {
        match self.take("payload") {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => decode_base64(&s).ok_or_else(|| {
                "payload is not valid base64 (standard or URL-safe alphabet)".to_string()
            }),
            Some(_) => Err("payload must be a base64 string".to_string()),
        }
    }

    fn headers(&mut self) -> Result<BTreeMap<String, String>, String> {
        let map = match self.take("headers") {
            None => return Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map,
            Some(_) => return Err("headers must be an object of strings".to_string()),
        };
        if map.len() > HEADERS_PAIRS_MAX {
            return Err(format!(
                "headers has {} pairs; the limit is {HEADERS_PAIRS_MAX}",
                map.len()
            ));
        }
        let total: usize = map
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if total > HEADERS_BYTES_MAX {
            return Err(format!(
                "headers take {total} bytes (keys plus values); the limit is {HEADERS_BYTES_MAX}"
            ));
        }
        map.into_iter()
            .map(|(k, v)| match v {
                _ if k.is_empty() => Err("headers keys must not be empty".to_string()),
                Value::String(v) => Ok((k, v)),
                _ => Err(format!("headers value of {} must be a string", quote(&k))),
            })
            .collect()
    }

    fn users(&mut self) -> Result<Vec<String>, String> {
        let list = match self.take("users") {
            None => return Ok(Vec::new()),
            Some(Value::Array(list)) => list,
            Some(_) => return Err("users must be an array of strings".to_string()),
        };
        if list.len() > USERS_MAX {
            return Err(format!(
                "users has {} entries; the limit is {USERS_MAX}",
                list.len()
            ));
        }
        list.into_iter()
            .map(|v| match v {
                Value::String(s) => check_len("users entry", s, USER_ID_BYTES_MAX),
                _ => Err("users must be an array of strings".to_string()),
            })
            .collect()
    }
}

fn unsigned_value(name: &str, v: Value) -> Result<u64, String> {
    match v {
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Ok(u),
            (None, Some(_)) => Err(format!("{name} must not be negative")),
            (None, None) => Err(format!("{name} must be an integer")),
        },
        _ => Err(format!("{name} must be an integer")),
    }
}

fn check_len(name: &str, s: String, max: usize) -> Result<String, String> {
    if s.len() > max {
        return Err(format!("{name} is {} bytes; the limit is {max}", s.len()));
    }
    Ok(s)
}

/// Decoding is lenient, encoding strict (§2.2): either alphabet, padding optional, and
/// non-zero trailing bits tolerated as v1's decoder does.
const fn lenient(alphabet: &'static alphabet::Alphabet) -> GeneralPurpose {
    GeneralPurpose::new(
        alphabet,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    )
}

const BASE64_STANDARD_LENIENT: GeneralPurpose = lenient(&alphabet::STANDARD);
const BASE64_URL_SAFE_LENIENT: GeneralPurpose = lenient(&alphabet::URL_SAFE);

/// The payload bytes of a base64 string in the standard or URL-safe alphabet (not mixed),
/// padded or not. Line breaks are skipped, as v1's decoder skips them.
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let owned;
    let mut text = s.as_bytes();
    if text.iter().any(|&b| b == b'\r' || b == b'\n') {
        owned = text
            .iter()
            .copied()
            .filter(|&b| b != b'\r' && b != b'\n')
            .collect::<Vec<u8>>();
        text = &owned;
    }
    let engine = if text.iter().any(|&b| b == b'-' || b == b'_') {
        &BASE64_URL_SAFE_LENIENT
    } else {
        &BASE64_STANDARD_LENIENT
    };
    engine.decode(text).ok()
}

// ---- error codes and close codes ---------------------------------------------------------

/// Every v1 error code (§2.7). The protocol-v2 `not_configured` is not here: v1 reports
/// "not configured" as `unsupported_version` (§18 G18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    BadRequest,
    Unauthenticated,
    Forbidden,
    NotFound,
    RateLimited,
    Conflict,
    Internal,
    UnsupportedVersion,
    /// Only inside `gap` frames.
    HistoryGap,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 9] = [
        Self::BadRequest,
        Self::Unauthenticated,
        Self::Forbidden,
        Self::NotFound,
        Self::RateLimited,
        Self::Conflict,
        Self::Internal,
        Self::UnsupportedVersion,
        Self::HistoryGap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::Unauthenticated => "unauthenticated",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not_found",
            Self::RateLimited => "rate_limited",
            Self::Conflict => "conflict",
            Self::Internal => "internal",
            Self::UnsupportedVersion => "unsupported_version",
            Self::HistoryGap => "history_gap",
        }
    }
}

/// WebSocket close codes and reasons the gateway sends (§2.11's table, with §19 applied).
/// v1 never sent close frames and v1 clients ignore the codes, so all of this is additive.
///
/// §19 overrides §2.11 in two places: token expiry closes with 1008 `token expired`
/// (decision 2; §2.11 said 4001) and a slow consumer with 1008 `slow consumer` (decision
/// 6; §2.11 said 4008). Decision 9 adds 1007 for a text frame that is not UTF-8.
pub mod close {
    /// RFC 6455 §5.5: a close frame's payload is ≤ 125 bytes, 2 of them the code.
    pub const REASON_BYTES_MAX: usize = 123;

    /// The client asked to close.
    pub const NORMAL: u16 = 1000;
    pub const NORMAL_REASON: &str = "normal";
    /// Server shutting down or draining; sent to every socket before the 2 s drain.
    pub const GOING_AWAY: u16 = 1001;
    pub const GOING_AWAY_REASON: &str = "server shutting down";
    /// The first frame was not `hello`.
    pub const PROTOCOL_ERROR: u16 = 1002;
    pub const PROTOCOL_ERROR_REASON: &str = "first frame must be hello";
    /// Undecodable payload, after an error frame. Decision 9 keeps the connection open on
    /// a bad frame; this is for repeated abuse only (§18 G1).
    pub const UNDECODABLE: u16 = 1003;
    pub const UNDECODABLE_REASON: &str = "undecodable payload";
    /// A text frame that is not valid UTF-8 (RFC 6455 §8.1; §19 decision 9).
    pub const INVALID_UTF8: u16 = 1007;
    pub const INVALID_UTF8_REASON: &str = "text frame is not valid UTF-8";
    /// Origin or authentication rejected after the upgrade.
    pub const POLICY: u16 = 1008;
    pub const POLICY_REASON: &str = "policy violation";
    /// The token passed `exp + leeway` on a live connection (§19 decision 2, over §2.11's
    /// 4001).
    pub const TOKEN_EXPIRED: u16 = 1008;
    pub const TOKEN_EXPIRED_REASON: &str = "token expired";
    /// Outbound queue over its frame or byte bound (§19 decision 6, over §2.11's 4008).
    pub const SLOW_CONSUMER: u16 = 1008;
    pub const SLOW_CONSUMER_REASON: &str = "slow consumer";
    /// Inbound message over `gateway.read_limit`.
    pub const TOO_LARGE: u16 = 1009;
    pub const TOO_LARGE_REASON: &str = "message too large";
    /// Internal error.
    pub const INTERNAL: u16 = 1011;
    pub const INTERNAL_REASON: &str = "internal error";
    /// `hello.version` not supported (after the `unsupported_version` error frame).
    pub const UNSUPPORTED_VERSION: u16 = 4003;
    pub const UNSUPPORTED_VERSION_REASON: &str = "unsupported protocol version";
    /// A newer connection resumed this session (§19 decision 3).
    pub const SESSION_TAKEN_OVER: u16 = 4009;
    pub const SESSION_TAKEN_OVER_REASON: &str = "session taken over";
    /// The liveness deadline passed.
    pub const LIVENESS_TIMEOUT: u16 = 4010;
    pub const LIVENESS_TIMEOUT_REASON: &str = "liveness timeout";
}

// ---- outbound frames ---------------------------------------------------------------------

/// Headers of an outbound record or signal, in whichever form the caller holds them, so
/// the delivery path never copies them into another shape first. Bytes that are not UTF-8
/// are written lossily (U+FFFD), as the `key` is.
#[derive(Debug, Clone, Copy)]
pub enum HeadersOut<'a> {
    /// A header block as `boltq_io::record` stores it (validated by `record::decode`; a
    /// malformed tail would simply end the object).
    Block(&'a [u8]),
    /// An owned record's headers.
    Bytes(&'a [(Bytes, Bytes)]),
    /// Headers held as text.
    Text(&'a [(String, String)]),
}

impl HeadersOut<'_> {
    pub const NONE: HeadersOut<'static> = HeadersOut::Text(&[]);

    pub fn is_empty(&self) -> bool {
        match self {
            Self::Block(b) => b.is_empty(),
            Self::Bytes(p) => p.is_empty(),
            Self::Text(p) => p.is_empty(),
        }
    }

    fn for_each(&self, mut f: impl FnMut(&[u8], &[u8])) {
        match *self {
            Self::Block(block) => {
                let view = RecordView {
                    seq: 0,
                    timestamp_ns: 0,
                    flags: 0,
                    epoch: 0,
                    key: &[],
                    headers_raw: block,
                    payload: &[],
                };
                view.headers().for_each(|(k, v)| f(k, v));
            }
            Self::Bytes(pairs) => pairs.iter().for_each(|(k, v)| f(k, v)),
            Self::Text(pairs) => pairs
                .iter()
                .for_each(|(k, v)| f(k.as_bytes(), v.as_bytes())),
        }
    }

    /// Upper bound on the bytes these headers take in the output, for reserving.
    fn raw_len(&self) -> usize {
        match self {
            Self::Block(b) => b.len(),
            Self::Bytes(p) => p.iter().map(|(k, v)| k.len() + v.len() + 6).sum(),
            Self::Text(p) => p.iter().map(|(k, v)| k.len() + v.len() + 6).sum(),
        }
    }
}

/// One record of a `record` frame (§2.3 Record). `topic` and `partition` come from the
/// frame.
#[derive(Debug, Clone, Copy)]
pub struct RecordOut<'a> {
    pub seq: u64,
    pub timestamp_ns: i64,
    pub key: &'a [u8],
    pub headers: HeadersOut<'a>,
    pub payload: &'a [u8],
}

impl<'a> RecordOut<'a> {
    pub fn from_view(view: &RecordView<'a>) -> Self {
        RecordOut {
            seq: view.seq,
            timestamp_ns: view.timestamp_ns,
            key: view.key,
            headers: HeadersOut::Block(view.headers_raw),
            payload: view.payload,
        }
    }

    pub fn from_record(record: &'a Record) -> Self {
        RecordOut {
            seq: record.seq,
            timestamp_ns: record.timestamp_ns,
            key: &record.key,
            headers: HeadersOut::Bytes(&record.headers),
            payload: &record.payload,
        }
    }
}

/// The `sent` object of a `sent` frame (§2.5.5).
#[derive(Debug, Clone, Copy)]
pub struct SentOut<'a> {
    /// 32 lowercase hex characters.
    pub message_id: &'a str,
    /// This request's value (omitted when empty).
    pub client_msg_id: &'a str,
    pub topic: &'a str,
    pub partition: u32,
    pub seq: u64,
    pub timestamp_ns: i64,
    /// A dedup hit: the original coordinates, nothing written.
    pub duplicate: bool,
}

/// The `published` object of a `published` frame (§18 G28).
#[derive(Debug, Clone, Copy)]
pub struct PublishedOut<'a> {
    pub topic: &'a str,
    pub partition: u32,
    pub seq: u64,
    pub timestamp_ns: i64,
}

/// The `signal` object of a `signal` frame (§2.3 Signal).
#[derive(Debug, Clone, Copy)]
pub struct SignalOut<'a> {
    /// `typing.<conversation>`.
    pub topic: &'a str,
    pub sender: &'a str,
    /// `typing` / `stop_typing`; omitted when empty.
    pub kind: &'a str,
    pub headers: HeadersOut<'a>,
    pub payload: &'a [u8],
    pub at_ns: i64,
}

/// The `presence` object of a `presence_event` frame (§2.3 Presence).
#[derive(Debug, Clone, Copy)]
pub struct PresenceOut<'a> {
    pub user_id: &'a str,
    /// Omitted when empty.
    pub device_id: &'a str,
    pub state: PresenceState,
    /// Aggregate: any device of the user still bound.
    pub online: bool,
    pub at_ns: i64,
}

/// `{"op":"welcome","id","version":1,"session","token","resumed":true}`; `resumed` only
/// when true.
pub fn welcome(out: &mut Vec<u8>, id: &str, session: &str, token: &str, resumed: bool) {
    let mut o = frame_start(out, "welcome", id);
    o.int("version", PROTOCOL_VERSION);
    o.str_nonempty("session", session);
    o.str_nonempty("token", token);
    o.true_only("resumed", resumed);
    o.end();
}

/// `{"op":"ack","id"}`: the reply to unsubscribe, commit, typing, presence and
/// watch_presence.
pub fn ack(out: &mut Vec<u8>, id: &str) {
    frame_start(out, "ack", id).end();
}

/// The subscribe `ack` (§2.5.2 step 10); `from_seq` is the resolved start.
pub fn subscribe_ack(
    out: &mut Vec<u8>,
    id: &str,
    topic: &str,
    partition: u32,
    from_seq: u64,
    first_seq: u64,
    next_seq: u64,
) {
    let mut o = frame_start(out, "ack", id);
    o.str_nonempty("topic", topic);
    o.uint("partition", partition.into());
    o.uint_nonzero("from_seq", from_seq);
    o.uint_nonzero("first_seq", first_seq);
    o.uint_nonzero("next_seq", next_seq);
    o.end();
}

/// A `record` frame: a live batch (`id` empty, `page` None) or a history page (`id` the
/// request's, `page` = (first_seq, next_seq) of the partition). An empty `records` is
/// omitted (§2.2; clients treat absent as empty).
pub fn records(
    out: &mut Vec<u8>,
    id: &str,
    topic: &str,
    partition: u32,
    records: &[RecordOut<'_>],
    page: Option<(u64, u64)>,
) {
    out.reserve(records_len_estimate(topic, records));
    let mut o = frame_start(out, "record", id);
    o.str_nonempty("topic", topic);
    o.uint("partition", partition.into());
    if !records.is_empty() {
        o.key("records");
        o.out.push(b'[');
        for (i, r) in records.iter().enumerate() {
            if i > 0 {
                o.out.push(b',');
            }
            write_record(o.out, topic, partition, r);
        }
        o.out.push(b']');
    }
    if let Some((first_seq, next_seq)) = page {
        o.uint_nonzero("first_seq", first_seq);
        o.uint_nonzero("next_seq", next_seq);
    }
    o.end();
}

fn write_record(out: &mut Vec<u8>, topic: &str, partition: u32, r: &RecordOut<'_>) {
    let mut o = JsonObject::begin(out);
    o.str("topic", topic);
    o.uint("partition", partition.into());
    o.uint("seq", r.seq);
    o.int("timestamp", r.timestamp_ns);
    if !r.key.is_empty() {
        o.str("key", &String::from_utf8_lossy(r.key));
    }
    o.headers("headers", r.headers);
    o.base64_nonempty("payload", r.payload);
    o.end();
}

/// Bytes a `record` frame will take, give or take escapes: enough to reserve once.
fn records_len_estimate(topic: &str, records: &[RecordOut<'_>]) -> usize {
    let per_record_fixed = 96 + topic.len();
    let mut total = 64 + topic.len();
    for r in records {
        let payload = r.payload.len().div_ceil(3) * 4;
        total = total.saturating_add(per_record_fixed + r.key.len() + r.headers.raw_len());
        total = total.saturating_add(payload);
    }
    total
}

/// A `gap` frame (§2.5.2 step 8, §2.5.4 step 7): the requested start is below the
/// retention horizon.
pub fn gap(
    out: &mut Vec<u8>,
    id: &str,
    topic: &str,
    partition: u32,
    first_seq: u64,
    next_seq: u64,
    message: &str,
) {
    let mut o = frame_start(out, "gap", id);
    o.str_nonempty("topic", topic);
    o.uint("partition", partition.into());
    o.uint_nonzero("first_seq", first_seq);
    o.uint_nonzero("next_seq", next_seq);
    let mut e = o.object("error");
    e.str("code", ErrorCode::HistoryGap.as_str());
    e.str("message", message);
    e.end();
    o.end();
}

/// `{"op":"sent","id","sent":{…}}` (§2.5.5 step 7).
pub fn sent(out: &mut Vec<u8>, id: &str, s: &SentOut<'_>) {
    // One reservation instead of the buffer growing field by field: one is sent per send.
    out.reserve(sent_len_estimate(id, s));
    let mut o = frame_start(out, "sent", id);
    let mut n = o.object("sent");
    n.str("message_id", s.message_id);
    n.str_nonempty("client_msg_id", s.client_msg_id);
    n.str("topic", s.topic);
    n.uint("partition", s.partition.into());
    n.uint("seq", s.seq);
    n.int("timestamp", s.timestamp_ns);
    n.true_only("duplicate", s.duplicate);
    n.end();
    o.end();
}

/// Bytes a `sent` frame takes without escapes: the fixed part (names, punctuation, the
/// widest numbers) is at most 176 bytes.
fn sent_len_estimate(id: &str, s: &SentOut<'_>) -> usize {
    176 + id.len() + s.message_id.len() + s.client_msg_id.len() + s.topic.len()
}

/// `{"op":"published","id","published":{topic, partition, seq, timestamp}}` (§18 G28).
pub fn published(out: &mut Vec<u8>, id: &str, p: &PublishedOut<'_>) {
    let mut o = frame_start(out, "published", id);
    let mut n = o.object("published");
    n.str("topic", p.topic);
    n.uint("partition", p.partition.into());
    n.uint("seq", p.seq);
    n.int("timestamp", p.timestamp_ns);
    n.end();
    o.end();
}

/// `{"op":"error","id","error":{code, message, retryable?}}`. `retryable` is sent only
/// when true (§2.3 Error); `id` is empty for a live subscription's failure (§2.6).
pub fn error(out: &mut Vec<u8>, id: &str, code: ErrorCode, message: &str, retryable: bool) {
    let mut o = frame_start(out, "error", id);
    let mut e = o.object("error");
    e.str("code", code.as_str());
    e.str("message", message);
    e.true_only("retryable", retryable);
    e.end();
    o.end();
}

/// The `bad_request` reply to an undecodable frame (§19 decision 9).
pub fn decode_error(out: &mut Vec<u8>, e: &DecodeError) {
    error(out, &e.id, ErrorCode::BadRequest, &e.message, false);
}

/// `{"op":"pong","id"}`.
pub fn pong(out: &mut Vec<u8>, id: &str) {
    frame_start(out, "pong", id).end();
}

/// `{"op":"signal","signal":{topic, sender, kind?, headers?, payload?, at}}` (no `id`).
pub fn signal(out: &mut Vec<u8>, s: &SignalOut<'_>) {
    let mut o = frame_start(out, "signal", "");
    let mut n = o.object("signal");
    n.str("topic", s.topic);
    n.str("sender", s.sender);
    n.str_nonempty("kind", s.kind);
    n.headers("headers", s.headers);
    n.base64_nonempty("payload", s.payload);
    n.int("at", s.at_ns);
    n.end();
    o.end();
}

/// `{"op":"presence_event","presence":{user_id, device_id?, state, online, at}}` (no
/// `id`).
pub fn presence_event(out: &mut Vec<u8>, p: &PresenceOut<'_>) {
    let mut o = frame_start(out, "presence_event", "");
    let mut n = o.object("presence");
    n.str("user_id", p.user_id);
    n.str_nonempty("device_id", p.device_id);
    n.str("state", p.state.as_str());
    n.bool("online", p.online);
    n.int("at", p.at_ns);
    n.end();
    o.end();
}

/// Opens a frame object with `op` and, when non-empty, `id`.
fn frame_start<'o>(out: &'o mut Vec<u8>, op: &'static str, id: &str) -> JsonObject<'o> {
    let mut o = JsonObject::begin(out);
    o.str("op", op);
    o.str_nonempty("id", id);
    o
}

// ---- JSON writing ------------------------------------------------------------------------

/// Appends `s` as a JSON string: quotes, `"` and `\` escaped, control characters as the
/// short escapes or `\u00XX` (the bytes serde_json writes). Everything else, including
/// non-ASCII, is copied as is, in runs.
pub fn write_json_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.push(b'"');
    let mut run_start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => &[],
            _ => continue,
        };
        out.extend_from_slice(&bytes[run_start..i]);
        if short.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(short);
        }
        run_start = i + 1;
    }
    out.extend_from_slice(&bytes[run_start..]);
    out.push(b'"');
}

fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

fn write_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    write_u64(out, n.unsigned_abs());
}

/// Writes one JSON object's members, handling the commas. Keys are static ASCII names
/// that need no escaping.
struct JsonObject<'o> {
    out: &'o mut Vec<u8>,
    empty: bool,
}

impl<'o> JsonObject<'o> {
    fn begin(out: &'o mut Vec<u8>) -> Self {
        out.push(b'{');
        JsonObject { out, empty: true }
    }

    fn end(self) {
        self.out.push(b'}');
    }

    fn key(&mut self, key: &'static str) {
        debug_assert!(key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    fn object(&mut self, key: &'static str) -> JsonObject<'_> {
        self.key(key);
        JsonObject::begin(self.out)
    }

    fn str(&mut self, key: &'static str, value: &str) {
        self.key(key);
        write_json_string(self.out, value);
    }

    fn str_nonempty(&mut self, key: &'static str, value: &str) {
        if !value.is_empty() {
            self.str(key, value);
        }
    }

    fn uint(&mut self, key: &'static str, value: u64) {
        self.key(key);
        write_u64(self.out, value);
    }

    fn uint_nonzero(&mut self, key: &'static str, value: u64) {
        if value != 0 {
            self.uint(key, value);
        }
    }

    fn int(&mut self, key: &'static str, value: i64) {
        self.key(key);
        write_i64(self.out, value);
    }

    fn bool(&mut self, key: &'static str, value: bool) {
        self.key(key);
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
    }

    fn true_only(&mut self, key: &'static str, value: bool) {
        if value {
            self.bool(key, true);
        }
    }

    /// Standard alphabet, padded, encoded in place.
    fn base64_nonempty(&mut self, key: &'static str, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.key(key);
        let len = base64::encoded_len(bytes.len(), true).expect("a slice's base64 fits usize");
        self.out.push(b'"');
        let start = self.out.len();
        self.out.resize(start + len, 0);
        let written = base64::engine::general_purpose::STANDARD
            .encode_slice(bytes, &mut self.out[start..])
            .expect("buffer sized by encoded_len");
        assert_eq!(written, len);
        self.out.push(b'"');
    }

    fn headers(&mut self, key: &'static str, headers: HeadersOut<'_>) {
        if headers.is_empty() {
            return;
        }
        let mut h = self.object(key);
        headers.for_each(|k, v| {
            if !h.empty {
                h.out.push(b',');
            }
            h.empty = false;
            write_json_string(h.out, &String::from_utf8_lossy(k));
            h.out.push(b':');
            write_json_string(h.out, &String::from_utf8_lossy(v));
        });
        h.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;
    use serde_json::json;

    // ---- helpers -------------------------------------------------------------------------

    fn decode(s: &str) -> Request {
        decode_request(s.as_bytes()).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn decode_err(s: &str) -> DecodeError {
        match decode_request(s.as_bytes()) {
            Ok(r) => panic!("{s} decoded to {r:?}"),
            Err(e) => {
                assert!(!e.message.is_empty());
                e
            }
        }
    }

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        let s = String::from_utf8(out).expect("frames are UTF-8");
        let v: Value = serde_json::from_str(&s).expect("frames are JSON");
        assert!(v.is_object());
        s
    }

    fn parsed(f: impl FnOnce(&mut Vec<u8>)) -> Value {
        serde_json::from_str(&text(f)).unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn strings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

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
            decode(
                r#"{"op":"history","id":"h","topic":"t","partition":3,"from_seq":9,"limit":50}"#
            ),
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

    const SESSION: &str = "BwgJCgsMDQ4PEBESExQVFg";
    const TOKEN: &str = "BwgJCgsMDQ4PEBESExQVFg.ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1-f4CBgoM";

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

    #[test]
    fn close_codes_follow_section_19_over_section_2_11() {
        use close::*;
        assert_eq!(
            (TOKEN_EXPIRED, TOKEN_EXPIRED_REASON),
            (1008, "token expired")
        );
        assert_eq!(
            (SLOW_CONSUMER, SLOW_CONSUMER_REASON),
            (1008, "slow consumer")
        );
        assert_eq!(
            (SESSION_TAKEN_OVER, SESSION_TAKEN_OVER_REASON),
            (4009, "session taken over")
        );
        let table = [
            (NORMAL, NORMAL_REASON, 1000),
            (GOING_AWAY, GOING_AWAY_REASON, 1001),
            (PROTOCOL_ERROR, PROTOCOL_ERROR_REASON, 1002),
            (UNDECODABLE, UNDECODABLE_REASON, 1003),
            (INVALID_UTF8, INVALID_UTF8_REASON, 1007),
            (POLICY, POLICY_REASON, 1008),
            (TOO_LARGE, TOO_LARGE_REASON, 1009),
            (INTERNAL, INTERNAL_REASON, 1011),
            (UNSUPPORTED_VERSION, UNSUPPORTED_VERSION_REASON, 4003),
            (LIVENESS_TIMEOUT, LIVENESS_TIMEOUT_REASON, 4010),
        ];
        for (code, reason, want) in table {
            assert_eq!(code, want, "{reason}");
            assert!(!reason.is_empty() && reason.len() <= REASON_BYTES_MAX);
        }
    }

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
        let users =
            |n: usize, len: usize| -> Vec<String> { (0..n).map(|_| "u".repeat(len)).collect() };
        match decode(&json!({"op":"watch_presence","users":users(USERS_MAX, 3)}).to_string()) {
            Request::WatchPresence { users, .. } => assert_eq!(users.len(), USERS_MAX),
            other => panic!("{other:?}"),
        }
        let e =
            decode_err(&json!({"op":"watch_presence","users":users(USERS_MAX + 1, 1)}).to_string());
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

    // ---- write_json_string ------------------------------------------------------------------------

    const CHAR_POOL: &[char] = &[
        'a', 'Z', '0', ' ', '"', '\\', '/', '\n', '\r', '\t', '\u{0}', '\u{1}', '\u{8}', '\u{c}',
        '\u{1f}', '\u{7f}', 'é', '€', '…', '\u{2028}', '\u{fffd}', '😀', '{', '}', ':', ',',
    ];

    fn random_string(rng: &mut Rng, max_bytes: usize) -> String {
        let target = match rng.below(8) {
            0 => max_bytes,
            1 => 0,
            _ => rng.below(max_bytes.min(40) as u64 + 1) as usize,
        };
        let mut s = String::new();
        loop {
            let c = CHAR_POOL[rng.below(CHAR_POOL.len() as u64) as usize];
            if s.len() + c.len_utf8() > target {
                return s;
            }
            s.push(c);
        }
    }

    #[test]
    fn json_strings_match_serde_json_byte_for_byte() {
        let mut rng = Rng::new(0x5eed_0001);
        for _ in 0..5000 {
            let s = random_string(&mut rng, 64);
            let mut out = Vec::new();
            write_json_string(&mut out, &s);
            assert_eq!(out, serde_json::to_vec(&s).unwrap(), "{s:?}");
        }
        let all: String = (0u8..0x80).map(char::from).collect();
        let mut out = Vec::new();
        write_json_string(&mut out, &all);
        assert_eq!(out, serde_json::to_vec(&all).unwrap());
    }

    #[test]
    fn integers_are_written_exactly() {
        for n in [
            0i64,
            1,
            -1,
            9,
            10,
            -10,
            i64::MAX,
            i64::MIN,
            1_730_000_000_000_000_000,
        ] {
            let mut out = Vec::new();
            write_i64(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
        let mut out = Vec::new();
        write_u64(&mut out, u64::MAX);
        assert_eq!(out, u64::MAX.to_string().as_bytes());
    }

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
                    let headers: Vec<(String, String)> =
                        random_headers(&mut rng).into_iter().collect();
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
}
