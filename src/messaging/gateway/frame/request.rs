//! A decoded client frame (§2.5, plus `publish` from §18 G28) and its field types.

use crate::messaging::presence::PresenceState;
use std::collections::BTreeMap;

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
