//! Forwarding (design §9: any node serves any client): a node that does not lead a slot
//! sends the command to the node that does, over the same links, and relays the outcome.
//!
//! ```text
//! request = id:u64 | slot:u16 | command    (the entry bytes the leader proposes)
//!         | id:u64 | slot:u16 | 0x4F | topic:str16 | partition:u32 | from:u64 | to:u64
//!                                    (a read of records [from, to) of the asked node's
//!                                     own copy of a partition: never proposed)
//! reply   = id:u64 | status:u8 | body
//!   status 0 applied: outcome        1 not leader: leader:u64 (0 = unknown)
//!          2 superseded   3 unknown (maybe applied)   4 timed out   5 too many
//!          6 stopped: text            7 unknown slot
//!          8 applied (messaging): stream outcome
//!          9 records: count:u32 | record frames (`boltq_io::record`) to the end, in seq order
//! outcome = kind:u8 | fields (see `put_outcome`); messages = count:u32 | (len:u32 | publish record)*
//! stream outcome = kind:u8 | fields (see `put_stream_outcome`)
//! text    = len:u32 | UTF-8
//! ```
//!
//! Commands travel as the bytes of the raft entry they become: a queue command log record
//! (`queue::server::wal::record`) or a messaging command (`messaging::slot::command`),
//! told apart by the first byte as the replica does; messages as publish records. One
//! codec each, already canonical and bounded. Every count is checked against the bytes
//! left before anything is allocated.

use super::replica::NotApplied;
use super::wire::{Reader, WireError};
use crate::messaging::cursor::Commit;
use crate::messaging::dedup::Coordinates;
use crate::messaging::engine::replicated::StreamRead;
use crate::messaging::slot::{command as stream_command, StreamCommand, StreamOutcome};
use crate::messaging::topic::{validate_topic, TOPIC_ENCODED_BYTES_MAX};
use crate::queue::broker::{Command, Outcome};
use crate::queue::message::Message;
use crate::queue::server::wal::record;
use boltq_io::record::Record;
use bytes::Bytes;
use std::fmt;

/// A command of either plane, as a slot's group carries it.
#[derive(Debug, Clone, PartialEq)]
pub enum SlotCommand {
    Queue(Command),
    Stream(StreamCommand),
}

/// The first byte of a read request's body, in the messaging commands' range but never a
/// command (`messaging::slot::command` does not use it).
pub const READ_TAG: u8 = 0x4F;
/// Most record bytes one read's reply carries (more take more reads; a single larger
/// record is still sent whole).
pub const READ_BYTES_MAX: usize = 1024 * 1024;
/// Most records one read's reply carries.
pub const READ_RECORDS_MAX: usize = 4096;

/// What one node asks another.
#[derive(Debug, Clone, PartialEq)]
pub enum Asked {
    /// Run this command (the asked node leads the slot).
    Command(SlotCommand),
    /// Send records of the asked node's own copy of a partition.
    Read(StreamRead),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: u64,
    pub slot: u16,
    pub asked: Asked,
}

/// What the leader answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Applied(Outcome),
    StreamApplied(StreamOutcome),
    NotLeader(Option<u64>),
    NotApplied(NotApplied),
    TimedOut,
    TooMany,
    Stopped(String),
    UnknownSlot,
    /// A read's records, in sequence order.
    Records(Vec<Record>),
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

/// On error (a messaging command past its limits, which the proposer checks first)
/// nothing is written.
pub fn encode_request(r: &Request, out: &mut Vec<u8>) -> Result<(), ForwardError> {
    let start = out.len();
    out.extend_from_slice(&r.id.to_le_bytes());
    out.extend_from_slice(&r.slot.to_le_bytes());
    match &r.asked {
        Asked::Command(SlotCommand::Queue(cmd)) => record::encode(cmd, out),
        Asked::Command(SlotCommand::Stream(cmd)) => {
            if let Err(e) = stream_command::encode(cmd, out) {
                out.truncate(start);
                return Err(ForwardError(e));
            }
        }
        Asked::Read(read) => {
            if validate_topic(&read.topic).is_err() || read.topic.len() > TOPIC_ENCODED_BYTES_MAX {
                out.truncate(start);
                return Err(ForwardError(format!("read of topic {:?}", read.topic)));
            }
            out.push(READ_TAG);
            out.extend_from_slice(&(read.topic.len() as u16).to_le_bytes());
            out.extend_from_slice(read.topic.as_bytes());
            out.extend_from_slice(&read.partition.to_le_bytes());
            out.extend_from_slice(&read.from_seq.to_le_bytes());
            out.extend_from_slice(&read.to_seq.to_le_bytes());
        }
    }
    Ok(())
}

