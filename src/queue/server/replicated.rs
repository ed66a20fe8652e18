//! The plane with `cluster.enabled`: a slot's commands go through the slot's raft group
//! instead of the slot's command log, so a reply means a quorum of nodes has the command
//! on disk and the slot's leader applied it.
//!
//! The groups live a layer up (`cluster::serve`); this file is the plane's side of the
//! seam: what the plane asks of them (`Replicated`), who the members are (`ClusterView`)
//! and the effects of applied commands, which every node carries out for its own
//! connections only.
//!
//! The exchange table is replicated as `Command::Exchange`s in one slot's group
//! (`exchanges::exchange_slot`); the KV cache is not (each node has its own).

use super::plane::Plane;
use super::waiters::Answer;
use crate::queue::broker::{Broker, Command, ConsumerRef, Effect};
use crate::queue::protocol::reply::ClusterInfo;
use std::collections::BTreeMap;

// The series the groups count (`cluster::metrics`), named here, below both the cluster and
// the admin layer, so that `/metrics` can read them without importing the cluster.

/// Queue-slot snapshots taken (v1's `snapshot_count`).
pub const SNAPSHOTS_METRIC: &str = "boltq_snapshots_total";
/// Queue-slot snapshots of a single node written, fdatasync'ed and the command log behind
/// them dropped: what a restart now starts from (a snapshot taken is written later, in the
/// background, and a crash before then leaves the command log to replay).
pub const SNAPSHOTS_WRITTEN_METRIC: &str = "boltq_snapshots_written_total";
/// Entries applied by this node's replicas.
pub const APPLIED_METRIC: &str = "boltq_raft_applied_total";
/// Commands (of either plane) taken by this node that got no outcome, by `reason`: no
/// leader known (`not_leader`, elections), `not_applied` (the leader changed first),
/// `outcome_unknown` (it changed while the command was in flight), `timed_out`,
/// `too_many` (proposals waiting), `stopped`, `other`. What clients were refused during
/// failovers.
pub const COMMANDS_REFUSED_METRIC: &str = "boltq_raft_commands_refused_total";
/// Times a replica of this node saw its group's leader change (to another node or none).
pub const LEADER_CHANGES_METRIC: &str = "boltq_raft_leader_changes_total";
pub const SNAPSHOTS_INSTALLED_METRIC: &str = "boltq_raft_snapshots_installed_total";
/// Snapshots this node's leaders sent to followers too far behind for entries.
pub const SNAPSHOTS_SENT_METRIC: &str = "boltq_raft_snapshots_sent_total";
/// Entries the furthest-behind follower of any group this node leads lacks, now.
pub const FOLLOWER_LAG_METRIC: &str = "boltq_raft_follower_lag_entries";
/// Leadership transfers this node started (leader balancing).
pub const TRANSFERS_METRIC: &str = "boltq_raft_leader_transfers_total";
/// Groups this node leads, and groups with no leader it knows of, now.
pub const SLOTS_LED_METRIC: &str = "boltq_raft_slots_led";
pub const SLOTS_WITHOUT_LEADER_METRIC: &str = "boltq_raft_slots_without_leader";
/// Raft messages this node's groups sent its peers (a quiet cluster sends none: its groups
/// are quiescent and the links carry empty keepalives).
pub const MESSAGES_SENT_METRIC: &str = "boltq_raft_messages_sent_total";
/// Queue commands this node answered as a slot's leader from its applied state, without a
/// log entry (an empty poll of an existing queue: `Broker::finds_nothing`).
pub const ANSWERED_WITHOUT_ENTRY_METRIC: &str = "boltq_raft_answered_without_entry_total";
/// Groups of this node that are quiescent now: at rest, not ticking (`cluster::quiesce`).
pub const GROUPS_QUIESCENT_METRIC: &str = "boltq_raft_groups_quiescent";
/// Connections this node's links to its peers made (each close is followed by another),
/// and batches they dropped for a peer down or behind.
pub const LINK_CONNECTS_METRIC: &str = "boltq_raft_link_connects_total";
pub const LINK_BATCHES_DROPPED_METRIC: &str = "boltq_raft_link_batches_dropped_total";
/// Microseconds from a command's submission to its outcome, on the node that took it from
/// the client (forwarding included).
pub const COMMIT_LATENCY_METRIC: &str = "boltq_raft_commit_latency_us";

