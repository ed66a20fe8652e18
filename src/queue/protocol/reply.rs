//! Reply and push encoders for the v1 TCP protocol (spec §2.3–§2.8, §3.11). Each function
//! appends one whole frame (`code | len:u32 LE | JSON`) to `out`, with v1's field order.
//!
//! Frames are written in place: the header is reserved, the JSON written straight after it
//! and the length patched in, so a message payload of up to 4 MiB is copied once (from the
//! stored `Bytes` into the write buffer) rather than twice via a scratch buffer and
//! [`frame::encode`]. The layout is the one `frame` defines; tests decode every reply
//! with [`frame::decode`].
//!
//! # Guarantees
//!
//! - **No reply is larger than [`PAYLOAD_BYTES_MAX`]** (a v1 Go client drops the
//!   connection otherwise). Replies whose size depends on stored data say how they keep
//!   this: [`message`] and [`push`] return [`ReplyTooLarge`] and write nothing;
//!   [`messages`] and [`dlq_read`] write as many leading messages as fit and return the
//!   count (the caller keeps the rest, e.g. puts them back at the head of the queue);
//!   [`dlq_list`] marks a cut list `"truncated":true`; [`stats`] and the small fixed
//!   replies fall back to an ERROR reply rather than exceed the limit. The request parser
//!   refuses messages whose payload and headers exceed [`MESSAGE_BODY_BYTES_MAX`], and
//!   names longer than 1 KiB, so a message accepted over TCP always fits in every reply
//!   that carries it; the checks here are the backstop for data from other paths.
//! - **No reply has a top-level `subscriber_id` key**; only [`push`] writes one. The Node
//!   SDK takes any OK frame with that key (and a `topic`) as a push.
//! - Strings are escaped by serde_json (valid JSON for any UTF-8). v1's Go encoder also
//!   escapes `<`, `>`, `&`, U+2028 and U+2029 as `\u003c`…; the values are equal, and no
//!   client compares reply bytes.
//! - Payloads are written as stored: the compact JSON text the request parser produced,
//!   which is what v1 returns (it re-serialises its `json.RawMessage` compactly).

use super::frame::{self, status, HEADER_BYTES, PAYLOAD_BYTES_MAX};
use crate::queue::message::{Message, MessageId};
use std::collections::BTreeMap;
use std::io::Write;

/// Room kept in every delivery frame for what surrounds a message's payload and headers:
/// id, timestamp, retry, keys, the topic and a subscriber id or queue name (each at most
/// 1 KiB, up to 6× that once escaped), and the batch or DLQ-read wrapper.
pub const DELIVERY_OVERHEAD_BYTES: usize = 32 * 1024;
/// Largest `payload.len() + headers_json_len(headers)` of a message the parser accepts.
pub const MESSAGE_BODY_BYTES_MAX: usize = PAYLOAD_BYTES_MAX - DELIVERY_OVERHEAD_BYTES;

/// A reply that would not fit in one frame. Nothing was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyTooLarge {
    pub payload_len: usize,
}

/// The STATS reply's content (spec §3.11): one broker's, or several merged.
pub use crate::queue::broker::BrokerStats as Stats;

/// The CLUSTER_STATUS reply of a clustered node (spec §2.5.8).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    pub node_id: String,
    pub raft_addr: String,
    /// `Follower`, `Candidate`, `Leader` or `Shutdown`.
    pub state: String,
    pub leader: String,
    pub leader_id: String,
    pub term: u64,
    pub last_index: u64,
    /// `<id>@<raft addr>` per member.
    pub peers: Vec<String>,
}

// ---- frame and JSON primitives -------------------------------------------------------

/// Appends a frame whose payload `body` writes, unless it would exceed the limit.
fn framed(
    out: &mut Vec<u8>,
    code: u8,
    body: impl FnOnce(&mut Vec<u8>),
) -> Result<(), ReplyTooLarge> {
    let start = out.len();
    out.extend_from_slice(&[code, 0, 0, 0, 0]);
    body(out);
    let payload_len = out.len() - start - HEADER_BYTES;
    if payload_len > PAYLOAD_BYTES_MAX {
        out.truncate(start);
        return Err(ReplyTooLarge { payload_len });
    }
    out[start + 1..start + HEADER_BYTES].copy_from_slice(&(payload_len as u32).to_le_bytes());
    Ok(())
}

