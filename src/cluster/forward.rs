//! Forwarding (design §9: any node serves any client): a node that does not lead a slot
//! sends the command to the node that does, over the same links, and relays the outcome.
//!
//! ```text
//! request = id:u64 | slot:u16 | command                  (command: a command log record)
//! reply   = id:u64 | status:u8 | body
//!   status 0 applied: outcome        1 not leader: leader:u64 (0 = unknown)
//!          2 superseded   3 unknown (maybe applied)   4 timed out   5 too many
//!          6 stopped: text            7 unknown slot
//! outcome = kind:u8 | fields (see `put_outcome`); messages = count:u32 | (len:u32 | publish record)*
//! text    = len:u32 | UTF-8
//! ```
//!
//! Commands and messages travel as command log records (`queue::server::wal::record`):
//! one codec, already canonical and bounded. Every count is checked against the bytes
//! left before anything is allocated.

use super::replica::NotApplied;
use super::wire::{Reader, WireError};
use crate::queue::broker::{Command, Outcome};
use crate::queue::message::Message;
use crate::queue::server::wal::record;
use bytes::Bytes;
use std::fmt;

/// A command one node asks the slot's leader to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: u64,
    pub slot: u16,
    pub cmd: Command,
}

/// What the leader answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Applied(Outcome),
    NotLeader(Option<u64>),
    NotApplied(NotApplied),
    TimedOut,
    TooMany,
    Stopped(String),
    UnknownSlot,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub id: u64,
    pub answer: Answer,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardError(pub String);

impl From<WireError> for ForwardError {
    fn from(e: WireError) -> ForwardError {
        ForwardError(e.to_string())
    }
}

impl fmt::Display for ForwardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "forwarded frame: {}", self.0)
    }
}

pub fn encode_request(r: &Request, out: &mut Vec<u8>) {
    out.extend_from_slice(&r.id.to_le_bytes());
    out.extend_from_slice(&r.slot.to_le_bytes());
    record::encode(&r.cmd, out);
}

pub fn decode_request(bytes: Bytes) -> Result<Request, ForwardError> {
    let mut r = Reader::new(bytes);
    let id = r.u64("request id")?;
    let slot = r.u16("slot")?;
    let cmd = r.take(r.remaining(), "command")?;
    let cmd = record::decode(&cmd).map_err(|e| ForwardError(format!("command: {e}")))?;
    Ok(Request { id, slot, cmd })
}

pub fn encode_reply(reply: &Reply, out: &mut Vec<u8>) {
    out.extend_from_slice(&reply.id.to_le_bytes());
    match &reply.answer {
        Answer::Applied(outcome) => {
            out.push(0);
            put_outcome(outcome, out);
        }
        Answer::NotLeader(leader) => {
            out.push(1);
            out.extend_from_slice(&leader.unwrap_or(0).to_le_bytes());
        }
        Answer::NotApplied(NotApplied::Superseded) => out.push(2),
        Answer::NotApplied(NotApplied::Unknown) => out.push(3),
        Answer::TimedOut => out.push(4),
        Answer::TooMany => out.push(5),
        Answer::Stopped(why) => {
            out.push(6);
            put_text(why, out);
        }
        Answer::UnknownSlot => out.push(7),
    }
}

pub fn decode_reply(bytes: Bytes) -> Result<Reply, ForwardError> {
    let mut r = Reader::new(bytes);
    let id = r.u64("reply id")?;
    let answer = match r.u8("status")? {
        0 => Answer::Applied(outcome(&mut r)?),
        1 => Answer::NotLeader(match r.u64("leader")? {
            0 => None,
            id => Some(id),
        }),
        2 => Answer::NotApplied(NotApplied::Superseded),
        3 => Answer::NotApplied(NotApplied::Unknown),
        4 => Answer::TimedOut,
        5 => Answer::TooMany,
        6 => Answer::Stopped(text(&mut r, "reason")?),
        7 => Answer::UnknownSlot,
        s => return Err(ForwardError(format!("unknown status {s}"))),
    };
    if r.remaining() > 0 {
        return Err(ForwardError(format!(
            "{} bytes after the reply",
            r.remaining()
        )));
    }
    Ok(Reply { id, answer })
}

