//! Membership changes of a group: voters and learners (non-voters) added or removed.
//!
//! One change alone is applied directly; several at once go through joint consensus (the
//! old and new voter sets must both agree until the group leaves the joint configuration,
//! which the leader proposes on its own once the change is applied), so a swap of a voter
//! never passes through a configuration with a different majority than both ends.
//!
//! A change travels as a raft-rs `EntryConfChangeV2` entry, so that raft-rs keeps its rule
//! of one pending change at a time; but what it applies is read from the entry's
//! `context`, in our own layout, never from the protobuf `data` (the protobuf 2.x parser
//! has an unfixed advisory, platform.md §8). An entry with an empty context is the leave
//! of a joint configuration that raft-rs proposes itself.
//!
//! ```text
//! context = version:u8 (1) | count:u16 | (kind:u8 | node:u64)*count
//! kind    = 0 add voter | 1 add learner | 2 remove
//! ```

use super::directory::Role;
use raft::prelude::{
    ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, ConfState,
};

pub const VERSION: u8 = 1;
/// Most changes in one proposal.
pub const CHANGES_MAX: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberChange {
    AddVoter(u64),
    AddLearner(u64),
    Remove(u64),
}

impl MemberChange {
    fn node(self) -> u64 {
        match self {
            MemberChange::AddVoter(n) | MemberChange::AddLearner(n) | MemberChange::Remove(n) => n,
        }
    }
}

/// Encodes `changes` as an entry context (the empty list: the leave of a joint
/// configuration). Panics on a node id 0 or more than `CHANGES_MAX` (the caller builds
/// them).
pub fn encode(changes: &[MemberChange]) -> Vec<u8> {
    assert!(changes.len() <= CHANGES_MAX);
    if changes.is_empty() {
        return Vec::new();
    }
    let mut out = vec![VERSION];
    out.extend_from_slice(&(changes.len() as u16).to_le_bytes());
    for c in changes {
        assert_ne!(c.node(), 0, "node id 0");
        let kind: u8 = match c {
            MemberChange::AddVoter(_) => 0,
            MemberChange::AddLearner(_) => 1,
            MemberChange::Remove(_) => 2,
        };
        out.push(kind);
        out.extend_from_slice(&c.node().to_le_bytes());
    }
    out
}

/// The changes an entry context holds; empty for the leave of a joint configuration.
pub fn decode(context: &[u8]) -> Result<Vec<MemberChange>, String> {
    if context.is_empty() {
        return Ok(Vec::new());
    }
    let (&version, rest) = context.split_first().expect("not empty");
    if version != VERSION {
        return Err(format!(
            "membership change version {version} (want {VERSION})"
        ));
    }
    if rest.len() < 2 {
        return Err("membership change ends inside its count".into());
    }
    let count = u16::from_le_bytes([rest[0], rest[1]]) as usize;
    let body = &rest[2..];
    if count == 0 || count > CHANGES_MAX || body.len() != count * 9 {
        return Err(format!(
            "membership change of {count} changes in {} bytes",
            body.len()
        ));
    }
    body.chunks_exact(9)
        .map(|c| {
            let node = u64::from_le_bytes(c[1..9].try_into().expect("8 bytes"));
            if node == 0 {
                return Err("membership change names node id 0".to_string());
            }
            match c[0] {
                0 => Ok(MemberChange::AddVoter(node)),
                1 => Ok(MemberChange::AddLearner(node)),
                2 => Ok(MemberChange::Remove(node)),
                k => Err(format!("membership change kind {k}")),
            }
        })
        .collect()
}

/// What raft-rs applies for `changes` (the empty list leaves a joint configuration).
/// Joint configurations are left explicitly, by the leader's next tick (`replica.rs`):
/// raft-rs's automatic leave is missed when the leader changes before it applies the
/// change (its own TODO says so), and would leave the group joint for good.
pub fn to_raft(changes: &[MemberChange]) -> ConfChangeV2 {
    let singles: Vec<ConfChangeSingle> = changes
        .iter()
        .map(|c| {
            let mut s = ConfChangeSingle {
                node_id: c.node(),
                ..ConfChangeSingle::default()
            };
            s.set_change_type(match c {
                MemberChange::AddVoter(_) => ConfChangeType::AddNode,
                MemberChange::AddLearner(_) => ConfChangeType::AddLearnerNode,
                MemberChange::Remove(_) => ConfChangeType::RemoveNode,
            });
            s
        })
        .collect();
    let mut cc = ConfChangeV2::default();
    if singles.len() > 1 {
        cc.set_transition(ConfChangeTransition::Explicit);
    }
    cc.set_changes(singles.into());
    cc
}

/// What a leader does next to bring its group to the directory's wants
/// (`directory::Directory::wants`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Propose(Vec<MemberChange>),
    /// This leader is to leave the group: it hands leadership over first, and the next
    /// leader removes it.
    HandOver,
}