/// For replies that only echo request-sized names: on the impossible overflow, an ERROR
/// reply instead of an oversized frame or a panic.
fn framed_or_error(out: &mut Vec<u8>, code: u8, body: impl FnOnce(&mut Vec<u8>)) {
    if let Err(e) = framed(out, code, body) {
        error(&too_large_text("reply", e), out);
    }
}

fn too_large_text(what: &str, e: ReplyTooLarge) -> String {
    format!(
        "{what} too large: {} bytes over the {PAYLOAD_BYTES_MAX}-byte frame limit",
        e.payload_len
    )
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("writing JSON to a Vec cannot fail");
}

fn put_num(out: &mut Vec<u8>, n: impl std::fmt::Display) {
    write!(out, "{n}").expect("writing to a Vec cannot fail");
}

fn put_id(out: &mut Vec<u8>, id: &MessageId) {
    out.push(b'"');
    out.extend_from_slice(id.to_hex().as_bytes());
    out.push(b'"');
}

/// Length of `s` as serde_json writes it (quotes included): `"` and `\` take 2 bytes,
/// `\b \t \n \f \r` 2, other control characters 6 (`\u00XX`), everything else as is.
pub fn json_str_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

fn dec_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

fn signed_dec_len(n: i64) -> usize {
    dec_len(n.unsigned_abs()) + usize::from(n < 0)
}

/// Length of the JSON object a message's headers are written as; 0 when there are none
/// (the key is then omitted).
pub fn headers_json_len(headers: &BTreeMap<String, String>) -> usize {
    if headers.is_empty() {
        return 0;
    }
    let pairs: usize = headers
        .iter()
        .map(|(k, v)| json_str_len(k) + 1 + json_str_len(v))
        .sum();
    2 + pairs + (headers.len() - 1)
}

fn put_headers(out: &mut Vec<u8>, headers: &BTreeMap<String, String>) {
    out.push(b'{');
    for (i, (k, v)) in headers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_str(out, k);
        out.push(b':');
        put_str(out, v);
    }
    out.push(b'}');
}

/// `"id":…,"topic":…,"payload":…[,"headers":…],"timestamp":…` — the start every
/// delivered message shares (consume, batch, DLQ read, push).
fn put_message_head(out: &mut Vec<u8>, m: &Message) {
    out.extend_from_slice(b"{\"id\":");
    put_id(out, &m.id);
    out.extend_from_slice(b",\"topic\":");
    put_str(out, &m.topic);
    out.extend_from_slice(b",\"payload\":");
    out.extend_from_slice(payload_text(m));
    if !m.headers().is_empty() {
        out.extend_from_slice(b",\"headers\":");
        put_headers(out, m.headers());
    }
    out.extend_from_slice(b",\"timestamp\":");
    put_num(out, m.timestamp_ns);
}

/// The stored payload text; an empty one (not produced by the parser) as `null`, so the
/// reply stays valid JSON.
fn payload_text(m: &Message) -> &[u8] {
    if m.payload.is_empty() {
        b"null"
    } else {
        &m.payload
    }
}

/// A message as CONSUME returns it.
fn put_message(out: &mut Vec<u8>, m: &Message) {
    put_message_head(out, m);
    out.extend_from_slice(b",\"retry\":");
    put_num(out, m.retry);
    out.push(b'}');
}

/// Exact length of the JSON object [`message`] writes for `m` (the frame's payload
/// length). Lets a broker budget a batch before taking messages off a queue.
pub fn message_len(m: &Message) -> usize {
    const FIXED: usize = r#"{"id":"","topic":,"payload":,"timestamp":,"retry":}"#.len() + 32;
    let headers = match headers_json_len(m.headers()) {
        0 => 0,
        n => r#","headers":"#.len() + n,
    };
    FIXED
        + json_str_len(&m.topic)
        + payload_text(m).len()
        + headers
        + signed_dec_len(m.timestamp_ns)
        + dec_len(m.retry.into())
}

