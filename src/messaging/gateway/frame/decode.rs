//! One inbound WebSocket message to a [`Request`] or a [`DecodeError`] (rules in the
//! module documentation of `frame`).

use super::fields::{quote, Fields};
use super::limits::{
    CLIENT_MSG_ID_BYTES_MAX, DEVICE_ID_BYTES_MAX, KEY_BYTES_MAX, RESUME_BYTES_MAX, TOPIC_BYTES_MAX,
    USER_AGENT_BYTES_MAX,
};
use super::request::Request;
use serde_json::Value;
use std::fmt;

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