pub fn decode_request(bytes: Bytes) -> Result<Request, ForwardError> {
    let mut r = Reader::new(bytes);
    let id = r.u64("request id")?;
    let slot = r.u16("slot")?;
    let cmd = r.take(r.remaining(), "command")?;
    let asked = if cmd.first() == Some(&READ_TAG) {
        Asked::Read(decode_read(&cmd[1..])?)
    } else if stream_command::is_stream_command(&cmd) {
        Asked::Command(SlotCommand::Stream(
            stream_command::decode(&cmd).map_err(|e| ForwardError(format!("command: {e}")))?,
        ))
    } else {
        Asked::Command(SlotCommand::Queue(
            record::decode(&cmd).map_err(|e| ForwardError(format!("command: {e}")))?,
        ))
    };
    Ok(Request { id, slot, asked })
}

fn decode_read(body: &[u8]) -> Result<StreamRead, ForwardError> {
    let mut r = crate::messaging::slot::Reader::new(body);
    let read = (|| {
        let topic = r.str16("topic", TOPIC_ENCODED_BYTES_MAX)?.to_string();
        validate_topic(&topic).map_err(|e| format!("topic: {e}"))?;
        let read = StreamRead {
            topic,
            partition: r.u32("partition")?,
            from_seq: r.u64("from")?,
            to_seq: r.u64("to")?,
        };
        r.finish("read")?;
        Ok::<_, String>(read)
    })()
    .map_err(|e| ForwardError(format!("read: {e}")))?;
    if read.from_seq == 0 || read.from_seq >= read.to_seq {
        return Err(ForwardError(format!(
            "read of [{}, {}): an empty or backwards range",
            read.from_seq, read.to_seq
        )));
    }
    Ok(read)
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
        Answer::StreamApplied(outcome) => {
            out.push(8);
            put_stream_outcome(outcome, out);
        }
        Answer::Records(records) => {
            out.push(9);
            put_records(records, out);
        }
    }
}

