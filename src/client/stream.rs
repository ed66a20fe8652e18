//! The stream commands (0x1D–0x20, BoltQ additive) for trusted backends: publish to, read
//! and tail the messaging plane's stream topics, with per-consumer cursors. Shapes:
//! `docs/stream-publishing.md`.

use super::types::{Body, Headers};
use super::{parse_json, Client, ClientError, Result};
use crate::queue::protocol::frame::status;
use base64::Engine as _;
use serde_json::Value;
use std::time::Duration;

/// STREAM_PUBLISH.
pub const OP_STREAM_PUBLISH: u8 = 0x1D;
/// STREAM_READ.
pub const OP_STREAM_READ: u8 = 0x1E;
/// STREAM_TAIL.
pub const OP_STREAM_TAIL: u8 = 0x1F;
/// STREAM_COMMIT.
pub const OP_STREAM_COMMIT: u8 = 0x20;

/// Which partition of which topic: `partition` if set, else the partition of `key` (as the
/// server and devices compute it), else 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamAt {
    pub topic: String,
    pub partition: Option<u32>,
    pub key: String,
}

impl StreamAt {
    pub fn topic(topic: &str) -> StreamAt {
        StreamAt {
            topic: topic.to_string(),
            ..StreamAt::default()
        }
    }

    pub fn key(mut self, key: &str) -> StreamAt {
        self.key = key.to_string();
        self
    }

    pub fn partition(mut self, partition: u32) -> StreamAt {
        self.partition = Some(partition);
        self
    }

    /// The body's target keys (`key`, `partition`, `topic`), merged in alphabetical order
    /// with `rest`, which the caller gives already sorted.
    fn body(&self, rest: Vec<(&str, Field)>) -> Vec<u8> {
        let mut fields = rest;
        if !self.key.is_empty() {
            fields.push(("key", Field::Str(self.key.clone())));
        }
        if let Some(p) = self.partition {
            fields.push(("partition", Field::Int(p.into())));
        }
        fields.push(("topic", Field::Str(self.topic.clone())));
        fields.sort_by(|a, b| a.0.cmp(b.0));
        let mut body = Body::new();
        for (k, v) in fields {
            body = match v {
                Field::Str(s) => body.str(k, &s),
                Field::Int(n) => body.int(k, n),
                Field::Headers(h) => body.headers(k, Some(&h)),
            };
        }
        body.finish()
    }
}

enum Field {
    Str(String),
    Int(i128),
    Headers(Headers),
}

/// What to publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamPayload<'a> {
    /// JSON text, stored compacted (as PUBLISH stores payloads).
    Json(&'a str),
    /// Bytes, sent base64-encoded.
    Bytes(&'a [u8]),
}

/// Where a published record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPublished {
    pub topic: String,
    pub partition: u32,
    pub seq: u64,
    pub timestamp_ns: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRecord {
    pub seq: u64,
    pub timestamp_ns: i64,
    /// Empty when the record has none.
    pub key: String,
    pub headers: Headers,
    pub payload: Vec<u8>,
}

impl StreamRecord {
    /// The payload in base64 (standard alphabet, padded), as the server sends it.
    pub fn payload_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.payload)
    }
}

/// A READ or TAIL reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPage {
    pub topic: String,
    pub partition: u32,
    /// The position served (after a gap or head correction).
    pub from: u64,
    pub first_seq: u64,
    pub next_seq: u64,
    /// The requested position was below the retention horizon.
    pub gap: bool,
    pub records: Vec<StreamRecord>,
    /// Where to continue (and what to commit once these records are processed).
    pub next: u64,
}

/// A named consumer: its position is the cursor of (`group`, `member`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConsumer<'a> {
    pub group: &'a str,
    pub member: &'a str,
}

fn protocol(what: &str) -> ClientError {
    ClientError::Protocol(format!("malformed stream reply: {what}"))
}

fn u64_of(v: &Value, k: &str) -> Result<u64> {
    v[k].as_u64().ok_or_else(|| protocol(k))
}

fn i64_of(v: &Value, k: &str) -> Result<i64> {
    v[k].as_i64().ok_or_else(|| protocol(k))
}

fn str_of(v: &Value, k: &str) -> String {
    v[k].as_str().unwrap_or_default().to_string()
}

