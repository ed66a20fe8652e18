//! The field readers of a request object: each takes its field out, treats `null` as
//! absent, checks type and limit, and names the field in its error.

use super::limits::{
    CONVERSATION_BYTES_MAX, HEADERS_BYTES_MAX, HEADERS_PAIRS_MAX, ID_BYTES_MAX, QUOTE_BYTES_MAX,
    TOPIC_BYTES_MAX, USERS_MAX, USER_ID_BYTES_MAX,
};
use super::payload::decode_base64;
use super::request::ConversationKind;
use crate::messaging::presence::PresenceState;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// `s` as a quoted, escaped string of at most [`QUOTE_BYTES_MAX`] bytes of the original,
/// so an error message never carries a client's megabyte back.
pub(super) fn quote(s: &str) -> String {
    let mut end = s.len().min(QUOTE_BYTES_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let cut = if end < s.len() { "…" } else { "" };
    format!("{:?}{cut}", &s[..end])
}

/// The top-level object of a request; each reader takes its field out (so strings move
/// instead of being copied) and treats `null` as absent.
pub(super) struct Fields(pub(super) Map<String, Value>);

impl Fields {
    pub(super) fn take(&mut self, name: &str) -> Option<Value> {
        match self.0.remove(name) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// The correlation id, validated before anything else so later errors can echo it.
    pub(super) fn id(&mut self) -> Result<String, String> {
        self.string("id", ID_BYTES_MAX)
    }

    pub(super) fn string(&mut self, name: &str, max: usize) -> Result<String, String> {
        match self.take(name) {
            None => Ok(String::new()),
            Some(Value::String(s)) => check_len(name, s, max),
            Some(_) => Err(format!("{name} must be a string")),
        }
    }

    pub(super) fn required_topic(&mut self) -> Result<String, String> {
        let topic = self.string("topic", TOPIC_BYTES_MAX)?;
        if topic.is_empty() {
            return Err("topic is required".to_string());
        }
        Ok(topic)
    }

    pub(super) fn required_conversation(&mut self) -> Result<String, String> {
        let conversation = self.string("conversation", CONVERSATION_BYTES_MAX)?;
        if conversation.is_empty() {
            return Err("conversation is required".to_string());
        }
        Ok(conversation)
    }

    pub(super) fn unsigned(&mut self, name: &str) -> Result<u64, String> {
        self.take(name).map_or(Ok(0), |v| unsigned_value(name, v))
    }

    /// Partitions are signed 32-bit on the wire (§0): 0..=i32::MAX.
    pub(super) fn partition(&mut self) -> Result<Option<u32>, String> {
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
    pub(super) fn limit(&mut self) -> Result<u32, String> {
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

    pub(super) fn version(&mut self) -> Result<i64, String> {
        match self.take("version") {
            None => Ok(0),
            Some(Value::Number(n)) => n
                .as_i64()
                .ok_or_else(|| "version must be an integer".to_string()),
            Some(_) => Err("version must be an integer".to_string()),
        }
    }

    pub(super) fn boolean(&mut self, name: &str, absent: bool) -> Result<bool, String> {
        match self.take(name) {
            None => Ok(absent),
            Some(Value::Bool(b)) => Ok(b),
            Some(_) => Err(format!("{name} must be a boolean")),
        }
    }

    /// Absent or empty = direct (an empty string is a v1 client's zero value); anything but
    /// `direct`/`group` is refused instead of silently becoming direct (§18 G26).
    pub(super) fn kind(&mut self) -> Result<ConversationKind, String> {
        match self.string("kind", CONVERSATION_BYTES_MAX)?.as_str() {
            "" | "direct" => Ok(ConversationKind::Direct),
            "group" => Ok(ConversationKind::Group),
            other => Err(format!(
                "kind must be \"direct\" or \"group\", not {}",
                quote(other)
            )),
        }
    }

    pub(super) fn state(&mut self) -> Result<PresenceState, String> {
        let state = match self.take("state") {
            None => String::new(),
            Some(Value::String(s)) => s,
            Some(_) => return Err("state must be a string".to_string()),
        };
        PresenceState::parse(&state).ok_or_else(|| "state must be online, away or offline".into())
    }

    pub(super) fn payload(&mut self) -> Result<Vec<u8>, String> {
        match self.take("payload") {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => decode_base64(&s).ok_or_else(|| {
                "payload is not valid base64 (standard or URL-safe alphabet)".to_string()
            }),
            Some(_) => Err("payload must be a base64 string".to_string()),
        }
    }

    pub(super) fn headers(&mut self) -> Result<BTreeMap<String, String>, String> {
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

    pub(super) fn users(&mut self) -> Result<Vec<String>, String> {
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
