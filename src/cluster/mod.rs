//! Replication (issue 14, design §9): a Raft group per slot (raft-rs `RawNode`, sans-IO)
//! whose log is the slot's command log, so every replica applies the same commands in the
//! same order and a reply means a quorum has the command.
//!
//! Built so far: the group (`group.rs`: Ready handling), its image (`storage.rs`), the
//! image's changes as records of an append-only raft log and their replay
//! (`image_log.rs`), that log in the shard's store (`group_log.rs`), membership changes
//! (`membership.rs`), a slot replica that proposes commands and applies committed ones to
//! the broker (`replica.rs`), the replicas one node hosts driven together with their
//! messages batched per destination (`host.rs`), idle groups that stop ticking and the
//! keepalives that stand in for their heartbeats (`quiesce.rs`), the replication wire
//! format (`wire.rs`),
//! the links between nodes (`transport.rs`) and whom they admit (`admission.rs`: peers
//! that share `shared_settings.rs`), a node's commit-round loop over all of that
//! (`node.rs`), and a deterministic simulator with network faults, crashes that replay
//! each group's records, and a node joining (`tests/sim.rs`). The queue plane serves
//! clients through it with `cluster.enabled` (`queue/server/replicated.rs`); the member
//! directory that joins and leaves change and the leaders follow (`directory.rs`,
//! `membership::plan`), and leader balancing (`balance.rs`). Not built yet: the `meta`
//! group (exchanges). STATUS.md keeps the list.

pub mod admission;
pub mod balance;
pub mod coalesce;
pub mod directory;
pub mod forward;
pub mod group;
pub mod group_log;
pub mod host;
pub mod image_log;
pub mod membership;
pub mod metrics;
pub mod node;
pub mod quiesce;
pub mod replica;
pub mod serve;
pub mod shared_settings;
pub mod slot_snapshot;
pub mod storage;
pub mod transport;
pub mod wire;

#[cfg(test)]
pub(crate) mod tests;
