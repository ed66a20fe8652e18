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

use raft::prelude::{ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2};

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

#[cfg(test)]
mod tests {
    use super::*;

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