fn put_outcome(o: &Outcome, out: &mut Vec<u8>) {
    match o {
        Outcome::Published => out.push(0),
        Outcome::PublishedLive => out.push(1),
        Outcome::Delivered(messages) => {
            out.push(2);
            put_messages(messages, out);
        }
        Outcome::Empty => out.push(3),
        Outcome::Acked => out.push(4),
        Outcome::Nacked => out.push(5),
        Outcome::Subscribed {
            catch_up,
            first_delivery,
        } => {
            out.push(6);
            out.push(first_delivery.is_some() as u8);
            out.extend_from_slice(&first_delivery.unwrap_or(0).to_le_bytes());
            put_messages(catch_up, out);
        }
        Outcome::Confirmed(n) => {
            out.push(7);
            out.extend_from_slice(&n.to_le_bytes());
        }
        Outcome::Requeued(n) => {
            out.push(8);
            out.extend_from_slice(&n.to_le_bytes());
        }
        Outcome::Purged(n) => {
            out.push(9);
            out.extend_from_slice(&n.to_le_bytes());
        }
        Outcome::Declared { created } => {
            out.push(10);
            out.push(*created as u8);
        }
        Outcome::Ticked { changed } => {
            out.push(11);
            out.push(*changed as u8);
        }
        Outcome::Disconnected => out.push(12),
        Outcome::Error(text) => {
            out.push(13);
            put_text(text, out);
        }
        Outcome::NotLeader {
            leader,
            leader_id,
            leader_tcp,
            leader_http,
        } => {
            out.push(14);
            put_text(leader, out);
            put_text(leader_id, out);
            put_text(leader_tcp, out);
            put_text(leader_http, out);
        }
        Outcome::Exchanged { version } => {
            out.push(15);
            out.extend_from_slice(&version.to_le_bytes());
        }
    }
}

fn put_messages(messages: &[Message], out: &mut Vec<u8>) {
    out.extend_from_slice(&(messages.len() as u32).to_le_bytes());
    let mut one = Vec::new();
    for msg in messages {
        one.clear();
        record::encode(&Command::Publish { msg: msg.clone() }, &mut one);
        out.extend_from_slice(&(one.len() as u32).to_le_bytes());
        out.extend_from_slice(&one);
    }
}

