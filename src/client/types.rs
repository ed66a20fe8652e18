//! Request options, reply records and the request-body builder.

use super::error::{ClientError, Result};
use super::json;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Message headers. A `BTreeMap` because Go (and so v1) marshals maps in key order.
pub type Headers = BTreeMap<String, String>;

/// Key under which a CONSUME with `max` returns its batch of messages (BoltQ's additive
/// field; a reply without it is a single message).
pub const CONSUME_BATCH_KEY: &str = "messages";

/// Options of PUBLISH (0x01). Units are v1's: nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublishOptions {
    pub delay_ns: i64,
    pub ttl_ns: i64,
    /// 0–9, higher first; the server clamps other values when queueing.
    pub priority: i64,
}

/// OK reply of PUBLISH, PUBLISH_TOPIC and PUBLISH_EXCHANGE.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PublishReply {
    pub id: String,
    #[serde(default)]
    pub topic: String,
    /// Present only in confirm mode (CONFIRM_SELECT).
    #[serde(default)]
    pub seq_no: Option<u64>,
    #[serde(default)]
    pub ack: Option<bool>,
}

/// A message returned by CONSUME.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedMessage {
    pub id: String,
    pub topic: String,
    /// The payload's JSON text exactly as the server sent it (`null` when absent).
    pub payload_json: String,
    /// Empty when the server omitted them.
    pub headers: Headers,
    pub timestamp_ns: i64,
    pub retry: u32,
    /// v1 never increments it (always 0); kept because the v1 CLI prints it.
    pub delivery_count: u32,
}

/// A pub/sub delivery (status 0x00 with a top-level `subscriber_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Push {
    pub id: String,
    pub topic: String,
    pub subscriber_id: String,
    pub payload_json: String,
    pub headers: Headers,
    pub timestamp_ns: i64,
}

/// The fields of a message record other than the payload, which is taken raw.
#[derive(Deserialize)]
struct RecordFields {
    #[serde(default)]
    id: String,
    #[serde(default)]
    topic: String,
    #[serde(default)]
    headers: Option<Headers>,
    #[serde(default)]
    timestamp: i64,
    #[serde(default)]
    retry: u32,
    #[serde(default)]
    delivery_count: u32,
    #[serde(default)]
    subscriber_id: String,
}

fn parse_record(text: &str) -> Result<(RecordFields, String)> {
    let members = json::object_members(text)
        .ok_or_else(|| ClientError::Protocol(format!("message is not a JSON object: {text}")))?;
    let fields: RecordFields = serde_json::from_str(text)
        .map_err(|e| ClientError::Protocol(format!("malformed message: {e}")))?;
    let payload = json::member(&members, "payload")
        .unwrap_or("null")
        .to_string();
    Ok((fields, payload))
}

impl ConsumedMessage {
    pub fn parse(text: &str) -> Result<ConsumedMessage> {
        let (f, payload_json) = parse_record(text)?;
        Ok(ConsumedMessage {
            id: f.id,
            topic: f.topic,
            payload_json,
            headers: f.headers.unwrap_or_default(),
            timestamp_ns: f.timestamp,
            retry: f.retry,
            delivery_count: f.delivery_count,
        })
    }

    /// A CONSUME reply: either one message, or (with `max`) a batch under
    /// [`CONSUME_BATCH_KEY`].
    pub fn parse_batch(text: &str) -> Result<Vec<ConsumedMessage>> {
        let members = json::object_members(text)
            .ok_or_else(|| ClientError::Protocol(format!("reply is not a JSON object: {text}")))?;
        let Some(batch) = json::member(&members, CONSUME_BATCH_KEY) else {
            return Ok(vec![ConsumedMessage::parse(text)?]);
        };
        if !batch.starts_with('[') {
            return Err(ClientError::Protocol(format!(
                "`{CONSUME_BATCH_KEY}` is not an array: {batch}"
            )));
        }
        // Split the raw array rather than going through serde_json::Value, which would
        // reorder the keys of each payload.
        split_array(batch)
            .iter()
            .map(|raw| ConsumedMessage::parse(raw))
            .collect()
    }
}

impl Push {
    /// Whether a status-0x00 frame is a push rather than a reply: v1 tells them apart only by a
    /// top-level `subscriber_id` key. The substring test keeps ordinary replies cheap.
    pub fn is_push(payload: &[u8]) -> bool {
        const KEY: &[u8] = b"subscriber_id";
        if !payload.windows(KEY.len()).any(|w| w == KEY) {
            return false;
        }
        let Ok(text) = std::str::from_utf8(payload) else {
            return false;
        };
        json::object_members(text).is_some_and(|m| json::member(&m, "subscriber_id").is_some())
    }

    pub fn parse(text: &str) -> Result<Push> {
        let (f, payload_json) = parse_record(text)?;
        Ok(Push {
            id: f.id,
            topic: f.topic,
            subscriber_id: f.subscriber_id,
            payload_json,
            headers: f.headers.unwrap_or_default(),
            timestamp_ns: f.timestamp,
        })
    }
}

/// The raw texts of the elements of a valid JSON array (already validated by the caller).
fn split_array(array_text: &str) -> Vec<&str> {
    let bytes = array_text.as_bytes();
    let mut elements = Vec::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut start = None;
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'[' | b'{' => {
                if depth == 1 && start.is_none() {
                    start = Some(i);
                }
                depth += 1;
            }
            b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    push_element(&mut elements, array_text, start.take(), i);
                }
            }
            b',' if depth == 1 => push_element(&mut elements, array_text, start.take(), i),
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => {
                if depth == 1 && start.is_none() {
                    start = Some(i);
                }
                in_string = b == b'"';
            }
        }
    }
    elements
}