// ---- replies -------------------------------------------------------------------------

/// OK reply to PUBLISH, PUBLISH_TOPIC and PUBLISH_EXCHANGE: `{"id","topic"}`, plus
/// `"seq_no":n,"ack":true` in confirm mode.
pub fn publish_ok(id: &MessageId, topic: &str, confirm_seq: Option<u64>, out: &mut Vec<u8>) {
    framed_or_error(out, status::OK, |out| {
        out.extend_from_slice(b"{\"id\":");
        put_id(out, id);
        out.extend_from_slice(b",\"topic\":");
        put_str(out, topic);
        if let Some(seq) = confirm_seq {
            out.extend_from_slice(b",\"seq_no\":");
            put_num(out, seq);
            out.extend_from_slice(b",\"ack\":true");
        }
        out.push(b'}');
    });
}

/// OK reply to a v1 CONSUME: `{"id","topic","payload","headers"?,"timestamp","retry"}`.
pub fn message(m: &Message, out: &mut Vec<u8>) -> Result<(), ReplyTooLarge> {
    framed(out, status::OK, |out| put_message(out, m))
}

/// OK reply to a batch CONSUME (`max` set): `{"messages":[<message>,…]}` with as many
/// leading messages of `ms` as fit in one frame. Returns how many were written; the
/// caller keeps the others. An empty `ms` writes EMPTY and returns 0 (v1 clients and batch
/// clients alike see EMPTY for "nothing there"). Err when even the first message alone
/// does not fit; nothing is written then.
pub fn messages(ms: &[Message], out: &mut Vec<u8>) -> Result<usize, ReplyTooLarge> {
    if ms.is_empty() {
        empty(out);
        return Ok(0);
    }
    let start = out.len();
    out.extend_from_slice(&[status::OK, 0, 0, 0, 0]);
    out.extend_from_slice(b"{\"messages\":[");
    let written = put_messages_within(out, start, ms, b"]}".len());
    if written == 0 {
        out.truncate(start);
        let payload_len = r#"{"messages":[]}"#.len() + message_len(&ms[0]);
        return Err(ReplyTooLarge { payload_len });
    }
    out.extend_from_slice(b"]}");
    finish(out, start);
    Ok(written)
}

/// Writes comma-separated messages while the frame that began at `start` stays within the
/// limit with `tail_bytes` still to come; returns how many were written.
fn put_messages_within(
    out: &mut Vec<u8>,
    start: usize,
    ms: &[Message],
    tail_bytes: usize,
) -> usize {
    let budget = start + HEADER_BYTES + PAYLOAD_BYTES_MAX - tail_bytes;
    let mut written = 0;
    for m in ms {
        let comma = usize::from(written > 0);
        if out.len() + comma + message_len(m) > budget {
            break;
        }
        if comma == 1 {
            out.push(b',');
        }
        put_message(out, m);
        written += 1;
    }
    written
}

/// Finishes a frame begun at `start` by patching in its length. The callers budget their
/// variable parts, so only names far longer than any request can carry could overflow;
/// then the frame is replaced by an ERROR reply.
fn finish(out: &mut Vec<u8>, start: usize) {
    let payload_len = out.len() - start - HEADER_BYTES;
    if payload_len > PAYLOAD_BYTES_MAX {
        out.truncate(start);
        error(&too_large_text("reply", ReplyTooLarge { payload_len }), out);
        return;
    }
    out[start + 1..start + HEADER_BYTES].copy_from_slice(&(payload_len as u32).to_le_bytes());
}

/// A pub/sub push (status OK): `{"id","topic","payload","headers"?,"timestamp",
/// "subscriber_id"}` — no `retry`. The only frame with a `subscriber_id` key.
pub fn push(m: &Message, subscriber_id: &str, out: &mut Vec<u8>) -> Result<(), ReplyTooLarge> {
    push_from_head(&PushHead::of(m), subscriber_id, out)
}