fn put_text(text: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

fn text(r: &mut Reader, field: &'static str) -> Result<String, ForwardError> {
    let bytes = r.bytes(field)?;
    String::from_utf8(bytes.to_vec()).map_err(|_| ForwardError(format!("{field} is not UTF-8")))
}

fn messages(r: &mut Reader) -> Result<Vec<Message>, ForwardError> {
    let count = r.u32("message count")? as usize;
    // Each message takes at least its length and a record's first byte.
    if count > r.remaining() / 5 {
        return Err(ForwardError(format!(
            "{count} messages in {} bytes",
            r.remaining()
        )));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        match record::decode(&r.bytes("message")?) {
            Ok(Command::Publish { msg }) => out.push(msg),
            Ok(_) => return Err(ForwardError("a message that is not one".into())),
            Err(e) => return Err(ForwardError(format!("message: {e}"))),
        }
    }
    Ok(out)
}

fn outcome(r: &mut Reader) -> Result<Outcome, ForwardError> {
    Ok(match r.u8("outcome")? {
        0 => Outcome::Published,
        1 => Outcome::PublishedLive,
        2 => Outcome::Delivered(messages(r)?),
        3 => Outcome::Empty,
        4 => Outcome::Acked,
        5 => Outcome::Nacked,
        6 => {
            let has_first = r.bool("has first delivery")?;
            let first = r.u64("first delivery")?;
            Outcome::Subscribed {
                first_delivery: has_first.then_some(first),
                catch_up: messages(r)?,
            }
        }
        7 => Outcome::Confirmed(r.u64("confirmed")?),
        8 => Outcome::Requeued(r.u32("requeued")?),
        9 => Outcome::Purged(r.u64("purged")?),
        10 => Outcome::Declared {
            created: r.bool("created")?,
        },
        11 => Outcome::Ticked {
            changed: r.bool("changed")?,
        },
        12 => Outcome::Disconnected,
        13 => Outcome::Error(text(r, "error")?),
        14 => Outcome::NotLeader {
            leader: text(r, "leader")?,
            leader_id: text(r, "leader_id")?,
            leader_tcp: text(r, "leader_tcp")?,
            leader_http: text(r, "leader_http")?,
        },
        15 => Outcome::Exchanged {
            version: r.u64("exchange version")?,
        },
        k => return Err(ForwardError(format!("unknown outcome {k}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::broker::ConsumerRef;
    use crate::queue::message::{IdGenerator, Message};
    use boltq_io::testutil::Rng;
    use std::collections::BTreeMap;

    fn message(ids: &mut IdGenerator) -> Message {
        let mut msg = crate::queue::server::wal::tests::message("jobs");
        msg.id = ids.next(3);
        msg.headers = BTreeMap::from([("k".to_string(), "v".to_string())]);
        msg.priority = 2;
        msg
    }

    fn every_answer() -> Vec<Answer> {
        let mut ids = IdGenerator::new([1; 7]);
        let mut outcomes = vec![
            Outcome::Published,
            Outcome::PublishedLive,
            Outcome::Delivered(vec![message(&mut ids), message(&mut ids)]),
            Outcome::Empty,
            Outcome::Acked,
            Outcome::Nacked,
            Outcome::Subscribed {
                catch_up: vec![message(&mut ids)],
                first_delivery: Some(9),
            },
            Outcome::Subscribed {
                catch_up: vec![],
                first_delivery: None,
            },
            Outcome::Confirmed(4),
            Outcome::Requeued(5),
            Outcome::Purged(6),
            Outcome::Declared { created: true },
            Outcome::Ticked { changed: false },
            Outcome::Disconnected,
            Outcome::Error("message x not found in pending".into()),
            Outcome::NotLeader {
                leader: "10.0.0.1:9100".into(),
                leader_id: "n1".into(),
                leader_tcp: "10.0.0.1:9091".into(),
                leader_http: String::new(),
            },
            Outcome::Exchanged { version: 17 },
        ];
        let mut answers: Vec<Answer> = outcomes.drain(..).map(Answer::Applied).collect();
        answers.extend([
            Answer::NotLeader(Some(3)),
            Answer::NotLeader(None),
            Answer::NotApplied(NotApplied::Superseded),
            Answer::NotApplied(NotApplied::Unknown),
            Answer::TimedOut,
            Answer::TooMany,
            Answer::Stopped("disk".into()),
            Answer::UnknownSlot,
        ]);
        answers
    }

    #[test]
    fn requests_and_replies_round_trip() {
        let mut ids = IdGenerator::new([2; 7]);
        for cmd in [
            Command::Publish {
                msg: message(&mut ids),
            },
            Command::Consume {
                queue: "jobs".into(),
                consumer: ConsumerRef { shard: 1, conn: 77 },
                max: 10,
                now_ns: 5,
            },
        ] {
            let req = Request {
                id: 42,
                slot: 3,
                cmd,
            };
            let mut bytes = Vec::new();
            encode_request(&req, &mut bytes);
            assert_eq!(decode_request(bytes.into()).unwrap(), req);
        }
        for (id, answer) in every_answer().into_iter().enumerate() {
            let reply = Reply {
                id: id as u64,
                answer,
            };
            let mut bytes = Vec::new();
            encode_reply(&reply, &mut bytes);
            assert_eq!(decode_reply(bytes.clone().into()).unwrap(), reply);
            for cut in 0..bytes.len() {
                assert!(
                    decode_reply(Bytes::copy_from_slice(&bytes[..cut])).is_err(),
                    "{reply:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn damaged_replies_are_refused_or_decode_without_panicking() {
        let mut rng = Rng::new(3);
        let frames: Vec<Vec<u8>> = every_answer()
            .into_iter()
            .map(|answer| {
                let mut bytes = Vec::new();
                encode_reply(&Reply { id: 1, answer }, &mut bytes);
                bytes
            })
            .collect();
        for _ in 0..20_000 {
            let mut bytes = frames[rng.below(frames.len() as u64) as usize].clone();
            let at = rng.below(bytes.len() as u64) as usize;
            bytes[at] = rng.below(256) as u8;
            if let Err(e) = decode_reply(Bytes::copy_from_slice(&bytes)) {
                assert!(!e.to_string().is_empty());
            }
            let _ = decode_request(bytes.into());
        }
    }
}
