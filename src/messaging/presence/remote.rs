//! Devices bound on the other nodes of a cluster (issue 15): the owner shard of a user on
//! every node holds what the other nodes reported of that user's devices, next to its own,
//! so its watchers, snapshots and the push dispatcher's "online?" see the user on every
//! node.
//!
//! A node reports its own transitions as they happen ([`RemoteChange`], relayed by
//! `gateway::relay`) and all of its bound devices every sweep interval (a refresh). What
//! it reported lives here until it reports the device gone, until no refresh mentions it
//! for the presence TTL (a lost "gone" is repaired like a peer that vanished silently),
//! or until the node itself goes silent or restarts ([`PresenceDirectory::forget_node`]).
//! Each node's devices are keyed by (node, device), apart from this node's own: one
//! device id connected to two nodes (the old socket not yet noticed dead) is two
//! bindings until the old one goes.

use super::{delivery, Delivery, EventKind, PresenceDirectory, PresenceError, PresenceState};

/// Devices of other nodes one directory holds.
pub const REMOTE_SESSIONS_MAX: usize = 262_144;
/// Devices of other nodes bound at once for one user (all nodes together).
pub const REMOTE_DEVICES_PER_USER_MAX: usize = 256;

/// One device as another node reported it.
#[derive(Debug, Clone)]
pub(super) struct RemoteSession {
    pub(super) state: PresenceState,
    /// This node's clock when a report last mentioned it.
    pub(super) last_seen_ns: i64,
}

/// A transition of a device on the node that reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteChange {
    /// Bound, or its state changed (also each refresh of a bound device).
    Set {
        user: String,
        device: String,
        state: PresenceState,
    },
    /// Its socket closed.
    Unbound { user: String, device: String },
    /// Its session expired there.
    Expired { user: String, device: String },
}

impl RemoteChange {
    /// What this node's own transition `d` tells the other nodes (a snapshot tells them
    /// nothing).
    pub fn of(d: &Delivery) -> Option<RemoteChange> {
        let (user, device) = (d.event.user.clone(), d.event.device.clone());
        match d.event.kind {
            EventKind::Bound | EventKind::StateChanged => Some(RemoteChange::Set {
                user,
                device,
                state: d.event.state,
            }),
            EventKind::Unbound => Some(RemoteChange::Unbound { user, device }),
            EventKind::Expired => Some(RemoteChange::Expired { user, device }),
            EventKind::Snapshot => None,
        }
    }

    pub fn user(&self) -> &str {
        match self {
            RemoteChange::Set { user, .. }
            | RemoteChange::Unbound { user, .. }
            | RemoteChange::Expired { user, .. } => user,
        }
    }
}

impl PresenceDirectory {
    /// Devices of other nodes held.
    pub fn remote_sessions(&self) -> usize {
        self.remote_sessions
    }

    /// Applies what node `node` reported; the transition its watchers see, if any. A
    /// `Set` of a device already held in that state only refreshes it.
    pub fn apply_remote(
        &mut self,
        node: u64,
        change: RemoteChange,
        now_ns: i64,
    ) -> Result<Option<Delivery>, PresenceError> {
        match change {
            RemoteChange::Set {
                user,
                device,
                state,
            } => self.set_remote(node, &user, device, state, now_ns),
            RemoteChange::Unbound { user, device } => {
                Ok(self.remove_remote(node, &user, device, EventKind::Unbound, now_ns))
            }
            RemoteChange::Expired { user, device } => {
                Ok(self.remove_remote(node, &user, device, EventKind::Expired, now_ns))
            }
        }
    }

    fn set_remote(
        &mut self,
        node: u64,
        user: &str,
        device: String,
        state: PresenceState,
        now_ns: i64,
    ) -> Result<Option<Delivery>, PresenceError> {
        let key = (node, device);
        let held = self
            .users
            .get_mut(user)
            .and_then(|u| u.remote.get_mut(&key));
        if let Some(s) = held {
            s.last_seen_ns = s.last_seen_ns.max(now_ns);
            if s.state == state {
                return Ok(None);
            }
            s.state = state;
            let entry = self.users.get(user).expect("the session's user exists");
            let ev = EventKind::StateChanged;
            return Ok(Some(delivery(entry, ev, user, &key.1, state, now_ns)));
        }
        if self.remote_sessions >= REMOTE_SESSIONS_MAX {
            self.stats.refused += 1;
            return Err(PresenceError::SessionsFull);
        }
        let devices = self.users.get(user).map_or(0, |u| u.remote.len());
        if devices >= REMOTE_DEVICES_PER_USER_MAX {
            self.stats.refused += 1;
            return Err(PresenceError::DevicesFull);
        }
        self.remote_sessions += 1;
        let entry = self.users.entry(user.to_string()).or_default();
        let session = RemoteSession {
            state,
            last_seen_ns: now_ns,
        };
        let device = key.1.clone();
        entry.remote.insert(key, session);
        let ev = EventKind::Bound;
        Ok(Some(delivery(entry, ev, user, &device, state, now_ns)))
    }

    fn remove_remote(
        &mut self,
        node: u64,
        user: &str,
        device: String,
        kind: EventKind,
        now_ns: i64,
    ) -> Option<Delivery> {
        let entry = self.users.get_mut(user)?;
        let key = (node, device);
        entry.remote.remove(&key)?;
        self.remote_sessions -= 1;
        let d = delivery(entry, kind, user, &key.1, PresenceState::Offline, now_ns);
        if entry.is_empty() {
            self.users.remove(user);
        }
        Some(d)
    }

    /// Drops every device node `node` reported (it went silent or restarted), as expired.
    /// Trade-off: a scan of every user, which only a node's loss or restart costs, rather
    /// than a per-node index every report would have to keep.
    pub fn forget_node(&mut self, node: u64, now_ns: i64) -> Vec<Delivery> {
        let mut gone: Vec<(String, String)> = Vec::new();
        for (user, entry) in &self.users {
            for (from, device) in entry.remote.keys() {
                if *from == node {
                    gone.push((user.clone(), device.clone()));
                }
            }
        }
        gone.sort();
        gone.into_iter()
            .filter_map(|(u, d)| self.remove_remote(node, &u, d, EventKind::Expired, now_ns))
            .collect()
    }

    /// Drops the other nodes' devices no report mentioned for longer than the TTL.
    pub fn sweep_remote(&mut self, now_ns: i64) -> Vec<Delivery> {
        let deadline = now_ns.saturating_sub(self.ttl_ns);
        let mut stale: Vec<(String, u64, String)> = Vec::new();
        for (user, entry) in &self.users {
            for ((node, device), s) in &entry.remote {
                if s.last_seen_ns < deadline {
                    stale.push((user.clone(), *node, device.clone()));
                }
            }
        }
        stale.sort();
        stale
            .into_iter()
            .filter_map(|(u, n, d)| self.remove_remote(n, &u, d, EventKind::Expired, now_ns))
            .collect()
    }
}

#[cfg(test)]
mod tests;
