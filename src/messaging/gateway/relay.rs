//! Presence, typing and session hand-overs between the nodes of a cluster (issue 15),
//! sans-IO: the frames one node's shard sends the same shard of every other node, and
//! (`peers.rs`) what a shard remembers of the nodes it hears from.
//!
//! Presence and typing are ephemeral (docs/presence-and-typing.md): nothing of them goes
//! through the slot groups. Each node's owner shard of a user tells the owner shard of the
//! user on every other node (the same shard: every member runs the same shard count) of
//! its own devices' transitions, and every sweep interval of all its bound devices; the
//! receivers keep them apart from their own (`presence::remote`). A typing signal is
//! routed on the sender's node and relayed once to every other node, whose owner of the
//! topic hands it to its own listeners. Lossy like the rest of the ephemeral path: a frame
//! a link drops is repaired by the next refresh (presence) or not at all (typing).
//!
//! A `hello` that resumes a session this node does not hold asks the other nodes for it
//! (take asked); the node holding it checks the secret and user, hands the session's state
//! over (taken) and closes the socket that held it (4009). Unanswered, the device gets a
//! fresh session, as it would after any loss of its session.
//!
//! ```text
//! frame   = version:u8 (1) | boot:u64 | kind:u8 | body
//! kind    = 1 changes: count:u32 | change*       (the sender's own transitions, in order;
//!                                                  a refresh is a page of sets)
//!         | 2 alive (empty)                       (nothing new; every ALIVE_EVERY_MS)
//!         | 3 refresh asked (empty)               (send me all your devices now)
//!         | 7 refreshed (empty)                   (every device went before this frame)
//!         | 4 signal: topic:str16 | sender:str16 | kind:str16 | at_ns:i64
//!                     | headers: count:u32 | (name:str16 | value:str16)*
//!                     | payload: len:u32 | bytes
//!         | 5 take asked: id:u64 | session:str16 | secret:str16 | user:str16
//!         | 6 taken: id:u64 | found:u8 (0 | 1) [| user:str16 | device:str16
//!                  | positions: count:u32 | (topic:str16 | partition:u32 | next_seq:u64)*
//!                    (strictly increasing by topic, then partition)
//!                  | watched: count:u32 | user:str16*]
//! change  = 0 set: user:str16 | device:str16 | state:u8 (0 online, 1 away, 2 offline)
//!         | 1 unbound: user:str16 | device:str16
//!         | 2 expired: user:str16 | device:str16
//! ```
//!
//! `boot` is a random number each shard draws at start: a node heard with a new one
//! restarted, and what its earlier process reported is dropped.

use super::session::{SessionState, SESSION_SUBSCRIPTIONS_MAX};
use crate::messaging::headers::{HEADERS_BYTES_MAX, HEADERS_PAIRS_MAX};
use crate::messaging::presence::{PresenceState, RemoteChange, WATCHED_USERS_PER_CONNECTION_MAX};
use crate::messaging::signals::{self, Signal};
use crate::messaging::slot::{put_str16, Reader};
use crate::messaging::topic::TOPIC_ENCODED_BYTES_MAX;

pub const VERSION: u8 = 1;
/// Largest frame: a page of changes or a signal at the largest payload the configuration
/// allows (`messaging.signals.max_payload` ≤ 1 MiB) with its headers.
pub const FRAME_BYTES_MAX: usize = 2 * 1024 * 1024;
/// Changes one frame carries (a refresh of more devices takes more frames).
pub const CHANGES_PER_FRAME_MAX: usize = 4096;
/// Longest user or device id (the gateway's own limits are below it).
pub const ID_BYTES_MAX: usize = 256;
/// Longest signal kind.
pub const KIND_BYTES_MAX: usize = 64;
/// Largest signal payload (the most `messaging.signals.max_payload` may be).
pub const SIGNAL_PAYLOAD_BYTES_MAX: usize = 1024 * 1024;
/// Longest session id or resume secret (the gateway's `resume` is at most 256 bytes).
pub const RESUME_PART_BYTES_MAX: usize = 256;
/// How long a resume waits for the other nodes' answers before the device gets a fresh
/// session (an answer takes a link's round trip; a node that died never answers, and is
/// only taken for gone after `PEER_SILENT_MS_MAX`).
pub const TAKE_TIMEOUT_MS: u64 = 1_000;
/// How often a shard tells the others it is alive when it has nothing else to say.
pub const ALIVE_EVERY_MS: u64 = 1_000;
/// A node not heard from for this long is taken for gone: the devices it reported are
/// dropped (watchers see them expire) until it speaks again. Five missed alives, so a
/// link's short reconnect (`cluster` links retry within 2 s) does not flap presence.
pub const PEER_SILENT_MS_MAX: u64 = 5_000;
/// A node that returns (first heard, back from silence, restarted) is asked for all its
/// devices every `ALIVE_EVERY_MS` until its answer ends (`refreshed`), for at most this
/// long: the first asks, or their answers, may be dropped by links still reconnecting
/// after the pause that made the node silent, and otherwise only its next full report
/// (every `presence.sweep_interval`) would bring its devices back. The answers are
/// idempotent (each device's state as it is); the bound covers a node that never ends one.
pub const REFRESH_ASK_WINDOW_MS: u64 = 60_000;