/// A record that does not encode (none a log held does) ends the list there; the reader
/// asks again from the first one it lacks.
fn put_records(records: &[Record], out: &mut Vec<u8>) {
    let count_at = out.len();
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut count = 0u32;
    for record in records.iter().take(READ_RECORDS_MAX) {
        if boltq_io::record::encode(record, out).is_err() {
            break;
        }
        count += 1;
    }
    out[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
}

/// The records to the end of the reply.
fn records(r: &mut Reader) -> Result<Vec<Record>, ForwardError> {
    let count = r.u32("record count")? as usize;
    let frame_min = boltq_io::record::FRAME_HEADER_BYTES + boltq_io::record::BODY_FIXED_BYTES;
    if count > READ_RECORDS_MAX || count > r.remaining() / frame_min {
        return Err(ForwardError(format!(
            "{count} records in {} bytes",
            r.remaining()
        )));
    }
    let rest = r.take(r.remaining(), "records")?;
    let mut at = 0;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let (view, len) = boltq_io::record::decode(&rest[at..])
            .map_err(|e| ForwardError(format!("record: {e}")))?;
        out.push(view.to_record());
        at += len;
    }
    if at != rest.len() {
        return Err(ForwardError(format!(
            "{} bytes after the records",
            rest.len() - at
        )));
    }
    Ok(out)
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
        8 => Answer::StreamApplied(stream_outcome(&mut r)?),
        9 => Answer::Records(records(&mut r)?),
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

/// kind 0 appended: duplicate u8, message_id, topic (text each), partition u32, seq u64,
/// timestamp_ns i64; 1 stored: seq u64, clamped u8; 2 unchanged: stored u64; 3 refused: text;
/// 4 busy: text; 5 fanned out: cleared u32.
fn put_stream_outcome(o: &StreamOutcome, out: &mut Vec<u8>) {
    match o {
        StreamOutcome::Appended { coords, duplicate } => {
            out.push(0);
            out.push(u8::from(*duplicate));
            put_text(&coords.message_id, out);
            put_text(&coords.topic, out);
            out.extend_from_slice(&coords.partition.to_le_bytes());
            out.extend_from_slice(&coords.seq.to_le_bytes());
            out.extend_from_slice(&coords.timestamp_ns.to_le_bytes());
        }
        StreamOutcome::Committed(Commit::Stored { seq, clamped }) => {
            out.push(1);
            out.extend_from_slice(&seq.to_le_bytes());
            out.push(u8::from(*clamped));
        }
        StreamOutcome::Committed(Commit::Unchanged { stored }) => {
            out.push(2);
            out.extend_from_slice(&stored.to_le_bytes());
        }
        StreamOutcome::Refused(why) => {
            out.push(3);
            put_text(why, out);
        }
        StreamOutcome::Busy(why) => {
            out.push(4);
            put_text(why, out);
        }
        StreamOutcome::FannedOut { cleared } => {
            out.push(5);
            out.extend_from_slice(&cleared.to_le_bytes());
        }
    }
}

fn stream_outcome(r: &mut Reader) -> Result<StreamOutcome, ForwardError> {
    Ok(match r.u8("stream outcome")? {
        0 => {
            let duplicate = r.bool("duplicate")?;
            let coords = Coordinates {
                message_id: text(r, "message_id")?,
                topic: text(r, "topic")?,
                partition: r.u32("partition")?,
                seq: r.u64("seq")?,
                timestamp_ns: r.i64("timestamp_ns")?,
            };
            StreamOutcome::Appended { coords, duplicate }
        }
        1 => StreamOutcome::Committed(Commit::Stored {
            seq: r.u64("cursor")?,
            clamped: r.bool("clamped")?,
        }),
        2 => StreamOutcome::Committed(Commit::Unchanged {
            stored: r.u64("cursor")?,
        }),
        3 => StreamOutcome::Refused(text(r, "refusal")?),
        4 => StreamOutcome::Busy(text(r, "refusal")?),
        5 => StreamOutcome::FannedOut {
            cleared: r.u32("cleared")?,
        },
        k => return Err(ForwardError(format!("unknown stream outcome {k}"))),
    })
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
        msg.edit_extras(|e| e.headers = BTreeMap::from([("k".to_string(), "v".to_string())]));
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
        answers.extend(
            [
                StreamOutcome::Appended {
                    coords: Coordinates {
                        message_id: "m-1".into(),
                        topic: "chat.dm.a".into(),
                        partition: 2,
                        seq: 9,
                        timestamp_ns: -3,
                    },
                    duplicate: true,
                },
                StreamOutcome::Committed(Commit::Stored {
                    seq: 4,
                    clamped: true,
                }),
                StreamOutcome::Committed(Commit::Unchanged { stored: 8 }),
                StreamOutcome::Refused("no".into()),
                StreamOutcome::Busy("later".into()),
                StreamOutcome::FannedOut { cleared: 7 },
            ]
            .map(Answer::StreamApplied),
        );
        answers.extend([
            Answer::NotLeader(Some(3)),
            Answer::NotLeader(None),
            Answer::NotApplied(NotApplied::Superseded),
            Answer::NotApplied(NotApplied::Unknown),
            Answer::TimedOut,
            Answer::TooMany,
            Answer::Stopped("disk".into()),
            Answer::UnknownSlot,
            Answer::Records(vec![]),
            Answer::Records(vec![
                Record {
                    seq: 4,
                    timestamp_ns: 9,
                    payload: Bytes::from_static(b"four"),
                    ..Record::default()
                },
                Record {
                    seq: 5,
                    timestamp_ns: 10,
                    key: Bytes::from_static(b"k"),
                    headers: vec![(Bytes::from_static(b"h"), Bytes::from_static(b"v"))],
                    payload: Bytes::from_static(b"five"),
                    ..Record::default()
                },
            ]),
        ]);
        answers
    }

    #[test]
    fn requests_and_replies_round_trip() {
        let mut ids = IdGenerator::new([2; 7]);
        let append = crate::messaging::slot::Append {
            topic: "chat.dm.a".into(),
            partition: 1,
            now_ns: 7,
            dedup: None,
            key: Bytes::from_static(b"k"),
            headers: vec![],
            payload: Bytes::from_static(b"hello"),
            fanout: vec!["bob".into()],
        };
        for cmd in [
            SlotCommand::Queue(Command::Publish {
                msg: message(&mut ids),
            }),
            SlotCommand::Queue(Command::Consume {
                queue: "jobs".into(),
                consumer: ConsumerRef { shard: 1, conn: 77 },
                max: 10,
                now_ns: 5,
            }),
            SlotCommand::Stream(StreamCommand::Append(append)),
        ] {
            let req = Request {
                id: 42,
                slot: 3,
                asked: Asked::Command(cmd),
            };
            let mut bytes = Vec::new();
            encode_request(&req, &mut bytes).expect("within limits");
            assert_eq!(decode_request(bytes.into()).unwrap(), req);
        }
        let read = Request {
            id: 43,
            slot: 9,
            asked: Asked::Read(StreamRead {
                topic: "chat.dm.a".into(),
                partition: 2,
                from_seq: 5,
                to_seq: 70,
            }),
        };
        let mut bytes = Vec::new();
        encode_request(&read, &mut bytes).expect("a valid read");
        assert_eq!(decode_request(bytes.clone().into()).unwrap(), read);
        for cut in 0..bytes.len() {
            assert!(decode_request(Bytes::copy_from_slice(&bytes[..cut])).is_err());
        }
        // An empty or backwards range is refused.
        let at_to = bytes.len() - 8;
        bytes[at_to..].copy_from_slice(&5u64.to_le_bytes());
        let err = decode_request(bytes.into()).expect_err("empty range");
        assert!(err.to_string().contains("empty or backwards"), "{err}");
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