/// What the plane asks of the slot groups its shard hosts (`cluster::serve` implements
/// it). Every call returns at once; answers come through `answer`.
pub trait Replicated {
    /// Runs `cmd` through slot `slot`'s group; `answer` gets the outcome. Calls are
    /// proposed in call order.
    fn submit(&self, slot: u16, cmd: Command, answer: Answer);
    /// A CONSUME that waits up to `wait_ms` for a message.
    fn consume_waiting(&self, slot: u16, cmd: Command, wait_ms: u64, answer: Answer);
    /// A connection of this shard's node closed.
    fn disconnect(&self, consumer: ConsumerRef);
    /// Every hosted slot's broker as this node has applied it.
    fn for_each_broker(&self, f: &mut dyn FnMut(u16, &Broker));
    fn slot_status(&self) -> Vec<SlotStatus>;
    /// Peers whose links this shard's node refused lately, by raft id, with why (their
    /// shared settings differ).
    fn refused_links(&self) -> Vec<(u64, String)>;
    /// Who the members are now (they change as nodes join and leave).
    fn view(&self) -> ClusterView;
    /// A join or leave asked of this node (`/cluster/join|leave`, TCP 0x10–0x11): checked
    /// against this shard's member directory and taken into it. Returns the new directory
    /// (encoded) for the node's other shards to take too (`take_members`).
    fn accept_members_change(&self, change: &MembersChange) -> Result<Vec<u8>, String>;
    /// Takes `directory` into this shard's member directory and answers, once this shard's
    /// groups have member `name` as the directory wants it or `wait_ms` passed, how many
    /// groups do not yet.
    fn take_members(
        &self,
        directory: Vec<u8>,
        name: String,
        wait_ms: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = usize>>>;
}

/// A change of the cluster's members asked by an operator or a joining node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembersChange {
    /// `addr` is its advertised raft address; `shards` its `server.shards`, when it said;
    /// `fresh` when it said it starts with no cluster state (a new node, or one whose
    /// data directory was lost).
    Join {
        name: String,
        addr: String,
        non_voter: bool,
        shards: Option<u64>,
        fresh: bool,
        /// Where its clients connect (TCP, admin HTTP); empty: not said.
        tcp_addr: String,
        http_addr: String,
    },
    Leave {
        name: String,
    },
}

impl MembersChange {
    pub fn name(&self) -> &str {
        match self {
            MembersChange::Join { name, .. } | MembersChange::Leave { name } => name,
        }
    }
}

/// How long a join or leave waits for this node's groups to reflect it before answering.
pub const MEMBERS_SETTLE_MS: u64 = 30_000;

/// One hosted group as this node sees it (`/cluster/status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotStatus {
    pub slot: u16,
    /// The group's voters and learners as this replica applied them (raft ids).
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    /// The leader this replica knows of.
    pub leader: Option<u64>,
    pub term: u64,
    pub commit: u64,
    pub applied: u64,
    /// As the group's leader: entries its furthest-behind follower lacks (0 otherwise).
    pub lag: u64,
    /// At rest and not ticking here (`cluster::quiesce`).
    pub quiescent: bool,
}

/// Who this node and its peers are, for `/cluster/status`, CLUSTER_STATUS and `/readyz`.
#[derive(Debug, Clone)]
pub struct ClusterView {
    /// This node's raft id and configured name and raft address.
    pub node_id: u64,
    pub name: String,
    pub raft_addr: String,
    /// Every member (this node too): raft id, name, raft address.
    pub members: Vec<(u64, String, String)>,
    /// Members' client-facing TCP and HTTP addresses, where known, by raft id.
    pub clients: BTreeMap<u64, (String, String)>,
}

/// What the slots' groups look like from this node (every shard's part merged).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSummary {
    pub info: ClusterInfo,
    /// Slots each member leads, by name (members leading none are listed with 0).
    pub slots_led: BTreeMap<String, u64>,
    pub slots_without_leader: u64,
}

impl ClusterView {
    /// The name of the member with raft id `id`, or `raft-<id>` for one not (or no longer)
    /// a member.
    pub fn member_name(&self, id: u64) -> String {
        self.members
            .iter()
            .find(|m| m.0 == id)
            .map_or_else(|| format!("raft-{id}"), |m| m.1.clone())
    }

    /// v1's single-group fields mapped onto a group per slot: `state` is `Leader` while
    /// this node leads some slot; `leader`/`leader_id` name the member leading the most
    /// slots; `term` and `last_index` are the highest of any slot.
    pub fn summary(&self, raft: &[SlotStatus]) -> ClusterSummary {
        let mut slots_led: BTreeMap<String, u64> =
            self.members.iter().map(|m| (m.1.clone(), 0)).collect();
        let mut slots_without_leader = 0;
        for status in raft {
            match status.leader {
                Some(id) => *slots_led.entry(self.member_name(id)).or_default() += 1,
                None => slots_without_leader += 1,
            }
        }
        let top = slots_led
            .iter()
            .filter(|(_, &n)| n > 0)
            .max_by_key(|(name, &n)| (n, std::cmp::Reverse((*name).clone())))
            .map(|(name, _)| name.clone());
        let (leader_id, leader) = match top {
            Some(name) => {
                let addr = self
                    .members
                    .iter()
                    .find(|m| m.1 == name)
                    .map(|m| m.2.clone());
                (name, addr.unwrap_or_default())
            }
            None => (String::new(), String::new()),
        };
        let leads_some = slots_led.get(&self.name).is_some_and(|&n| n > 0);
        let info = ClusterInfo {
            node_id: self.name.clone(),
            raft_addr: self.raft_addr.clone(),
            state: if leads_some { "Leader" } else { "Follower" }.to_string(),
            leader,
            leader_id,
            term: raft.iter().map(|s| s.term).max().unwrap_or(0),
            last_index: raft.iter().map(|s| s.commit).max().unwrap_or(0),
            peers: self
                .members
                .iter()
                .map(|m| format!("{}@{}", m.1, m.2))
                .collect(),
        };
        ClusterSummary {
            info,
            slots_led,
            slots_without_leader,
        }
    }
}