/// Everything of a push frame's JSON but the subscriber id: one publish to K subscribers
/// encodes its message once and copies these bytes K times, instead of encoding K times.
pub struct PushHead {
    id: MessageId,
    json: Vec<u8>,
}

impl PushHead {
    pub fn of(m: &Message) -> PushHead {
        let mut json = Vec::with_capacity(128 + m.payload.len());
        put_message_head(&mut json, m);
        PushHead { id: m.id, json }
    }

    /// The message this head encodes.
    pub fn id(&self) -> MessageId {
        self.id
    }
}

/// The push of the message `head` encodes to `subscriber_id` (see [`push`]).
pub fn push_from_head(
    head: &PushHead,
    subscriber_id: &str,
    out: &mut Vec<u8>,
) -> Result<(), ReplyTooLarge> {
    framed(out, status::OK, |out| {
        out.extend_from_slice(&head.json);
        out.extend_from_slice(b",\"subscriber_id\":");
        put_str(out, subscriber_id);
        out.push(b'}');
    })
}

/// OK `{"status":"<s>"}` — `acked`, `nacked`, `pong`, `ok`, `subscribed`.
pub fn status(s: &str, out: &mut Vec<u8>) {
    framed_or_error(out, status::OK, |out| {
        out.extend_from_slice(b"{\"status\":");
        put_str(out, s);
        out.push(b'}');
    });
}

/// `{"status":"ok"}`: AUTH, PREFETCH, CONFIRM_SELECT, exchange declare/delete, bind/unbind.
pub fn ok(out: &mut Vec<u8>) {
    status("ok", out);
}

pub fn acked(out: &mut Vec<u8>) {
    status("acked", out);
}

pub fn nacked(out: &mut Vec<u8>) {
    status("nacked", out);
}

/// The reply to an ACK/NACK with `ids` (a BoltQ addition): OK
/// `{"status":"acked"|"nacked","count":<done>}`, with
/// `"failed":[{"id":…,"error":…},…]` for the ids that were not (not pending, or refused).
pub fn acked_many(status: &str, count: usize, failed: &[(String, String)], out: &mut Vec<u8>) {
    framed_or_error(out, status::OK, |out| {
        out.extend_from_slice(b"{\"status\":");
        put_str(out, status);
        out.extend_from_slice(format!(",\"count\":{count}").as_bytes());
        if !failed.is_empty() {
            out.extend_from_slice(b",\"failed\":[");
            for (i, (id, error)) in failed.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"id\":");
                put_str(out, id);
                out.extend_from_slice(b",\"error\":");
                put_str(out, error);
                out.push(b'}');
            }
            out.push(b']');
        }
        out.push(b'}');
    });
}

pub fn pong(out: &mut Vec<u8>) {
    status("pong", out);
}

/// SUBSCRIBE's reply; send it before any push of the new subscription.
pub fn subscribed(out: &mut Vec<u8>) {
    status("subscribed", out);
}

/// Longest error text sent; longer texts are cut (at a character boundary) so an error
/// reply is always a valid frame. v1's texts are short; this only bites echoed input.
pub const ERROR_TEXT_BYTES_MAX: usize = 64 * 1024;

/// ERROR (0x01) `{"error":"<text>"}`.
pub fn error(text: &str, out: &mut Vec<u8>) {
    let mut cut = text.len().min(ERROR_TEXT_BYTES_MAX);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    framed(out, status::ERROR, |out| {
        out.extend_from_slice(b"{\"error\":");
        put_str(out, &text[..cut]);
        out.push(b'}');
    })
    .expect("an error text of at most 64 KiB fits in a frame");
}

/// ERROR reply for a refused request.
pub fn request_error(e: &super::request::RequestError, out: &mut Vec<u8>) {
    error(&e.text(), out);
}

/// EMPTY (0x02) with no payload: CONSUME found nothing.
pub fn empty(out: &mut Vec<u8>) {
    frame::encode(status::EMPTY, b"", out);
}

