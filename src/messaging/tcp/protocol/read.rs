//! STREAM_READ (0x1E): one page of a partition from a position, without waiting.
//!
//! Request: `{"topic", "partition"?, "key"?, "from"?, "max"?}`. `from` is a sequence
//! (absent or 0 = the first retained record); `max` 1..=1000 records (default 64; a page is
//! also bounded by bytes). Reply OK: a page ([`super::records`]), `next` = the `from` of the
//! following read. A `from` below the retention horizon starts at `first_seq` with
//! `"gap":true`.

use super::{decode_fields, records_max, target, Target};
use crate::queue::protocol::request::RequestError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub target: Target,
    /// 0 = from the first retained record.
    pub from: u64,
    pub max: u32,
}

pub fn parse(payload: &[u8]) -> Result<Read, RequestError> {
    let f = decode_fields(payload, "streamReadRequest")?;
    Ok(Read {
        target: target(&f)?,
        from: f.from as u64,
        max: records_max(&f)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_defaults() {
        let r = parse(br#"{"topic":"match.a","partition":2,"from":17,"max":5}"#).unwrap();
        assert_eq!((r.target.partition, r.from, r.max), (Some(2), 17, 5));
        let r = parse(br#"{"topic":"match.a","from":null}"#).unwrap();
        assert_eq!((r.from, r.max), (0, super::super::STREAM_RECORDS_DEFAULT));
        // Reading is allowed on every valid topic, chat included: backends are trusted.
        assert!(parse(br#"{"topic":"chat.group.g1"}"#).is_ok());
    }

    #[test]
    fn bad_input_is_refused_with_v1_style_errors() {
        let err = |j: &str| parse(j.as_bytes()).unwrap_err().text();
        assert_eq!(
            err(r#"{"topic":"m","from":-1}"#),
            "invalid json: json: cannot unmarshal number -1 into Go struct field streamReadRequest.from of type uint64"
        );
        assert_eq!(err(""), "invalid json: unexpected end of JSON input");
        assert_eq!(err(r#"{"from":1}"#), "topic is required");
        assert!(err(r#"{"topic":"m","max":0}"#).starts_with("max must be"));
    }
}
