//! Leader balancing (issue 14 item 6): each node leads about 1/N of the slots, so the
//! work of proposing and answering spreads over the nodes, and a restarted node gets its
//! share back.
//!
//! Each node decides for the groups it leads, from what its own replicas know: when it
//! leads more than its fair share (`ceil(groups / voters)`) of one host's groups, it hands
//! the excess to the voters leading the fewest, each only up to the fair share, and only to
//! a voter heard from within the last election timeout (raft-rs catches it up, then sends
//! it TimeoutNow). A node never gives below its share and never lifts another
//! above it, so no two nodes pass slots back and forth; a transfer that does not happen
//! (the target died) is given up by raft-rs after an election timeout and planned again
//! next round.

use std::collections::BTreeMap;

/// How a group looks to the balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    pub slot: u16,
    pub leader: Option<u64>,
    pub voters: Vec<u64>,
    /// When this node leads the group with no transfer under way: the voters a
    /// transfer may go to now (recently active).
    pub targets: Vec<u64>,
}

/// The transfers (slot, to) node `me` starts now.
pub fn plan(me: u64, groups: &[GroupView]) -> Vec<(u16, u64)> {
    let mut voters: Vec<u64> = groups
        .iter()
        .flat_map(|g| g.voters.iter().copied())
        .collect();
    voters.sort_unstable();
    voters.dedup();
    if voters.len() < 2 || !voters.contains(&me) {
        return Vec::new();
    }
    let fair = groups.len().div_ceil(voters.len());
    let mut led: BTreeMap<u64, usize> = voters.iter().map(|&v| (v, 0)).collect();
    for g in groups {
        if let Some(count) = g.leader.and_then(|l| led.get_mut(&l)) {
            *count += 1;
        }
    }
    let mut transfers = Vec::new();
    for g in groups
        .iter()
        .filter(|g| g.leader == Some(me) && !g.targets.is_empty())
    {
        if led[&me] <= fair {
            break;
        }
        let target = g
            .targets
            .iter()
            .filter(|t| led.get(t).is_some_and(|&n| n < fair))
            .min_by_key(|t| (led[t], **t));
        if let Some(&to) = target {
            *led.get_mut(&me).expect("a voter") -= 1;
            *led.get_mut(&to).expect("a voter") += 1;
            transfers.push((g.slot, to));
        }
    }
    transfers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(leaders: &[u64]) -> Vec<GroupView> {
        leaders
            .iter()
            .enumerate()
            .map(|(i, &l)| GroupView {
                slot: i as u16,
                leader: (l != 0).then_some(l),
                voters: vec![1, 2, 3],
                targets: [1, 2, 3].into_iter().filter(|&v| v != l).collect(),
            })
            .collect()
    }

    /// Applies every node's plan at once (the worst case: all decide in the same round)
    /// until nothing moves; the leaders per node.
    fn settle(mut gs: Vec<GroupView>) -> BTreeMap<u64, usize> {
        for _ in 0..10 {
            let moves: Vec<(u16, u64)> = [1, 2, 3].iter().flat_map(|&n| plan(n, &gs)).collect();
            if moves.is_empty() {
                break;
            }
            for (slot, to) in moves {
                let g = &mut gs[slot as usize];
                g.leader = Some(to);
                g.targets = [1, 2, 3].into_iter().filter(|&v| v != to).collect();
            }
        }
        let mut led = BTreeMap::new();
        for g in &gs {
            *led.entry(g.leader.unwrap()).or_insert(0) += 1;
        }
        led
    }

    #[test]
    fn a_node_that_came_back_gets_its_share_and_nobody_goes_over_theirs() {
        let led = settle(groups(&[[1, 2]; 64].concat()));
        assert_eq!(led, BTreeMap::from([(1, 43), (2, 43), (3, 42)]));
    }

    #[test]
    fn a_balanced_cluster_moves_nothing() {
        let gs = groups(&[[1, 2, 3]; 10].concat());
        assert!([1, 2, 3].iter().all(|&n| plan(n, &gs).is_empty()));
    }

    #[test]
    fn no_transfer_goes_to_a_voter_that_is_silent() {
        let mut gs = groups(&[1; 6]);
        for g in &mut gs {
            g.targets = vec![2];
        }
        let moves = plan(1, &gs);
        assert_eq!(moves, vec![(0, 2), (1, 2)], "only up to 2's fair share");
        for g in &mut gs {
            g.targets.clear();
        }
        assert!(plan(1, &gs).is_empty());
    }

    #[test]
    fn groups_without_a_leader_or_a_lone_voter_plan_nothing() {
        assert!(plan(1, &groups(&[0, 0, 0])).is_empty());
        let lone = vec![GroupView {
            slot: 0,
            leader: Some(1),
            voters: vec![1],
            targets: vec![],
        }];
        assert!(plan(1, &lone).is_empty());
    }
}
