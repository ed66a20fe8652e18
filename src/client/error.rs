//! Errors of the blocking client.

use super::json;
use std::fmt;
use std::io;

#[derive(Debug)]
pub enum ClientError {
    /// Connecting, reading or writing failed, or a reply did not arrive in time
    /// (`io::ErrorKind::TimedOut`). The connection is unusable afterwards.
    Io(io::Error),
    /// Status `0x01 ERROR`: the server's `error` text. The connection stays usable.
    Server(String),
    /// Status `0x03 NOT_LEADER`. `leader` is the leader's Raft address (v1); `leader_tcp` /
    /// `leader_http` are BoltQ's additive client-facing addresses, when the server sends them.
    NotLeader {
        leader: String,
        leader_id: String,
        leader_tcp: Option<String>,
        leader_http: Option<String>,
    },
    /// AUTH was refused while connecting; the server's reply payload as text.
    Auth(String),
    /// The server sent something the protocol does not allow here (oversized frame, unknown
    /// status byte, malformed JSON, a reply nobody asked for). The connection is unusable
    /// afterwards.
    Protocol(String),
    /// The caller passed something that cannot be sent (payload not JSON, frame over the
    /// size limit, typed call while raw replies are unread). Nothing was sent.
    InvalidArgument(String),
}

pub type Result<T> = std::result::Result<T, ClientError>;

impl ClientError {
    /// Whether the connection can no longer be trusted to pair replies with requests.
    pub fn breaks_connection(&self) -> bool {
        matches!(self, ClientError::Io(_) | ClientError::Protocol(_))
    }

    /// Builds the error for a non-OK reply status (ERROR or NOT_LEADER), from its payload.
    pub(crate) fn from_status(status_byte: u8, payload: &[u8]) -> ClientError {
        use crate::queue::protocol::frame::status;
        let text = String::from_utf8_lossy(payload);
        let members = json::object_members(&text);
        let field = |key: &str| -> Option<String> {
            let raw = json::member(members.as_deref()?, key)?;
            serde_json::from_str::<String>(raw).ok()
        };
        match status_byte {
            status::ERROR => {
                ClientError::Server(field("error").unwrap_or_else(|| text.to_string()))
            }
            status::NOT_LEADER => ClientError::NotLeader {
                leader: field("leader").unwrap_or_default(),
                leader_id: field("leader_id").unwrap_or_default(),
                leader_tcp: field("leader_tcp"),
                leader_http: field("leader_http"),
            },
            other => ClientError::Protocol(format!("unexpected reply status 0x{other:02x}")),
        }
    }
}

impl fmt::Display for ClientError {
    /// Texts follow the v1 Go SDK where it has one (`server error: …`, `not leader, …`), so
    /// the CLI's error lines read as v1's did.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "{e}"),
            ClientError::Server(msg) => write!(f, "server error: {msg}"),
            ClientError::NotLeader {
                leader,
                leader_id,
                leader_tcp,
                ..
            } => {
                write!(f, "not leader, current leader is {leader_id} ({leader})")?;
                match leader_tcp {
                    Some(tcp) => write!(f, ", client address {tcp}"),
                    None => Ok(()),
                }
            }
            ClientError::Auth(payload) => write!(f, "auth failed: {payload}"),
            ClientError::Protocol(msg) => write!(f, "protocol error: {msg}"),
            ClientError::InvalidArgument(msg) => write!(f, "{msg}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> ClientError {
        ClientError::Io(e)
    }
}
