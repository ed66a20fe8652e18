//! One encoder per outbound frame (§2.3, §2.5): each appends exactly one compact JSON
//! object to `out`, in the field order of the §2.13 examples.

use super::decode::DecodeError;
use super::error_code::ErrorCode;
use super::json::JsonObject;
use super::out::{PresenceOut, PublishedOut, RecordOut, SentOut, SignalOut};
use super::PROTOCOL_VERSION;

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
pub(super) fn sent_len_estimate(id: &str, s: &SentOut<'_>) -> usize {
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