/// NOT_LEADER (0x03) `{"error":"not leader","leader","leader_id"[,"leader_tcp"][,
/// "leader_http"]}`. `leader` is the Raft address (v1); the optional client-facing
/// addresses are BoltQ additions that both SDKs ignore.
pub fn not_leader(
    leader: &str,
    leader_id: &str,
    leader_tcp: Option<&str>,
    leader_http: Option<&str>,
    out: &mut Vec<u8>,
) {
    framed_or_error(out, status::NOT_LEADER, |out| {
        out.extend_from_slice(b"{\"error\":\"not leader\",\"leader\":");
        put_str(out, leader);
        out.extend_from_slice(b",\"leader_id\":");
        put_str(out, leader_id);
        for (key, value) in [("leader_tcp", leader_tcp), ("leader_http", leader_http)] {
            if let Some(v) = value {
                write!(out, ",\"{key}\":").expect("writing to a Vec cannot fail");
                put_str(out, v);
            }
        }
        out.push(b'}');
    });
}

/// STATS reply with v1's capitalised keys; maps are `{}` when empty, never null. With so
/// many queues that it would not fit in a frame, an ERROR pointing at HTTP `/stats`.
pub fn stats(s: &Stats, out: &mut Vec<u8>) {
    let result = framed(out, status::OK, |out| {
        out.extend_from_slice(b"{\"Queues\":");
        put_counts(out, &s.queues);
        out.extend_from_slice(b",\"Topics\":");
        put_counts(out, &s.topics);
        out.extend_from_slice(b",\"DeadLetters\":");
        put_counts(out, &s.dead_letters);
        out.extend_from_slice(b",\"PendingCount\":");
        put_num(out, s.pending_count);
        out.extend_from_slice(b",\"DelayedCount\":");
        put_num(out, s.delayed_count);
        out.push(b'}');
    });
    if let Err(e) = result {
        error(
            &format!("{}; read /stats over HTTP", too_large_text("stats", e)),
            out,
        );
    }
}

fn put_counts(out: &mut Vec<u8>, counts: &BTreeMap<String, u64>) {
    out.push(b'{');
    for (i, (name, n)) in counts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_str(out, name);
        out.push(b':');
        put_num(out, n);
    }
    out.push(b'}');
}

/// CLUSTER_STATUS on a server that is not clustered: `{"enabled":false}`.
pub fn cluster_disabled(out: &mut Vec<u8>) {
    framed_or_error(out, status::OK, |out| {
        out.extend_from_slice(b"{\"enabled\":false}")
    });
}

/// CLUSTER_STATUS when clustered: `{"cluster":{…},"enabled":true}` (v1 marshals a map, so
/// the outer keys are alphabetical; the inner object keeps v1's struct order).
pub fn cluster_status(c: &ClusterInfo, out: &mut Vec<u8>) {
    framed_or_error(out, status::OK, |out| {
        for (key, value) in [
            ("{\"cluster\":{\"node_id\":", &c.node_id),
            (",\"raft_addr\":", &c.raft_addr),
            (",\"state\":", &c.state),
            (",\"leader\":", &c.leader),
            (",\"leader_id\":", &c.leader_id),
        ] {
            out.extend_from_slice(key.as_bytes());
            put_str(out, value);
        }
        out.extend_from_slice(b",\"term\":");
        put_num(out, c.term);
        out.extend_from_slice(b",\"last_index\":");
        put_num(out, c.last_index);
        out.extend_from_slice(b",\"peers\":[");
        for (i, peer) in c.peers.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            put_str(out, peer);
        }
        out.extend_from_slice(b"]},\"enabled\":true}");
    });
}

/// CLUSTER_JOIN OK: `{"node_id":"<id>","status":"joined"}`.
pub fn cluster_joined(node_id: &str, out: &mut Vec<u8>) {
    node_status(node_id, "joined", out);
}

/// CLUSTER_LEAVE OK: `{"node_id":"<id>","status":"removed"}`.
pub fn cluster_removed(node_id: &str, out: &mut Vec<u8>) {
    node_status(node_id, "removed", out);
}

