//! A client's headers on their way into a record: the server-owned names dropped (spec §18
//! G41), pairs sorted as the record stores them; and the message id a send is given.

use crate::messaging::fanout::RESERVED_HEADERS;
use crate::messaging::gateway::GatewayCtx;
use bytes::Bytes;
use std::collections::BTreeMap;

pub(super) fn clean_headers(headers: BTreeMap<String, String>) -> Vec<(String, String)> {
    headers
        .into_iter()
        .filter(|(k, _)| !RESERVED_HEADERS.contains(&k.as_str()))
        .collect()
}

pub(super) fn to_bytes_headers(h: Vec<(String, String)>) -> Vec<(Bytes, Bytes)> {
    let mut v: Vec<(Bytes, Bytes)> = h
        .into_iter()
        .map(|(k, v)| (Bytes::from(k), Bytes::from(v)))
        .collect();
    v.sort();
    v
}

/// A fresh message id: 16 random bytes as 32 lower-case hex digits, written into one
/// string of the final size (no string per byte).
pub(super) fn new_message_id(gw: &GatewayCtx) -> String {
    hex_id(&gw.random_bytes::<16>())
}

/// `bytes` as lower-case hex, written into one string of the final size (no string per
/// byte).
fn hex_id(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut id = String::with_capacity(2 * bytes.len());
    for b in bytes {
        write!(id, "{b:02x}").expect("writing to a String cannot fail");
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_names_are_dropped_and_the_rest_kept() {
        let mut h = BTreeMap::new();
        for name in RESERVED_HEADERS {
            h.insert(name.to_string(), "forged".to_string());
        }
        h.insert("trace".to_string(), "t1".to_string());
        h.insert("Sender".to_string(), "case differs".to_string());
        assert_eq!(
            clean_headers(h),
            vec![
                ("Sender".to_string(), "case differs".to_string()),
                ("trace".to_string(), "t1".to_string()),
            ]
        );
    }

    #[test]
    fn record_headers_are_sorted_pairs() {
        let h = vec![
            ("z".to_string(), "1".to_string()),
            ("a".to_string(), "2".to_string()),
            ("m".to_string(), "3".to_string()),
        ];
        let keys: Vec<Bytes> = to_bytes_headers(h).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            ["a", "m", "z"].map(|s| Bytes::from_static(s.as_bytes()))
        );
    }

    #[test]
    fn message_ids_are_lower_case_hex() {
        assert_eq!(hex_id(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        let id = hex_id(&[0xab; 16]);
        assert_eq!(id.len(), 32);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }
}