fn parse_record(v: &Value) -> Result<StreamRecord> {
    let headers = v["headers"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let payload = base64::engine::general_purpose::STANDARD
        .decode(v["payload_base64"].as_str().unwrap_or_default())
        .map_err(|_| protocol("payload_base64"))?;
    Ok(StreamRecord {
        seq: u64_of(v, "seq")?,
        timestamp_ns: i64_of(v, "timestamp")?,
        key: str_of(v, "key"),
        headers,
        payload,
    })
}

/// Decodes a page reply.
pub fn parse_page(v: &Value) -> Result<StreamPage> {
    let records = v["records"]
        .as_array()
        .ok_or_else(|| protocol("records"))?
        .iter()
        .map(parse_record)
        .collect::<Result<Vec<_>>>()?;
    Ok(StreamPage {
        topic: str_of(v, "topic"),
        partition: u64_of(v, "partition")? as u32,
        from: u64_of(v, "from")?,
        first_seq: u64_of(v, "first_seq")?,
        next_seq: u64_of(v, "next_seq")?,
        gap: v["gap"].as_bool().unwrap_or(false),
        records,
        next: u64_of(v, "next")?,
    })
}

impl Client {
    fn stream_call(&mut self, code: u8, body: &[u8], extra_wait: Duration) -> Result<Value> {
        let (status_byte, payload) = self.call(code, body, extra_wait)?;
        if status_byte != status::OK {
            return Err(ClientError::from_status(status_byte, &payload));
        }
        parse_json(&payload)
    }

    /// STREAM_PUBLISH (0x1D): appends one record; returns once it is durable.
    pub fn stream_publish(
        &mut self,
        at: &StreamAt,
        headers: &Headers,
        payload: StreamPayload<'_>,
    ) -> Result<StreamPublished> {
        let mut rest = Vec::new();
        if !headers.is_empty() {
            rest.push(("headers", Field::Headers(headers.clone())));
        }
        let body = match payload {
            StreamPayload::Json(text) => {
                let compact = super::compact_payload(text)?;
                let mut b = at.body(rest);
                // `payload` sorts after `key`/`headers` and before `topic`/`partition`; as
                // raw JSON it cannot go through `Field`, so it is spliced in (key order is
                // cosmetic: the server accepts any).
                b.pop(); // '}'
                b.extend_from_slice(b",\"payload\":");
                b.extend_from_slice(compact.as_bytes());
                b.push(b'}');
                b
            }
            StreamPayload::Bytes(bytes) => {
                let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
                rest.push(("payload_base64", Field::Str(encoded)));
                at.body(rest)
            }
        };
        let v = self.stream_call(OP_STREAM_PUBLISH, &body, Duration::ZERO)?;
        Ok(StreamPublished {
            topic: str_of(&v, "topic"),
            partition: u64_of(&v, "partition")? as u32,
            seq: u64_of(&v, "seq")?,
            timestamp_ns: i64_of(&v, "timestamp")?,
        })
    }

    /// STREAM_READ (0x1E): up to `max` records from `from` (0 = the first retained).
    pub fn stream_read(&mut self, at: &StreamAt, from: u64, max: u32) -> Result<StreamPage> {
        let body = at.body(vec![
            ("from", Field::Int(from.into())),
            ("max", Field::Int(max.into())),
        ]);
        let v = self.stream_call(OP_STREAM_READ, &body, Duration::ZERO)?;
        parse_page(&v)
    }

    /// STREAM_TAIL (0x1F): records from `from`, else from `consumer`'s cursor, else from the
    /// first retained record; waits up to `wait_ms` when there are none yet (the reply
    /// timeout is extended by it). Nothing is committed: call
    /// [`Client::stream_commit`] with the page's `next` once the records are processed.
    pub fn stream_tail(
        &mut self,
        at: &StreamAt,
        consumer: Option<StreamConsumer<'_>>,
        from: Option<u64>,
        max: u32,
        wait_ms: u64,
    ) -> Result<StreamPage> {
        let mut rest = vec![
            ("max", Field::Int(max.into())),
            ("wait_ms", Field::Int(wait_ms.into())),
        ];
        if let Some(f) = from {
            rest.push(("from", Field::Int(f.into())));
        }
        if let Some(c) = consumer {
            rest.push(("group", Field::Str(c.group.to_string())));
            if !c.member.is_empty() {
                rest.push(("member", Field::Str(c.member.to_string())));
            }
        }
        let body = at.body(rest);
        let v = self.stream_call(OP_STREAM_TAIL, &body, Duration::from_millis(wait_ms))?;
        parse_page(&v)
    }

    /// STREAM_COMMIT (0x20): stores `seq` (the next sequence wanted, i.e. a page's `next`)
    /// as `consumer`'s cursor, durably. A cursor never moves back.
    pub fn stream_commit(
        &mut self,
        at: &StreamAt,
        consumer: StreamConsumer<'_>,
        seq: u64,
    ) -> Result<()> {
        let mut rest = vec![
            ("group", Field::Str(consumer.group.to_string())),
            ("seq", Field::Int(seq.into())),
        ];
        if !consumer.member.is_empty() {
            rest.push(("member", Field::Str(consumer.member.to_string())));
        }
        let body = at.body(rest);
        self.stream_call(OP_STREAM_COMMIT, &body, Duration::ZERO)
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_are_sorted_and_carry_only_what_is_set() {
        let at = StreamAt::topic("match.alice").key("alice");
        let body = at.body(vec![("from", Field::Int(3)), ("max", Field::Int(10))]);
        assert_eq!(
            String::from_utf8(body).unwrap(),
            r#"{"from":3,"key":"alice","max":10,"topic":"match.alice"}"#
        );
        let at = StreamAt::topic("t").partition(2);
        assert_eq!(
            String::from_utf8(at.body(Vec::new())).unwrap(),
            r#"{"partition":2,"topic":"t"}"#
        );
    }

    #[test]
    fn pages_decode_with_binary_payloads() {
        let v = json!({
            "topic": "t", "partition": 1, "from": 4, "first_seq": 1, "next_seq": 6,
            "gap": false, "next": 6,
            "records": [
                {"seq": 4, "timestamp": 9, "key": "k", "headers": {"h": "v"}, "payload_base64": "AP8="},
                {"seq": 5, "timestamp": 10, "headers": {}, "payload_base64": ""}
            ]
        });
        let p = parse_page(&v).unwrap();
        assert_eq!((p.from, p.next, p.records.len()), (4, 6, 2));
        assert_eq!(p.records[0].payload, [0x00, 0xFF]);
        assert_eq!(p.records[0].headers["h"], "v");
        assert_eq!(
            (p.records[1].key.as_str(), p.records[1].payload.len()),
            ("", 0)
        );
        let mut bad = v.clone();
        bad["records"][0]["payload_base64"] = json!("%%");
        assert!(parse_page(&bad).is_err());
        bad = v;
        bad.as_object_mut().unwrap().remove("next");
        assert!(parse_page(&bad).is_err());
    }
}
