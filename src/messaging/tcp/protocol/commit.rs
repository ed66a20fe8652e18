//! STREAM_COMMIT (0x20): store a named consumer's position in a partition, durably.
//!
//! Request: `{"topic", "partition"?, "key"?, "group", "member"?, "seq"}`. `seq` is the next
//! sequence the consumer wants (a page's `next`), not the last one it processed; a TAIL
//! without `from` resumes there. A `seq` past the partition's head is clamped to it.
//! Reply OK: `{"topic","partition","group","member","seq"}`. Cursors of backend groups are
//! kept apart from the devices' (`backend:<group>` in the cursor store).

use super::{consumer, decode_fields, target, Consumer, Target};
use crate::queue::protocol::frame::{self, status};
use crate::queue::protocol::request::RequestError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub target: Target,
    pub consumer: Consumer,
    /// >= 1.
    pub seq: u64,
}

pub fn parse(payload: &[u8]) -> Result<Commit, RequestError> {
    let f = decode_fields(payload, "streamCommitRequest")?;
    let target = target(&f)?;
    let consumer = consumer(&f, true)?.expect("required");
    if f.seq == 0 {
        return Err(RequestError::Required("seq is required (at least 1)"));
    }
    Ok(Commit {
        target,
        consumer,
        seq: f.seq as u64,
    })
}

/// The OK reply.
pub fn committed(c: &Commit, partition: u32, out: &mut Vec<u8>) {
    let body = serde_json::json!({
        "topic": c.target.topic,
        "partition": partition,
        "group": c.consumer.group,
        "member": c.consumer.member,
        "seq": c.seq,
    });
    frame::encode(status::OK, body.to_string().as_bytes(), out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_and_seq_are_required() {
        let err = |j: &str| parse(j.as_bytes()).unwrap_err().text();
        assert_eq!(err(r#"{"topic":"m","seq":3}"#), "group is required");
        assert_eq!(
            err(r#"{"topic":"m","group":"g"}"#),
            "seq is required (at least 1)"
        );
        let c = parse(br#"{"topic":"m","group":"g","seq":3}"#).unwrap();
        assert_eq!((c.seq, c.consumer.member.as_str()), (3, ""));
    }

    #[test]
    fn the_reply_echoes_the_commit() {
        let c = parse(br#"{"topic":"m","partition":1,"group":"g","member":"w","seq":3}"#).unwrap();
        let mut out = Vec::new();
        committed(&c, 1, &mut out);
        let (f, _) = frame::decode(&out).unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_slice(f.payload).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"topic":"m","partition":1,"group":"g","member":"w","seq":3})
        );
    }
}