/// The next membership change of a group whose applied membership is `conf`, led by `me`,
/// towards `wants` (members absent from `wants` are left as they are). One change at a
/// time, in this order: a learner that caught up (`caught_up`) becomes a voter, a member
/// that should be in the group is added as a learner (it catches up before it votes, so it
/// never holds up the quorum while it loads a snapshot), and one that left is removed —
/// except the last voter, and a voter whose removal would leave the group without a
/// majority of voters heard from recently (`active`): of three voters with one down,
/// removing another would stop the group until the down one returns, so that waits.
/// None during joint consensus (`replica.rs` leaves it first).
pub fn plan(
    me: u64,
    conf: &ConfState,
    wants: &std::collections::BTreeMap<u64, Role>,
    caught_up: impl Fn(u64) -> bool,
    active: impl Fn(u64) -> bool,
) -> Option<Step> {
    if !conf.voters_outgoing.is_empty() {
        return None;
    }
    let voter = |id: &u64| conf.voters.contains(id);
    let learner = |id: &u64| conf.learners.contains(id);
    let promote = wants
        .iter()
        .find(|&(id, role)| *role == Role::Voter && learner(id) && caught_up(*id));
    if let Some((&id, _)) = promote {
        return Some(Step::Propose(vec![MemberChange::AddVoter(id)]));
    }
    let add = wants
        .iter()
        .find(|&(id, role)| *role != Role::Gone && !voter(id) && !learner(id));
    if let Some((&id, _)) = add {
        return Some(Step::Propose(vec![MemberChange::AddLearner(id)]));
    }
    let keeps_quorum = |gone: u64| {
        let left: Vec<u64> = conf.voters.iter().copied().filter(|&v| v != gone).collect();
        let live = left.iter().filter(|&&v| v == me || active(v)).count();
        !left.is_empty() && live > left.len() / 2
    };
    let remove = wants.iter().find(|&(id, role)| {
        *role == Role::Gone && (learner(id) || (voter(id) && keeps_quorum(*id)))
    });
    match remove {
        Some((&id, _)) if id == me => Some(Step::HandOver),
        Some((&id, _)) => Some(Step::Propose(vec![MemberChange::Remove(id)])),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn conf(voters: &[u64], learners: &[u64]) -> ConfState {
        ConfState {
            voters: voters.to_vec(),
            learners: learners.to_vec(),
            ..ConfState::default()
        }
    }

    #[test]
    fn a_joiner_is_added_as_a_learner_and_promoted_once_caught_up() {
        let wants = BTreeMap::from([(1, Role::Voter), (2, Role::Voter)]);
        let step = plan(1, &conf(&[1], &[]), &wants, |_| true, |_| true);
        assert_eq!(step, Some(Step::Propose(vec![MemberChange::AddLearner(2)])));
        let lagging = plan(1, &conf(&[1], &[2]), &wants, |_| false, |_| true);
        assert_eq!(lagging, None, "not promoted before it caught up");
        let step = plan(1, &conf(&[1], &[2]), &wants, |id| id == 2, |_| true);
        assert_eq!(step, Some(Step::Propose(vec![MemberChange::AddVoter(2)])));
        assert_eq!(
            plan(1, &conf(&[1, 2], &[]), &wants, |_| true, |_| true),
            None
        );
    }

    #[test]
    fn a_non_voter_stays_a_learner_and_a_member_that_left_is_removed() {
        let wants = BTreeMap::from([(1, Role::Voter), (3, Role::NonVoter), (2, Role::Gone)]);
        let step = plan(1, &conf(&[1, 2], &[]), &wants, |_| true, |_| true);
        assert_eq!(step, Some(Step::Propose(vec![MemberChange::AddLearner(3)])));
        let step = plan(1, &conf(&[1, 2], &[3]), &wants, |_| true, |_| true);
        assert_eq!(step, Some(Step::Propose(vec![MemberChange::Remove(2)])));
        assert_eq!(plan(1, &conf(&[1], &[3]), &wants, |_| true, |_| true), None);
        assert_eq!(
            plan(2, &conf(&[1, 2], &[3]), &wants, |_| true, |_| true),
            Some(Step::HandOver),
            "a leader that left hands over rather than remove itself"
        );
        let last = BTreeMap::from([(1, Role::Gone)]);
        assert_eq!(
            plan(1, &conf(&[1], &[]), &last, |_| true, |_| true),
            None,
            "never the last voter"
        );
        let three = conf(&[1, 2, 3], &[]);
        let two_gone = BTreeMap::from([(1, Role::Voter), (2, Role::Gone), (3, Role::Voter)]);
        assert_eq!(
            plan(1, &three, &two_gone, |_| true, |id| id != 3),
            None,
            "with 3 down, removing 2 would leave 1 of 2 voters: it waits"
        );
        assert_eq!(
            plan(1, &three, &two_gone, |_| true, |_| true),
            Some(Step::Propose(vec![MemberChange::Remove(2)]))
        );
        let mut joint = conf(&[1, 2], &[]);
        joint.voters_outgoing = vec![1];
        assert_eq!(plan(1, &joint, &wants, |_| true, |_| true), None);
    }

    #[test]
    fn changes_round_trip_and_damage_is_refused() {
        let changes = vec![MemberChange::AddVoter(4), MemberChange::Remove(2)];
        let bytes = encode(&changes);
        assert_eq!(decode(&bytes).unwrap(), changes);
        assert_eq!(
            decode(&[]).unwrap(),
            vec![],
            "the leave of a joint configuration"
        );
        for cut in 1..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_kind = bytes.clone();
        bad_kind[3] = 9;
        assert!(decode(&bad_kind).unwrap_err().contains("kind 9"));
        let mut zero = bytes.clone();
        zero[4..12].copy_from_slice(&0u64.to_le_bytes());
        assert!(decode(&zero).unwrap_err().contains("node id 0"));
        let mut extra = bytes;
        extra.push(0);
        assert!(decode(&extra).is_err());
    }
}