const KIND_CHANGES: u8 = 1;
const KIND_ALIVE: u8 = 2;
const KIND_REFRESH_ASKED: u8 = 3;
const KIND_SIGNAL: u8 = 4;
const KIND_TAKE_ASKED: u8 = 5;
const KIND_TAKEN: u8 = 6;
const KIND_REFRESHED: u8 = 7;

/// One relay frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayFrame {
    /// The sending shard's process (see the module doc).
    pub boot: u64,
    pub body: RelayBody,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayBody {
    Changes(Vec<RemoteChange>),
    Alive,
    RefreshAsked,
    /// Ends the answer to a `RefreshAsked`: the frames before it held every device.
    Refreshed,
    Signal(Signal),
    /// Hand session `session` over if `secret` and `user` match; answered with `Taken`.
    TakeAsked(TakeAsked),
    /// The answer to the `TakeAsked` with this id: the session's state, if it was here.
    Taken {
        id: u64,
        state: Option<SessionState>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeAsked {
    pub id: u64,
    pub session: String,
    pub secret: String,
    pub user: String,
}

/// What the gateway sends frames through: the links to the other nodes (`cluster::serve`
/// implements it). Lossy: a frame for a peer that is down or behind is dropped.
pub trait PeerLinks {
    /// Sends `frame` to the same shard of node `to`, or of every other node (`None`).
    fn send(&self, to: Option<u64>, frame: Vec<u8>);
}

/// Encodes `frame`; an error names the field over its limit (nothing is sent then).
pub fn encode(frame: &RelayFrame) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(64);
    out.push(VERSION);
    out.extend_from_slice(&frame.boot.to_le_bytes());
    match &frame.body {
        RelayBody::Changes(changes) => {
            if changes.len() > CHANGES_PER_FRAME_MAX {
                return Err(format!(
                    "{} changes, over {CHANGES_PER_FRAME_MAX}",
                    changes.len()
                ));
            }
            out.push(KIND_CHANGES);
            out.extend_from_slice(&(changes.len() as u32).to_le_bytes());
            for c in changes {
                put_change(c, &mut out)?;
            }
        }
        RelayBody::Alive => out.push(KIND_ALIVE),
        RelayBody::RefreshAsked => out.push(KIND_REFRESH_ASKED),
        RelayBody::Refreshed => out.push(KIND_REFRESHED),
        RelayBody::Signal(s) => {
            out.push(KIND_SIGNAL);
            put_signal(s, &mut out)?;
        }
        RelayBody::TakeAsked(t) => {
            out.push(KIND_TAKE_ASKED);
            out.extend_from_slice(&t.id.to_le_bytes());
            put_bounded("session", &t.session, RESUME_PART_BYTES_MAX, &mut out)?;
            put_bounded("secret", &t.secret, RESUME_PART_BYTES_MAX, &mut out)?;
            put_id("user", &t.user, &mut out)?;
        }
        RelayBody::Taken { id, state } => {
            out.push(KIND_TAKEN);
            out.extend_from_slice(&id.to_le_bytes());
            match state {
                None => out.push(0),
                Some(state) => {
                    out.push(1);
                    put_session(state, &mut out)?;
                }
            }
        }
    }
    assert!(out.len() <= FRAME_BYTES_MAX, "bounded by the field limits");
    Ok(out)
}

pub fn decode(bytes: &[u8]) -> Result<RelayFrame, String> {
    if bytes.len() > FRAME_BYTES_MAX {
        return Err(format!(
            "relay frame of {} bytes, over {FRAME_BYTES_MAX}",
            bytes.len()
        ));
    }
    let mut r = Reader::new(bytes);
    let version = r.u8("version")?;
    if version != VERSION {
        return Err(format!("relay frame version {version}, not {VERSION}"));
    }
    let boot = r.u64("boot")?;
    let body = match r.u8("kind")? {
        KIND_CHANGES => {
            // A change takes at least its tag and two empty strings.
            let n = r.count("changes", 5)?;
            if n > CHANGES_PER_FRAME_MAX {
                return Err(format!("{n} changes, over {CHANGES_PER_FRAME_MAX}"));
            }
            let mut changes = Vec::with_capacity(n);
            for _ in 0..n {
                changes.push(change(&mut r)?);
            }
            RelayBody::Changes(changes)
        }
        KIND_ALIVE => RelayBody::Alive,
        KIND_REFRESH_ASKED => RelayBody::RefreshAsked,
        KIND_REFRESHED => RelayBody::Refreshed,
        KIND_SIGNAL => RelayBody::Signal(signal(&mut r)?),
        KIND_TAKE_ASKED => RelayBody::TakeAsked(TakeAsked {
            id: r.u64("id")?,
            session: r.str16("session", RESUME_PART_BYTES_MAX)?.to_string(),
            secret: r.str16("secret", RESUME_PART_BYTES_MAX)?.to_string(),
            user: r.str16("user", ID_BYTES_MAX)?.to_string(),
        }),
        KIND_TAKEN => {
            let id = r.u64("id")?;
            let state = match r.u8("found")? {
                0 => None,
                1 => Some(session(&mut r)?),
                b => return Err(format!("found is {b}, not 0 or 1")),
            };
            RelayBody::Taken { id, state }
        }
        k => return Err(format!("unknown relay frame kind {k}")),
    };
    r.finish("relay frame")?;
    Ok(RelayFrame { boot, body })
}

fn put_id(what: &str, s: &str, out: &mut Vec<u8>) -> Result<(), String> {
    put_bounded(what, s, ID_BYTES_MAX, out)
}

fn put_bounded(what: &str, s: &str, max: usize, out: &mut Vec<u8>) -> Result<(), String> {
    if s.len() > max {
        return Err(format!("{what} is {} bytes, over {max}", s.len()));
    }
    put_str16(s, out);
    Ok(())
}

fn put_change(c: &RemoteChange, out: &mut Vec<u8>) -> Result<(), String> {
    let (tag, user, device, state) = match c {
        RemoteChange::Set {
            user,
            device,
            state,
        } => (0u8, user, device, Some(*state)),
        RemoteChange::Unbound { user, device } => (1, user, device, None),
        RemoteChange::Expired { user, device } => (2, user, device, None),
    };
    out.push(tag);
    put_id("user", user, out)?;
    put_id("device", device, out)?;
    if let Some(state) = state {
        out.push(state_byte(state));
    }
    Ok(())
}

fn change(r: &mut Reader) -> Result<RemoteChange, String> {
    let tag = r.u8("change")?;
    let user = r.str16("user", ID_BYTES_MAX)?.to_string();
    let device = r.str16("device", ID_BYTES_MAX)?.to_string();
    if user.is_empty() {
        return Err("a change of the anonymous user".into());
    }
    Ok(match tag {
        0 => RemoteChange::Set {
            user,
            device,
            state: state_of(r.u8("state")?)?,
        },
        1 => RemoteChange::Unbound { user, device },
        2 => RemoteChange::Expired { user, device },
        t => return Err(format!("unknown change tag {t}")),
    })
}

fn state_byte(s: PresenceState) -> u8 {
    match s {
        PresenceState::Online => 0,
        PresenceState::Away => 1,
        PresenceState::Offline => 2,
    }
}

fn state_of(b: u8) -> Result<PresenceState, String> {
    match b {
        0 => Ok(PresenceState::Online),
        1 => Ok(PresenceState::Away),
        2 => Ok(PresenceState::Offline),
        b => Err(format!("unknown presence state {b}")),
    }
}

fn put_signal(s: &Signal, out: &mut Vec<u8>) -> Result<(), String> {
    put_bounded("topic", &s.topic, TOPIC_ENCODED_BYTES_MAX, out)?;
    put_id("sender", &s.sender, out)?;
    put_bounded("kind", &s.kind, KIND_BYTES_MAX, out)?;
    out.extend_from_slice(&s.at_ns.to_le_bytes());
    signals::validate(s, SIGNAL_PAYLOAD_BYTES_MAX).map_err(|e| e.to_string())?;
    out.extend_from_slice(&(s.headers.len() as u32).to_le_bytes());
    for (name, value) in &s.headers {
        put_bounded("header name", name, HEADERS_BYTES_MAX, out)?;
        put_bounded("header value", value, HEADERS_BYTES_MAX, out)?;
    }
    out.extend_from_slice(&(s.payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&s.payload);
    Ok(())
}

fn signal(r: &mut Reader) -> Result<Signal, String> {
    let topic = r.str16("topic", TOPIC_ENCODED_BYTES_MAX)?.to_string();
    let sender = r.str16("sender", ID_BYTES_MAX)?.to_string();
    let kind = r.str16("kind", KIND_BYTES_MAX)?.to_string();
    let at_ns = r.i64("at_ns")?;
    let n = r.count("headers", 4)?;
    if n > HEADERS_PAIRS_MAX {
        return Err(format!("{n} headers, over {HEADERS_PAIRS_MAX}"));
    }
    let mut headers = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.str16("header name", HEADERS_BYTES_MAX)?.to_string();
        let value = r.str16("header value", HEADERS_BYTES_MAX)?.to_string();
        headers.push((name, value));
    }
    // The frame's own bound (`FRAME_BYTES_MAX`) limits what `take` can return; the
    // signal's caps are checked as the gateway checks a signal it routes.
    let len = r.u32("payload")? as usize;
    let payload = r.take(len, "payload")?.to_vec();
    let s = Signal {
        topic,
        sender,
        kind,
        headers,
        payload,
        at_ns,
    };
    signals::validate(&s, SIGNAL_PAYLOAD_BYTES_MAX).map_err(|e| e.to_string())?;
    Ok(s)
}

fn put_session(s: &SessionState, out: &mut Vec<u8>) -> Result<(), String> {
    put_id("user", &s.user, out)?;
    put_id("device", &s.device, out)?;
    if s.positions.len() > SESSION_SUBSCRIPTIONS_MAX {
        return Err(format!(
            "{} subscriptions, over {SESSION_SUBSCRIPTIONS_MAX}",
            s.positions.len()
        ));
    }
    let mut positions: Vec<_> = s.positions.iter().collect();
    positions.sort();
    out.extend_from_slice(&(positions.len() as u32).to_le_bytes());
    for ((topic, partition), next) in positions {
        put_bounded("topic", topic, TOPIC_ENCODED_BYTES_MAX, out)?;
        out.extend_from_slice(&partition.to_le_bytes());
        out.extend_from_slice(&next.to_le_bytes());
    }
    if s.watched_users.len() > WATCHED_USERS_PER_CONNECTION_MAX {
        return Err(format!(
            "{} watched users, over {WATCHED_USERS_PER_CONNECTION_MAX}",
            s.watched_users.len()
        ));
    }
    out.extend_from_slice(&(s.watched_users.len() as u32).to_le_bytes());
    for user in &s.watched_users {
        put_id("watched user", user, out)?;
    }
    Ok(())
}

fn session(r: &mut Reader) -> Result<SessionState, String> {
    let user = r.str16("user", ID_BYTES_MAX)?.to_string();
    let device = r.str16("device", ID_BYTES_MAX)?.to_string();
    // A position takes at least an empty topic, a partition and a seq.
    let n = r.count("positions", 2 + 4 + 8)?;
    if n > SESSION_SUBSCRIPTIONS_MAX {
        return Err(format!(
            "{n} subscriptions, over {SESSION_SUBSCRIPTIONS_MAX}"
        ));
    }
    let mut positions = std::collections::HashMap::with_capacity(n);
    let mut last: Option<(String, u32)> = None;
    for _ in 0..n {
        let key = (
            r.str16("topic", TOPIC_ENCODED_BYTES_MAX)?.to_string(),
            r.u32("partition")?,
        );
        if last.as_ref().is_some_and(|l| *l >= key) {
            return Err("positions out of order or repeated".into());
        }
        positions.insert(key.clone(), r.u64("next_seq")?);
        last = Some(key);
    }
    let n = r.count("watched users", 2)?;
    if n > WATCHED_USERS_PER_CONNECTION_MAX {
        return Err(format!(
            "{n} watched users, over {WATCHED_USERS_PER_CONNECTION_MAX}"
        ));
    }
    let mut watched_users = Vec::with_capacity(n);
    for _ in 0..n {
        watched_users.push(r.str16("watched user", ID_BYTES_MAX)?.to_string());
    }
    Ok(SessionState {
        user,
        device,
        positions,
        watched_users,
    })
}

mod peers;
pub use peers::{Heard, Peers};

#[cfg(test)]
mod tests;