fn push_element<'a>(out: &mut Vec<&'a str>, text: &'a str, start: Option<usize>, end: usize) {
    if let Some(s) = start {
        out.push(text[s..end].trim_end());
    }
}

/// Builds a JSON object body key by key, in the order the caller adds them. Callers add keys
/// alphabetically, which is how the v1 Go SDK's map bodies come out.
pub(crate) struct Body {
    text: String,
}

impl Default for Body {
    fn default() -> Body {
        Body::new()
    }
}

impl Body {
    pub fn new() -> Body {
        Body {
            text: String::from("{"),
        }
    }

    fn key(&mut self, key: &str) -> &mut String {
        if self.text.len() > 1 {
            self.text.push(',');
        }
        json::write_string(&mut self.text, key);
        self.text.push(':');
        &mut self.text
    }

    pub fn str(mut self, key: &str, value: &str) -> Body {
        json::write_string(self.key(key), value);
        self
    }

    pub fn int(mut self, key: &str, value: impl Into<i128>) -> Body {
        let v: i128 = value.into();
        self.key(key).push_str(&v.to_string());
        self
    }

    pub fn bool(mut self, key: &str, value: bool) -> Body {
        self.key(key).push_str(if value { "true" } else { "false" });
        self
    }

    /// `value` must already be valid compact JSON.
    pub fn raw(mut self, key: &str, value: &str) -> Body {
        self.key(key).push_str(value);
        self
    }

    /// A header map, or `null` for `None` (Go marshals a nil map as `null`).
    pub fn headers(mut self, key: &str, headers: Option<&Headers>) -> Body {
        let out = self.key(key);
        match headers {
            None => out.push_str("null"),
            Some(map) => {
                out.push('{');
                for (i, (k, v)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    json::write_string(out, k);
                    out.push(':');
                    json::write_string(out, v);
                }
                out.push('}');
            }
        }
        self
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.text.push('}');
        self.text.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_matches_go_map_marshal() {
        let mut h = Headers::new();
        h.insert("b".into(), "<2>".into());
        h.insert("a".into(), "1".into());
        let body = Body::new()
            .int("delay", 0i64)
            .headers("headers", None)
            .raw("payload", r#"{"n":1}"#)
            .int("priority", 0i64)
            .str("topic", "jobs")
            .int("ttl", 0i64)
            .finish();
        assert_eq!(
            body,
            br#"{"delay":0,"headers":null,"payload":{"n":1},"priority":0,"topic":"jobs","ttl":0}"#
        );
        let body = Body::new()
            .headers("headers", Some(&h))
            .bool("x", true)
            .finish();
        assert_eq!(
            body,
            br#"{"headers":{"a":"1","b":"\u003c2\u003e"},"x":true}"#
        );
        assert_eq!(Body::new().finish(), b"{}");
    }

    #[test]
    fn consumed_message_keeps_raw_payload() {
        let text = r#"{"id":"i","topic":"q","payload":{"z":1,"a":[true]},"headers":{"k":"v"},"timestamp":17,"retry":2}"#;
        let m = ConsumedMessage::parse(text).unwrap();
        assert_eq!(m.payload_json, r#"{"z":1,"a":[true]}"#);
        assert_eq!((m.timestamp_ns, m.retry, m.delivery_count), (17, 2, 0));
        assert_eq!(m.headers.get("k").map(String::as_str), Some("v"));
        let bare =
            ConsumedMessage::parse(r#"{"id":"i","topic":"q","timestamp":1,"retry":0}"#).unwrap();
        assert_eq!(bare.payload_json, "null");
        assert!(bare.headers.is_empty());
        assert!(ConsumedMessage::parse("[1]").is_err());
        assert!(ConsumedMessage::parse(r#"{"id":5}"#).is_err());
    }

    #[test]
    fn batches_split_into_messages_keeping_payload_bytes() {
        let text = r#"{"messages":[ {"id":"a","topic":"q","payload":"x,]","timestamp":1,"retry":0} , {"id":"b","topic":"q","payload":[1,{"y":2}],"timestamp":2,"retry":1} ]}"#;
        let batch = ConsumedMessage::parse_batch(text).unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(batch[0].payload_json, r#""x,]""#);
        assert_eq!(batch[1].payload_json, r#"[1,{"y":2}]"#);
        assert_eq!(
            ConsumedMessage::parse_batch(r#"{"messages":[]}"#).unwrap(),
            vec![]
        );
        let single = ConsumedMessage::parse_batch(
            r#"{"id":"a","topic":"q","payload":5,"timestamp":1,"retry":0}"#,
        )
        .unwrap();
        assert_eq!(single[0].payload_json, "5");
        assert_eq!(
            split_array("[1, \"a\" ,null,[2,3]]"),
            ["1", "\"a\"", "null", "[2,3]"]
        );
    }

    #[test]
    fn push_detection_needs_a_top_level_subscriber_id() {
        let push = br#"{"id":"i","topic":"t","payload":1,"timestamp":5,"subscriber_id":"s"}"#;
        assert!(Push::is_push(push));
        let p = Push::parse(std::str::from_utf8(push).unwrap()).unwrap();
        assert_eq!(
            (p.subscriber_id.as_str(), p.payload_json.as_str()),
            ("s", "1")
        );
        assert!(!Push::is_push(
            br#"{"id":"i","payload":{"subscriber_id":"s"}}"#
        ));
        assert!(!Push::is_push(br#"{"status":"subscribed"}"#));
        assert!(!Push::is_push(b"subscriber_id"));
    }
}