impl Plane {
    /// A join or leave: taken into this shard's member directory, then every other shard's
    /// (each gossips it to its peers on the links and its leaders change their groups'
    /// membership to match); answers once all of this node's groups reflect it, or with
    /// how many do not after `MEMBERS_SETTLE_MS`.
    pub async fn change_members(&self, change: MembersChange) -> Result<(), String> {
        let Some(replication) = self.replication.get() else {
            return Err("clustering is not enabled".into());
        };
        let directory = replication.accept_members_change(&change)?;
        let name = change.name().to_string();
        let wait_ms = MEMBERS_SETTLE_MS;
        let remote: Vec<_> = (0..self.shard.count())
            .filter(|&dest| dest != self.shard.id())
            .map(|dest| {
                let msg = super::mesh::QueueMsg::Members {
                    directory: directory.clone(),
                    name: name.clone(),
                    wait_ms,
                };
                self.shard.request(dest, msg, wait_ms + 5_000)
            })
            .collect();
        let mut unsettled = replication
            .take_members(directory, name.clone(), wait_ms)
            .await;
        let mut missing = 0;
        for r in remote {
            match r.await {
                Ok(super::mesh::QueueReply::Unsettled(left)) => unsettled += left,
                _ => missing += 1,
            }
        }
        let what = match change {
            MembersChange::Join { .. } => "joined",
            MembersChange::Leave { .. } => "removed",
        };
        match (unsettled, missing) {
            (0, 0) => Ok(()),
            _ => Err(format!(
                "{name} is not yet {what} in {unsettled} of this node's slot groups after {} s ({missing} shards did not answer); the change stands and continues, ask again to wait for it",
                wait_ms / 1000
            )),
        }
    }

    /// Carries out an effect of an applied command if it is for a connection of this
    /// process (every node applies every command; the others' connections are theirs).
    pub fn route_own_effect(&self, effect: Effect) {
        let to = match &effect {
            Effect::Push { to, .. } => *to,
            Effect::Released { consumer, .. } => *consumer,
        };
        let ours = to.conn & !u64::from(u32::MAX) == self.boot_id;
        if ours && usize::from(to.shard) < self.shard.count() {
            self.route_effect(effect);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> ClusterView {
        let members = [(1, "a"), (2, "b"), (3, "c")]
            .map(|(id, name)| (id, name.to_string(), format!("h{id}:9100")))
            .to_vec();
        ClusterView {
            node_id: 2,
            name: "b".into(),
            raft_addr: "h2:9100".into(),
            members,
            clients: BTreeMap::new(),
        }
    }

    fn slot(slot: u16, leader: Option<u64>, term: u64, commit: u64) -> SlotStatus {
        SlotStatus {
            slot,
            voters: vec![1, 2, 3],
            learners: vec![],
            leader,
            term,
            commit,
            applied: commit,
            lag: 0,
            quiescent: false,
        }
    }

    #[test]
    fn the_summary_counts_slots_per_leader_and_names_the_busiest_leader() {
        let raft = [
            slot(0, Some(3), 2, 10),
            slot(1, Some(3), 4, 7),
            slot(2, Some(2), 1, 3),
            slot(3, None, 5, 1),
        ];
        let s = view().summary(&raft);
        assert_eq!(
            s.slots_led,
            BTreeMap::from([("a".into(), 0), ("b".into(), 1), ("c".into(), 2)])
        );
        assert_eq!(s.slots_without_leader, 1);
        assert_eq!(s.info.state, "Leader", "b leads slot 2");
        assert_eq!(
            (s.info.leader_id.as_str(), s.info.leader.as_str()),
            ("c", "h3:9100")
        );
        assert_eq!((s.info.term, s.info.last_index), (5, 10));
        assert_eq!(s.info.peers, ["a@h1:9100", "b@h2:9100", "c@h3:9100"]);
    }

    #[test]
    fn a_node_leading_nothing_is_a_follower_and_no_leader_is_named_before_an_election() {
        let s = view().summary(&[slot(0, None, 1, 0)]);
        assert_eq!(s.info.state, "Follower");
        assert_eq!(s.info.leader_id, "");
        assert_eq!(s.slots_without_leader, 1);
    }
}