fn node_status(node_id: &str, state: &str, out: &mut Vec<u8>) {
    framed_or_error(out, status::OK, |out| {
        out.extend_from_slice(b"{\"node_id\":");
        put_str(out, node_id);
        out.extend_from_slice(b",\"status\":");
        put_str(out, state);
        out.push(b'}');
    });
}

// ---- dead-letter replies (BoltQ additions, see `request`) ----------------------------

/// Suffix v1 gives a queue's dead-letter queue.
pub const DEAD_LETTER_SUFFIX: &str = "_dead_letter";

/// DLQ_LIST OK: `{"dead_letters":[{"queue","dead_letter","count"},…]}` from counts keyed
/// by work-queue name, in name order. Entries that would not fit in a frame are left out
/// and the object ends with `"truncated":true`. Returns how many entries were written.
pub fn dlq_list(counts: &BTreeMap<String, u64>, out: &mut Vec<u8>) -> usize {
    const TAIL: &[u8] = b"],\"truncated\":true}";
    let start = out.len();
    out.extend_from_slice(&[status::OK, 0, 0, 0, 0]);
    out.extend_from_slice(b"{\"dead_letters\":[");
    let budget = start + HEADER_BYTES + PAYLOAD_BYTES_MAX - TAIL.len();
    let mut written = 0;
    for (queue, count) in counts {
        let mark = out.len();
        if written > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"queue\":");
        put_str(out, queue);
        out.extend_from_slice(b",\"dead_letter\":");
        put_str(out, &format!("{queue}{DEAD_LETTER_SUFFIX}"));
        out.extend_from_slice(b",\"count\":");
        put_num(out, count);
        out.push(b'}');
        if out.len() > budget {
            out.truncate(mark);
            break;
        }
        written += 1;
    }
    if written < counts.len() {
        out.extend_from_slice(TAIL);
    } else {
        out.extend_from_slice(b"]}");
    }
    finish(out, start);
    written
}

/// DLQ_READ OK: `{"queue","offset","messages":[<message>,…],"next_offset"}` with messages
/// shaped as CONSUME returns them. Writes as many leading messages of `ms` as fit and
/// returns that count; `next_offset` = `offset` + count, so a client pages on from there.
pub fn dlq_read(queue: &str, offset: u64, ms: &[Message], out: &mut Vec<u8>) -> usize {
    // `,"next_offset":` + up to 20 digits + `}` after the array.
    const TAIL_BYTES_MAX: usize = r#"],"next_offset":}"#.len() + 20;
    let start = out.len();
    out.extend_from_slice(&[status::OK, 0, 0, 0, 0]);
    out.extend_from_slice(b"{\"queue\":");
    put_str(out, queue);
    out.extend_from_slice(b",\"offset\":");
    put_num(out, offset);
    out.extend_from_slice(b",\"messages\":[");
    let written = put_messages_within(out, start, ms, TAIL_BYTES_MAX);
    out.extend_from_slice(b"],\"next_offset\":");
    put_num(out, offset.saturating_add(written as u64));
    out.push(b'}');
    finish(out, start);
    written
}

/// DLQ_REQUEUE OK: `{"queue":"<q>","requeued":n}`.
pub fn dlq_requeued(queue: &str, requeued: u64, out: &mut Vec<u8>) {
    queue_count(queue, "requeued", requeued, out);
}

/// DLQ_PURGE OK: `{"queue":"<q>","purged":n}`.
pub fn dlq_purged(queue: &str, purged: u64, out: &mut Vec<u8>) {
    queue_count(queue, "purged", purged, out);
}

fn queue_count(queue: &str, key: &str, n: u64, out: &mut Vec<u8>) {
    framed_or_error(out, status::OK, |out| {
        out.extend_from_slice(b"{\"queue\":");
        put_str(out, queue);
        write!(out, ",\"{key}\":{n}}}").expect("writing to a Vec cannot fail");
    });
}

#[cfg(test)]
mod tests;
