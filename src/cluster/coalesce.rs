//! One AppendEntries per follower per round. raft-rs sends an append for every proposal,
//! so a round of twenty proposals sent each follower twenty appends, each encoded, sent,
//! decoded, stepped and answered on its own. Consecutive appends of one group to one
//! follower merge here when the second starts where the first ends: the follower gets in
//! one message exactly what it would have had after taking both in order, and answers once.
//!
//! raft-rs's own `batch_append` is not used: it also merges entries into an append that
//! carries none and does not end where they start, which made a follower commit past its
//! log (`to_commit 59 is out of range [last_index 58]`, the simulator, first seed).

use raft::prelude::{Message, MessageType};

use super::group::APPEND_BYTES_MAX;
use super::wire::ENTRIES_PER_MESSAGE_MAX;

/// `messages` (one group's, in the order raft-rs made them) with every append merged into
/// the previous message to the same peer when it continues it. Messages to each peer keep
/// their order.
pub fn coalesce_appends(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    // (peer, position in `out` of the newest message to it): a group has a handful.
    let mut newest: Vec<(u64, usize)> = Vec::new();
    for msg in messages {
        let to = msg.to;
        let last = newest.iter_mut().find(|(peer, _)| *peer == to);
        match last {
            Some((_, at)) if continues(&out[*at], &msg) => merge(&mut out[*at], msg),
            Some((_, at)) => {
                *at = out.len();
                out.push(msg);
            }
            None => {
                newest.push((to, out.len()));
                out.push(msg);
            }
        }
    }
    out
}

/// Whether `next` is an append of the same leader and term whose entries follow `first`'s
/// last one (its previous index and term are those of `first`'s last entry), and both fit
/// in one message.
fn continues(first: &Message, next: &Message) -> bool {
    let appends = first.get_msg_type() == MessageType::MsgAppend
        && next.get_msg_type() == MessageType::MsgAppend;
    if !appends || first.from != next.from || first.term != next.term {
        return false;
    }
    let entries = first.get_entries();
    let (end_index, end_term) = match entries.last() {
        Some(e) => (e.index, e.term),
        None => (first.index, first.log_term),
    };
    let fits = entries.len() + next.get_entries().len() <= ENTRIES_PER_MESSAGE_MAX
        && entry_bytes(first) + entry_bytes(next) <= APPEND_BYTES_MAX;
    next.index == end_index && next.log_term == end_term && fits
}

fn entry_bytes(msg: &Message) -> u64 {
    msg.get_entries()
        .iter()
        .map(|e| (e.data.len() + e.context.len()) as u64)
        .sum()
}

/// `first` takes `next`'s entries and its (never smaller) commit.
fn merge(first: &mut Message, next: Message) {
    debug_assert!(continues(first, &next));
    let mut next = next;
    if next.commit >= first.commit {
        first.commit = next.commit;
        first.commit_term = next.commit_term;
    }
    let mut entries: Vec<_> = first.take_entries().into();
    entries.extend(next.take_entries());
    first.set_entries(entries.into());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::support::entry;

    /// An append from leader 1 in `term` to `to`: previous (index, log_term), entries
    /// with the given indexes, of `term`, commit index.
    fn append(to: u64, term: u64, prev: (u64, u64), entries: &[u64], commit: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.from = 1;
        m.to = to;
        m.term = term;
        m.index = prev.0;
        m.log_term = prev.1;
        m.commit = commit;
        m.set_entries(
            entries
                .iter()
                .map(|&i| entry(i, term))
                .collect::<Vec<_>>()
                .into(),
        );
        m
    }

    fn indexes(m: &Message) -> Vec<u64> {
        m.get_entries().iter().map(|e| e.index).collect()
    }

    /// Three proposals' appends to two followers, interleaved as raft-rs makes them, become
    /// one append per follower with all entries and the newest commit.
    #[test]
    fn consecutive_appends_to_a_follower_become_one() {
        let out = coalesce_appends(vec![
            append(2, 3, (10, 3), &[11], 9),
            append(3, 3, (10, 3), &[11], 9),
            append(2, 3, (11, 3), &[12], 10),
            append(3, 3, (11, 3), &[12], 10),
            append(2, 3, (12, 3), &[13, 14], 10),
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!(
            (out[0].to, indexes(&out[0]), out[0].index, out[0].commit),
            (2, vec![11, 12, 13, 14], 10, 10)
        );
        assert_eq!(
            (out[1].to, indexes(&out[1]), out[1].index, out[1].commit),
            (3, vec![11, 12], 10, 10)
        );
    }

    /// A commit-only append (no entries) is continued by the next one starting at its
    /// previous index; the entries then travel with the newest commit.
    #[test]
    fn an_append_without_entries_is_continued_from_its_previous_index() {
        let out = coalesce_appends(vec![
            append(2, 3, (14, 3), &[], 12),
            append(2, 3, (14, 3), &[15], 13),
        ]);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (indexes(&out[0]), out[0].index, out[0].commit),
            (vec![15], 14, 13)
        );
    }

    /// What does not continue stays apart, in order: a gap, another term, another kind of
    /// message in between to the same peer, and appends that would not fit one message.
    #[test]
    fn appends_that_do_not_continue_stay_apart_in_order() {
        let gap = coalesce_appends(vec![
            append(2, 3, (10, 3), &[11], 9),
            append(2, 3, (12, 3), &[13], 9),
        ]);
        assert_eq!(gap.len(), 2);
        // The second starts after entry 11 but claims it was of term 2.
        let wrong_term = coalesce_appends(vec![
            append(2, 3, (10, 3), &[11], 9),
            append(2, 3, (11, 2), &[12], 9),
        ]);
        assert_eq!(wrong_term.len(), 2);
        let newer_leader_term = coalesce_appends(vec![
            append(2, 3, (10, 3), &[11], 9),
            append(2, 4, (11, 3), &[12], 9),
        ]);
        assert_eq!(newer_leader_term.len(), 2);
        let mut heartbeat = Message::default();
        heartbeat.set_msg_type(MessageType::MsgHeartbeat);
        heartbeat.to = 2;
        let between = coalesce_appends(vec![
            append(2, 3, (10, 3), &[11], 9),
            heartbeat,
            append(2, 3, (11, 3), &[12], 9),
        ]);
        assert_eq!(
            between.iter().map(|m| m.get_msg_type()).collect::<Vec<_>>(),
            [
                MessageType::MsgAppend,
                MessageType::MsgHeartbeat,
                MessageType::MsgAppend
            ]
        );
        let mut big = append(2, 3, (10, 3), &[11], 9);
        big.mut_entries()[0].data = vec![0; APPEND_BYTES_MAX as usize].into();
        let too_big = coalesce_appends(vec![big, append(2, 3, (11, 3), &[12], 9)]);
        assert_eq!(too_big.len(), 2);
    }
}
