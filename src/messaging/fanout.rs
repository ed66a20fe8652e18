//! Fan-out planning for a conversation send (spec/messaging-engine.md §6), sans-IO.
//!
//! The conversation record is always written first; then, for conversations of at most
//! `chat.fanout_on_write_limit` members (inclusive), one payload-less pointer per member
//! inbox, the sender's included. Larger conversations are read at their own partition
//! (fan-out on read): a send costs one append whatever the audience.

use crate::messaging::topic;
use bytes::Bytes;

/// Header names the chat plane gives a meaning (sender, message ids, pointers): only the
/// server writes them, so a consumer can trust them, and a client's values for them are
/// dropped (gateway) or refused (stream publish over TCP) — spec §18 G41.
pub const RESERVED_HEADERS: [&str; 8] = [
    "client_msg_id",
    "conv_partition",
    "conv_seq",
    "conversation",
    "kind",
    "message_id",
    "pointer",
    "sender",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// Write a pointer to each of these inboxes (sorted, distinct, valid ids).
    OnWrite(Vec<String>),
    /// No pointers: members tail the conversation.
    OnRead,
}

/// Chooses the strategy for `members` (as the membership service or the direct id gave
/// them). Ids that could not name an inbox (outside the id character set) and duplicates
/// are dropped, so a misbehaving membership service cannot create odd topics.
pub fn plan(members: &[String], limit: usize) -> Strategy {
    let mut valid: Vec<String> = members
        .iter()
        .filter(|m| topic::valid_id(m))
        .cloned()
        .collect();
    valid.sort();
    valid.dedup();
    if valid.len() > limit {
        Strategy::OnRead
    } else {
        Strategy::OnWrite(valid)
    }
}

/// The send's headers every pointer repeats, sorted by name: all of them the server's
/// (a client's values for these names never reach a record).
pub const POINTER_COPIED_HEADERS: [&str; 5] = [
    "client_msg_id",
    "conversation",
    "kind",
    "message_id",
    "sender",
];

/// The headers of a send's record that its pointers repeat ([`POINTER_COPIED_HEADERS`]), in
/// the record's order (sorted by name).
pub fn copied_headers(record_headers: &[(Bytes, Bytes)]) -> Vec<(Bytes, Bytes)> {
    record_headers
        .iter()
        .filter(|(k, _)| {
            POINTER_COPIED_HEADERS
                .iter()
                .any(|c| c.as_bytes() == k.as_ref())
        })
        .cloned()
        .collect()
}

/// The headers of every pointer of one send: the send's copied ones ([`copied_headers`])
/// plus `pointer`, `conv_seq` and `conv_partition`, sorted by name (records store headers
/// sorted).
pub fn pointer_headers(
    copied: &[(Bytes, Bytes)],
    conv_seq: u64,
    conv_partition: u32,
) -> Vec<(Bytes, Bytes)> {
    let mut h = copied_headers(copied);
    h.push((Bytes::from_static(b"pointer"), Bytes::from_static(b"1")));
    h.push((
        Bytes::from_static(b"conv_seq"),
        Bytes::from(conv_seq.to_string()),
    ));
    h.push((
        Bytes::from_static(b"conv_partition"),
        Bytes::from(conv_partition.to_string()),
    ));
    h.sort();
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("u{i:04}")).collect()
    }

    #[test]
    fn the_limit_is_inclusive() {
        assert_eq!(plan(&ids(256), 256), Strategy::OnWrite(ids(256)));
        assert_eq!(plan(&ids(257), 256), Strategy::OnRead);
        assert_eq!(plan(&ids(1), 256), Strategy::OnWrite(ids(1)));
    }

    #[test]
    fn duplicates_and_ids_that_cannot_name_an_inbox_are_dropped() {
        let members: Vec<String> = ["bob", "alice", "bob", "#", "a.b", "", "carol*"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            plan(&members, 10),
            Strategy::OnWrite(vec!["alice".to_string(), "bob".to_string()])
        );
        // Dropped ids do not count towards the limit either.
        assert_eq!(
            plan(&members, 2),
            Strategy::OnWrite(vec!["alice".to_string(), "bob".to_string()])
        );
    }

    #[test]
    fn pointers_carry_the_coordinates_sorted_and_cannot_be_forged() {
        let send: Vec<(Bytes, Bytes)> = [
            ("conv_seq", "999"),
            ("mood", "calm"),
            ("message_id", "m1"),
            ("sender", "alice"),
        ]
        .iter()
        .map(|(k, v)| (Bytes::from(*k), Bytes::from(*v)))
        .collect();
        let h = pointer_headers(&send, 42, 6);
        let pairs: Vec<(String, String)> = h
            .iter()
            .map(|(k, v)| {
                (
                    String::from_utf8(k.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            vec![
                ("conv_partition".into(), "6".into()),
                ("conv_seq".into(), "42".into()),
                ("message_id".into(), "m1".into()),
                ("pointer".into(), "1".into()),
                ("sender".into(), "alice".into()),
            ]
        );
    }
}
