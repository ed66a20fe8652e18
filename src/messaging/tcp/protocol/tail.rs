//! STREAM_TAIL (0x1F): a long-poll read for consumers. Like CONSUME with `wait_ms`, but on a
//! stream partition and without removing anything: records stay for every other reader.
//!
//! Request: `{"topic", "partition"?, "key"?, "from"?, "group"?, "member"?, "max"?,
//! "wait_ms"?}`. The position is `from` when given (> 0); else, for a named consumer
//! (`group`, optional `member`), its committed cursor; else the first retained record.
//! When nothing is there yet the reply waits up to `wait_ms` (capped at
//! [`WAIT_MS_MAX`]; 0 = answer at once) for a record to become durable. Reply OK: a page
//! ([`super::records`]) with `group`/`member` echoed; an empty page when the wait ran out.
//! Nothing is committed by a TAIL: the consumer sends STREAM_COMMIT with the page's `next`
//! once it has processed the records (at-least-once).

use super::{consumer, decode_fields, records_max, target, Consumer, Target};
use crate::queue::protocol::request::RequestError;

/// Longest wait, as for CONSUME's long-poll.
pub const WAIT_MS_MAX: u64 = crate::queue::protocol::request::WAIT_MS_MAX;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub target: Target,
    /// `None` = the consumer's cursor, else the first retained record.
    pub from: Option<u64>,
    pub consumer: Option<Consumer>,
    pub max: u32,
    /// At most [`WAIT_MS_MAX`].
    pub wait_ms: u64,
}

pub fn parse(payload: &[u8]) -> Result<Tail, RequestError> {
    let f = decode_fields(payload, "streamTailRequest")?;
    Ok(Tail {
        target: target(&f)?,
        from: (f.from > 0).then_some(f.from as u64),
        consumer: consumer(&f, false)?,
        max: records_max(&f)?,
        wait_ms: (f.wait_ms as u64).min(WAIT_MS_MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_consumer_without_position_resumes_from_its_cursor() {
        let t =
            parse(br#"{"topic":"match.a","group":"billing","member":"w1","wait_ms":250}"#).unwrap();
        assert_eq!(t.from, None);
        assert_eq!(t.wait_ms, 250);
        let c = t.consumer.unwrap();
        assert_eq!((c.group.as_str(), c.member.as_str()), ("billing", "w1"));
        let t = parse(br#"{"topic":"match.a","from":9}"#).unwrap();
        assert_eq!((t.from, t.consumer), (Some(9), None));
    }

    #[test]
    fn waits_are_capped() {
        let t = parse(br#"{"topic":"m","wait_ms":18446744073709551615}"#).unwrap();
        assert_eq!(t.wait_ms, WAIT_MS_MAX);
        let t = parse(br#"{"topic":"m"}"#).unwrap();
        assert_eq!(t.wait_ms, 0);
    }

    #[test]
    fn bad_consumers_are_refused() {
        let err = |j: &str| parse(j.as_bytes()).unwrap_err().text();
        assert_eq!(err(r#"{"topic":"m","member":"w"}"#), "member needs a group");
        assert!(err(r#"{"topic":"m","group":5}"#).starts_with("invalid json"));
    }
}
