//! Quiescent groups: a slot group with nothing to replicate stops ticking, so an idle node
//! does not spend its CPU on 256 groups' heartbeats (issue 14: idle CPU under 1 %).
//!
//! Raft needs heartbeats for one thing while nothing is proposed: so that followers notice
//! a dead leader. A node hears from each peer anyway, so one liveness signal per node pair
//! stands in for every group's: each host sends every member of its groups one keepalive
//! (an empty batch) per tick in which it sent that member nothing else, and counts the
//! ticks since it last heard from each (`Liveness`).
//!
//! A leader quiesces when its group is at rest: everything is committed and applied, every
//! member has the whole log and is heard from, no transfer or membership change is under
//! way. It then sends each member one last heartbeat marked `NOTICE_CONTEXT` (the notice)
//! and stops ticking; a follower that has the whole committed log when the notice comes
//! stops ticking too. Either wakes on any other message of its group, on a proposal, or
//! (a follower) when its leader's node has been silent `LIVENESS_TICKS_MAX`: then it counts
//! the ticks it missed since that node was last heard, so an election starts as soon after
//! the leader went silent as it would have without quiescence. A follower woken so that
//! hears from its leader's node again before anything else happened rests again without a
//! word (a late keepalive on a loaded machine): its leader, still at rest, would have sent
//! it anything else first on the same link. A leader whose member stays silent
//! (`LEADER_PATIENCE_TICKS_MAX`) wakes too, so check-quorum steps it down if it lost its
//! quorum.
//!
//! The rules are applied where raft-rs's state is: `Group::tick` (`at_rest`,
//! `may_rest_again`), `Group::step` (`quiesce_on_notice`) and `Group::wake`; the keepalives
//! are added by `Host::collect`, and a resting shard's longer sleep is `node.rs`'s
//! (`RESTING_TICKS_PER_WAKE`).
//!
//! What this costs: a follower that missed the notice keeps ticking and, an election
//! timeout later, pre-votes; the pre-vote wakes the leader, whose next tick sends the
//! notice again (pre-vote keeps the term). No entry is ever committed or applied
//! differently: quiescence only decides when raft-rs's clock advances.

use raft::prelude::{Message, MessageType};
use std::collections::BTreeMap;

/// Ticks without a word from a node before its groups stop counting on it (600 ms at the
/// server's 100 ms tick). Shorter than the shortest election timeout
/// (`group::ELECTION_TICKS.min`, 10) by more than a resting shard sleeps
/// (`node::RESTING_TICKS_PER_WAKE`, 3): the followers of a silent leader notice before any
/// of their own timeouts runs out, so each campaigns at its own randomized time, as
/// without quiescence, rather than all at the moment they notice (which splits votes).
pub const LIVENESS_TICKS_MAX: u64 = 6;

/// Ticks a quiescent leader lets a member be silent before it wakes. Longer than
/// `LIVENESS_TICKS_MAX`: nothing waits on it (a member that is really gone only makes the
/// leader tick, so that check-quorum can step it down if it lost its quorum), and a
/// keepalive late on a loaded machine then wakes no leader, whose notices on going back to
/// rest would cost a message per member.
pub const LEADER_PATIENCE_TICKS_MAX: u64 = 2 * LIVENESS_TICKS_MAX;

/// The context of a leader's heartbeat that asks its follower to stop ticking. A
/// follower's answer echoes it (raft-rs copies a heartbeat's context into the response),
/// which tells the leader the answer is no news.
pub const NOTICE_CONTEXT: &[u8] = b"boltq-quiesce";

/// When this host last heard from each peer node, in its own ticks.
#[derive(Debug, Default)]
pub struct Liveness {
    ticks: u64,
    heard_at_tick: BTreeMap<u64, u64>,
}

impl Liveness {
    pub fn tick(&mut self) {
        self.ticks += 1;
    }

    pub fn heard(&mut self, node: u64) {
        self.heard_at_tick.insert(node, self.ticks);
    }

    /// Ticks since `node` was last heard; `u64::MAX` if never (since this host started).
    pub fn silent_ticks(&self, node: u64) -> u64 {
        self.heard_at_tick
            .get(&node)
            .map_or(u64::MAX, |at| self.ticks - at)
    }

    pub fn is_live(&self, node: u64) -> bool {
        self.heard_within(node, LIVENESS_TICKS_MAX)
    }

    pub fn heard_within(&self, node: u64, ticks: u64) -> bool {
        self.silent_ticks(node) < ticks
    }
}

/// The notice a quiescing leader `from` of `term` sends member `to`: a heartbeat carrying
/// the commit index (which every member has: quiescing requires it).
pub fn notice(from: u64, to: u64, term: u64, commit: u64) -> Message {
    let mut msg = Message {
        from,
        to,
        term,
        commit,
        context: bytes::Bytes::from_static(NOTICE_CONTEXT),
        ..Message::default()
    };
    msg.set_msg_type(MessageType::MsgHeartbeat);
    msg
}

/// A notice or a follower's answer to one: no reason to wake.
pub fn is_notice_or_answer(msg: &Message) -> bool {
    matches!(
        msg.get_msg_type(),
        MessageType::MsgHeartbeat | MessageType::MsgHeartbeatResponse
    ) && msg.context[..] == *NOTICE_CONTEXT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_live_until_it_has_been_silent_for_the_limit() {
        let mut live = Liveness::default();
        assert!(!live.is_live(2), "never heard");
        live.heard(2);
        for _ in 0..LIVENESS_TICKS_MAX - 1 {
            live.tick();
        }
        assert!(live.is_live(2));
        live.tick();
        assert!(!live.is_live(2));
        assert_eq!(live.silent_ticks(2), LIVENESS_TICKS_MAX);
        live.heard(2);
        assert!(live.is_live(2));
    }

    #[test]
    fn only_a_marked_heartbeat_or_its_answer_is_a_notice() {
        let n = notice(1, 2, 5, 9);
        assert!(is_notice_or_answer(&n));
        let mut answer = n.clone();
        answer.set_msg_type(MessageType::MsgHeartbeatResponse);
        assert!(is_notice_or_answer(&answer));
        let mut plain = n.clone();
        plain.context = bytes::Bytes::new();
        assert!(!is_notice_or_answer(&plain));
        let mut append = n;
        append.set_msg_type(MessageType::MsgAppend);
        assert!(!is_notice_or_answer(&append));
    }
}
