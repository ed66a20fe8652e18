//! The presence directory (spec/messaging-edge.md §9.1, §18.4, §19 decisions 1 and 19): who
//! is connected, on which devices, in which state, and who is watching them.
//!
//! Sans-IO: every method takes the current time and returns the transitions it caused as
//! [`Delivery`] values (an event plus the watchers to tell). The shard around it moves them.
//!
//! One directory per shard; a user lives in the directory of [`owner_of_user`], a pure
//! function of the user id and the shard count. Binds, unbinds, heartbeats and state
//! changes of every socket of a user go to that owner (fixing §18 G43: no copy of a
//! session ever lives anywhere else on the node), and watchers register there (G44). In a
//! cluster the owner shard of every node also holds the devices the other nodes reported
//! (`remote.rs`), so its watchers see the user's devices on every node.
//!
//! Bounded: sessions per directory, devices per user, watchers per user and watch entries
//! per directory all have a limit; past it the call fails with [`PresenceError`] and
//! nothing changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

mod device_map;
mod remote;
pub use device_map::DeviceMap;
pub use remote::{RemoteChange, REMOTE_DEVICES_PER_USER_MAX, REMOTE_SESSIONS_MAX};

/// Device sessions one directory (one shard) holds.
pub const SESSIONS_MAX: usize = 262_144;
/// Devices bound at once for one user.
pub const DEVICES_PER_USER_MAX: usize = 64;
/// Connections watching one user at once, per directory.
pub const WATCHERS_PER_USER_MAX: usize = 4_096;
/// (watched user, watcher) pairs one directory holds.
pub const WATCHES_MAX: usize = 1_048_576;
/// Users one connection may watch (the `watch_presence` list limit).
pub const WATCHED_USERS_PER_CONNECTION_MAX: usize = 1_000;

/// A device's presence state (`presence.state`, `presence_event.presence.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PresenceState {
    Online,
    Away,
    Offline,
}

impl PresenceState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Online => "online",
            Self::Away => "away",
            Self::Offline => "offline",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "online" => Some(Self::Online),
            "away" => Some(Self::Away),
            "offline" => Some(Self::Offline),
            _ => None,
        }
    }
}

/// The shard whose directory holds `user`: the queue plane's slot function, so ownership
/// is spread exactly like queues and can be remapped to nodes the same way.
pub fn owner_of_user(user: &str, shard_count: usize) -> usize {
    boltq_shards::ownership::owner_of_slot(boltq_shards::ownership::slot_of(user), shard_count)
}

/// A watching connection: the shard holding its socket and its connection id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Watcher {
    pub shard: usize,
    pub conn: u64,
}

/// Why a transition happened (spec §9.1 "Events", plus the watch snapshot of §19 #19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Bound,
    Unbound,
    Expired,
    StateChanged,
    /// The current state of a user, sent once to a new watcher.
    Snapshot,
}

/// One presence transition as watchers see it (`presence_event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresenceEvent {
    pub kind: EventKind,
    pub user: String,
    /// The device concerned; empty for a snapshot (which describes the user).
    pub device: String,
    /// The device's state after the event (`offline` for unbind and expiry).
    pub state: PresenceState,
    /// Aggregate after the event: any device of the user still bound.
    pub online: bool,
    pub at_ns: i64,
}

/// An event and the connections to tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub event: PresenceEvent,
    pub watchers: Vec<Watcher>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresenceError {
    SessionsFull,
    DevicesFull,
    WatchersFull,
    WatchesFull,
}

impl std::fmt::Display for PresenceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = match self {
            Self::SessionsFull => "presence directory is full (sessions)",
            Self::DevicesFull => "too many devices bound for this user",
            Self::WatchersFull => "too many watchers of this user",
            Self::WatchesFull => "presence directory is full (watches)",
        };
        f.write_str(m)
    }
}

/// One bound device.
#[derive(Debug, Clone)]
struct Session {
    /// The connection holding it: only that connection may unbind it (stale-unbind guard).
    conn: u64,
    state: PresenceState,
    since_ns: i64,
    last_seen_ns: i64,
}

#[derive(Debug, Default)]
struct UserEntry {
    devices: DeviceMap<Session>,
    watchers: BTreeSet<Watcher>,
    /// Devices bound on other nodes of a cluster, by (node, device), as those nodes
    /// reported them (`remote.rs`).
    remote: BTreeMap<(u64, String), remote::RemoteSession>,
}

impl UserEntry {
    fn is_empty(&self) -> bool {
        self.devices.is_empty() && self.watchers.is_empty() && self.remote.is_empty()
    }

    /// Any device bound, here or on another node: the aggregate `online`.
    fn bound(&self) -> bool {
        !self.devices.is_empty() || !self.remote.is_empty()
    }

    fn states(&self) -> impl Iterator<Item = PresenceState> + '_ {
        let here = self.devices.values().map(|s| s.state);
        here.chain(self.remote.values().map(|s| s.state))
    }
}

/// Counters for `/presence` and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PresenceStats {
    pub bound: u64,
    pub unbound: u64,
    pub expired: u64,
    pub stale_unbinds: u64,
    pub refused: u64,
}

/// The presence directory of one shard.
#[derive(Debug)]
pub struct PresenceDirectory {
    users: HashMap<String, UserEntry>,
    sessions: usize,
    /// Devices bound on other nodes (bounded by `REMOTE_SESSIONS_MAX`, apart from
    /// `sessions`: another node's reports never crowd out this node's own devices).
    remote_sessions: usize,
    watches: usize,
    ttl_ns: i64,
    pub stats: PresenceStats,
}

impl PresenceDirectory {
    /// `ttl_ns`: how long a session lives without a heartbeat (> 0).
    pub fn new(ttl_ns: i64) -> PresenceDirectory {
        assert!(ttl_ns > 0, "presence TTL must be positive");
        PresenceDirectory {
            users: HashMap::new(),
            sessions: 0,
            remote_sessions: 0,
            watches: 0,
            ttl_ns,
            stats: PresenceStats::default(),
        }
    }

    pub fn sessions(&self) -> usize {
        self.sessions
    }

    pub fn watches(&self) -> usize {
        self.watches
    }

    /// Aggregate presence: any device bound, here or on another node, whatever its state
    /// (§9.1).
    pub fn online(&self, user: &str) -> bool {
        self.users.get(user).is_some_and(UserEntry::bound)
    }

    /// Binds `device` of `user` to connection `conn` in state `online`; the newest
    /// connection wins over an older one of the same device.
    pub fn bind(
        &mut self,
        user: &str,
        device: &str,
        conn: u64,
        now_ns: i64,
    ) -> Result<Delivery, PresenceError> {
        let existing = self
            .users
            .get(user)
            .is_some_and(|u| u.devices.contains_key(device));
        if !existing {
            if self.sessions >= SESSIONS_MAX {
                self.stats.refused += 1;
                return Err(PresenceError::SessionsFull);
            }
            let devices = self.users.get(user).map_or(0, |u| u.devices.len());
            if devices >= DEVICES_PER_USER_MAX {
                self.stats.refused += 1;
                return Err(PresenceError::DevicesFull);
            }
            self.sessions += 1;
        }
        let entry = self.users.entry(user.to_string()).or_default();
        entry.devices.insert(
            device.to_string(),
            Session {
                conn,
                state: PresenceState::Online,
                since_ns: now_ns,
                last_seen_ns: now_ns,
            },
        );
        self.stats.bound += 1;
        Ok(delivery(
            entry,
            EventKind::Bound,
            user,
            device,
            PresenceState::Online,
            now_ns,
        ))
    }

    /// Unbinds `device` of `user` if `conn` still holds it; a late unbind from a replaced
    /// connection changes nothing (§9.1 stale-unbind guard).
    pub fn unbind(&mut self, user: &str, device: &str, conn: u64, now_ns: i64) -> Option<Delivery> {
        if self.session(user, device, conn).is_none() {
            self.stats.stale_unbinds += 1;
            return None;
        }
        self.stats.unbound += 1;
        Some(self.remove(user, device, EventKind::Unbound, now_ns))
    }

    /// Refreshes the session's `last_seen`; false when `conn` does not hold it.
    pub fn heartbeat(&mut self, user: &str, device: &str, conn: u64, now_ns: i64) -> bool {
        match self.session(user, device, conn) {
            Some(s) => {
                s.last_seen_ns = s.last_seen_ns.max(now_ns);
                true
            }
            None => false,
        }
    }

    /// Sets the device's state (also a heartbeat); an event only when the state changed.
    /// A missing session (or one held by another connection) is ignored (§2.5.8).
    pub fn set_state(
        &mut self,
        user: &str,
        device: &str,
        conn: u64,
        state: PresenceState,
        now_ns: i64,
    ) -> Option<Delivery> {
        let s = self.session(user, device, conn)?;
        s.last_seen_ns = s.last_seen_ns.max(now_ns);
        if s.state == state {
            return None;
        }
        s.state = state;
        s.since_ns = now_ns;
        let entry = self.users.get(user).expect("the session's user exists");
        Some(delivery(
            entry,
            EventKind::StateChanged,
            user,
            device,
            state,
            now_ns,
        ))
    }

    /// Removes this node's sessions without a heartbeat for longer than the TTL (other
    /// nodes' devices: [`PresenceDirectory::sweep_remote`]). Only peers whose
    /// teardown never ran reach this: a closed socket unbinds at once (§19 decision 1).
    /// Trade-off: a full scan, O(sessions), every sweep interval; cheaper than keeping a
    /// second index ordered by `last_seen`, which every heartbeat would have to update.
    pub fn sweep(&mut self, now_ns: i64) -> Vec<Delivery> {
        let deadline = now_ns.saturating_sub(self.ttl_ns);
        let mut stale: Vec<(String, String)> = Vec::new();
        for (user, entry) in &self.users {
            for (device, s) in entry.devices.iter() {
                if s.last_seen_ns < deadline {
                    stale.push((user.clone(), device.clone()));
                }
            }
        }
        stale.sort();
        self.stats.expired += stale.len() as u64;
        stale
            .into_iter()
            .map(|(u, d)| self.remove(&u, &d, EventKind::Expired, now_ns))
            .collect()
    }

    /// This node's own bound devices as (user, device, state), in user order: what the
    /// other nodes of a cluster are sent to refresh their copies.
    pub fn local_devices(&self) -> Vec<(String, String, PresenceState)> {
        let mut out: Vec<(String, String, PresenceState)> = Vec::with_capacity(self.sessions);
        for (user, entry) in &self.users {
            for (device, s) in entry.devices.iter() {
                out.push((user.clone(), device.clone(), s.state));
            }
        }
        out.sort();
        out
    }

    /// Registers `watcher` for `user`'s transitions and returns the snapshot the watcher
    /// gets first (§19 decision 19). Watching again is idempotent (and snapshots again).
    pub fn watch(
        &mut self,
        user: &str,
        watcher: Watcher,
        now_ns: i64,
    ) -> Result<Delivery, PresenceError> {
        let already = self
            .users
            .get(user)
            .is_some_and(|u| u.watchers.contains(&watcher));
        if !already {
            if self.watches >= WATCHES_MAX {
                return Err(PresenceError::WatchesFull);
            }
            let n = self.users.get(user).map_or(0, |u| u.watchers.len());
            if n >= WATCHERS_PER_USER_MAX {
                return Err(PresenceError::WatchersFull);
            }
            self.users
                .entry(user.to_string())
                .or_default()
                .watchers
                .insert(watcher);
            self.watches += 1;
        }
        Ok(Delivery {
            event: self.snapshot(user, now_ns),
            watchers: vec![watcher],
        })
    }

    /// Stops telling `watcher` about `user`; unknown pairs are ignored.
    pub fn unwatch(&mut self, user: &str, watcher: Watcher) {
        let Some(entry) = self.users.get_mut(user) else {
            return;
        };
        if entry.watchers.remove(&watcher) {
            self.watches -= 1;
        }
        if entry.is_empty() {
            self.users.remove(user);
        }
    }

    /// The user as a whole: online if any device is bound, with the most present state
    /// among its devices (online > away > offline).
    pub fn snapshot(&self, user: &str, now_ns: i64) -> PresenceEvent {
        let best = self
            .users
            .get(user)
            .into_iter()
            .flat_map(UserEntry::states)
            .min_by_key(|s| rank(*s));
        PresenceEvent {
            kind: EventKind::Snapshot,
            user: user.to_string(),
            device: String::new(),
            state: best.unwrap_or(PresenceState::Offline),
            online: best.is_some(),
            at_ns: now_ns,
        }
    }

    fn session(&mut self, user: &str, device: &str, conn: u64) -> Option<&mut Session> {
        self.users
            .get_mut(user)?
            .devices
            .get_mut(device)
            .filter(|s| s.conn == conn)
    }

    fn remove(&mut self, user: &str, device: &str, kind: EventKind, now_ns: i64) -> Delivery {
        let entry = self.users.get_mut(user).expect("removing a known user");
        let removed = entry.devices.remove(device);
        assert!(removed.is_some(), "removing a bound device");
        self.sessions -= 1;
        let d = delivery(entry, kind, user, device, PresenceState::Offline, now_ns);
        if entry.is_empty() {
            self.users.remove(user);
        }
        d
    }

    /// Panics if the counters disagree with the tables (tests and debug checks).
    pub fn check_invariants(&self) {
        let sessions: usize = self.users.values().map(|u| u.devices.len()).sum();
        let remote: usize = self.users.values().map(|u| u.remote.len()).sum();
        let watches: usize = self.users.values().map(|u| u.watchers.len()).sum();
        assert_eq!(sessions, self.sessions, "session count");
        assert_eq!(remote, self.remote_sessions, "remote session count");
        assert_eq!(watches, self.watches, "watch count");
        assert!(self.sessions <= SESSIONS_MAX && self.watches <= WATCHES_MAX);
        assert!(self.remote_sessions <= REMOTE_SESSIONS_MAX);
        for (user, u) in &self.users {
            assert!(!u.is_empty(), "empty entry kept for {user}");
            assert!(u.devices.len() <= DEVICES_PER_USER_MAX);
            assert!(u.watchers.len() <= WATCHERS_PER_USER_MAX);
            assert!(u.remote.len() <= REMOTE_DEVICES_PER_USER_MAX);
            for s in u.devices.values() {
                assert!(s.since_ns <= s.last_seen_ns, "since after last_seen");
            }
        }
    }
}

fn rank(s: PresenceState) -> u8 {
    match s {
        PresenceState::Online => 0,
        PresenceState::Away => 1,
        PresenceState::Offline => 2,
    }
}

fn delivery(
    entry: &UserEntry,
    kind: EventKind,
    user: &str,
    device: &str,
    state: PresenceState,
    now_ns: i64,
) -> Delivery {
    Delivery {
        event: PresenceEvent {
            kind,
            user: user.to_string(),
            device: device.to_string(),
            state,
            online: entry.bound(),
            at_ns: now_ns,
        },
        watchers: entry.watchers.iter().copied().collect(),
    }
}

/// Presence messages between shards (carried by `GatewayMsg::Presence`). All one-way: the
/// mesh batches them per destination, so a burst of heartbeats costs one wake-up.
#[derive(Debug)]
pub enum PresenceMsg {
    /// To the owner of `user`.
    Bind {
        user: String,
        device: String,
        conn: u64,
    },
    Unbind {
        user: String,
        device: String,
        conn: u64,
    },
    Heartbeat {
        user: String,
        device: String,
        conn: u64,
    },
    State {
        user: String,
        device: String,
        conn: u64,
        state: PresenceState,
    },
    Watch {
        user: String,
        watcher: Watcher,
    },
    Unwatch {
        user: String,
        watcher: Watcher,
    },
    /// Owner → the shard of the watchers: events and that shard's connections to tell.
    Events(Vec<(PresenceEvent, Vec<u64>)>),
}

/// Splits deliveries by the watchers' shard: what one `Events` message to each shard
/// carries.
pub fn by_shard(deliveries: Vec<Delivery>) -> BTreeMap<usize, Vec<(PresenceEvent, Vec<u64>)>> {
    let mut out: BTreeMap<usize, Vec<(PresenceEvent, Vec<u64>)>> = BTreeMap::new();
    for d in deliveries {
        let mut per: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for w in d.watchers {
            per.entry(w.shard).or_default().push(w.conn);
        }
        for (shard, conns) in per {
            out.entry(shard).or_default().push((d.event.clone(), conns));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;

    const S: i64 = 1_000_000_000;
    const TTL: i64 = 90 * S;

    fn w(shard: usize, conn: u64) -> Watcher {
        Watcher { shard, conn }
    }

    #[test]
    fn bind_tells_watchers_online_and_unbind_offline() {
        let mut d = PresenceDirectory::new(TTL);
        let snap = d.watch("bob", w(1, 7), 0).unwrap();
        assert_eq!(snap.event.kind, EventKind::Snapshot);
        assert!(!snap.event.online);
        assert_eq!(snap.event.state, PresenceState::Offline);
        let b = d.bind("bob", "phone", 10, S).unwrap();
        assert_eq!(b.watchers, vec![w(1, 7)]);
        assert_eq!(b.event.kind, EventKind::Bound);
        assert!(b.event.online);
        assert_eq!(b.event.state, PresenceState::Online);
        let u = d.unbind("bob", "phone", 10, 2 * S).unwrap();
        assert_eq!(u.event.kind, EventKind::Unbound);
        assert!(!u.event.online);
        assert_eq!(u.event.state, PresenceState::Offline);
        assert_eq!(u.watchers, vec![w(1, 7)]);
        d.check_invariants();
    }

    #[test]
    fn aggregate_stays_online_while_any_device_is_bound() {
        let mut d = PresenceDirectory::new(TTL);
        d.bind("bob", "phone", 1, 0).unwrap();
        d.bind("bob", "laptop", 2, 0).unwrap();
        let u = d.unbind("bob", "phone", 1, S).unwrap();
        assert!(u.event.online, "laptop still bound");
        assert!(d.online("bob"));
        let u = d.unbind("bob", "laptop", 2, S).unwrap();
        assert!(!u.event.online);
        assert!(!d.online("bob"));
    }

    #[test]
    fn stale_unbind_never_removes_a_newer_binding() {
        let mut d = PresenceDirectory::new(TTL);
        d.bind("bob", "phone", 1, 0).unwrap();
        d.bind("bob", "phone", 2, S).unwrap(); // the device reconnected
        assert!(d.unbind("bob", "phone", 1, 2 * S).is_none());
        assert!(d.online("bob"));
        assert!(
            !d.heartbeat("bob", "phone", 1, 3 * S),
            "old conn cannot refresh"
        );
        assert!(d
            .set_state("bob", "phone", 1, PresenceState::Away, 3 * S)
            .is_none());
        assert_eq!(d.stats.stale_unbinds, 1);
        assert!(d.unbind("bob", "phone", 2, 4 * S).is_some());
        assert!(!d.online("bob"));
    }

    #[test]
    fn ttl_expires_silent_sessions_and_heartbeats_keep_them() {
        let mut d = PresenceDirectory::new(TTL);
        d.watch("bob", w(0, 9), 0).unwrap();
        d.bind("bob", "phone", 1, 0).unwrap();
        d.bind("bob", "laptop", 2, 0).unwrap();
        assert!(d.heartbeat("bob", "laptop", 2, 60 * S));
        assert!(d.sweep(TTL).is_empty(), "exactly the TTL is not past it");
        let gone = d.sweep(TTL + 1);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].event.kind, EventKind::Expired);
        assert_eq!(gone[0].event.device, "phone");
        assert!(gone[0].event.online, "laptop was refreshed");
        assert_eq!(gone[0].watchers, vec![w(0, 9)]);
        let gone = d.sweep(60 * S + TTL + 1);
        assert_eq!(gone.len(), 1);
        assert!(!gone[0].event.online);
        d.check_invariants();
    }

    #[test]
    fn state_change_emits_once_and_same_state_is_a_heartbeat() {
        let mut d = PresenceDirectory::new(TTL);
        d.watch("bob", w(0, 9), 0).unwrap();
        d.bind("bob", "phone", 1, 0).unwrap();
        assert!(d
            .set_state("bob", "phone", 1, PresenceState::Online, S)
            .is_none());
        let e = d
            .set_state("bob", "phone", 1, PresenceState::Away, 2 * S)
            .unwrap();
        assert_eq!(e.event.kind, EventKind::StateChanged);
        assert_eq!(e.event.state, PresenceState::Away);
        assert!(e.event.online);
        // `offline` set by the client leaves the session bound (§2.5.8).
        let e = d
            .set_state("bob", "phone", 1, PresenceState::Offline, 3 * S)
            .unwrap();
        assert!(e.event.online);
        assert_eq!(d.snapshot("bob", 4 * S).state, PresenceState::Offline);
        assert!(d.snapshot("bob", 4 * S).online);
        // The state change refreshed the heartbeat.
        assert!(d.sweep(2 * S + TTL).is_empty());
    }

    #[test]
    fn snapshot_reports_the_most_present_device() {
        let mut d = PresenceDirectory::new(TTL);
        d.bind("bob", "phone", 1, 0).unwrap();
        d.bind("bob", "laptop", 2, 0).unwrap();
        d.set_state("bob", "phone", 1, PresenceState::Away, 0);
        assert_eq!(d.snapshot("bob", 0).state, PresenceState::Online);
        d.set_state("bob", "laptop", 2, PresenceState::Offline, 0);
        assert_eq!(d.snapshot("bob", 0).state, PresenceState::Away);
        let s = d.watch("bob", w(0, 1), 5).unwrap();
        assert_eq!(s.watchers, vec![w(0, 1)]);
        assert_eq!(s.event.at_ns, 5);
        assert!(s.event.device.is_empty());
    }

    #[test]
    fn unwatch_stops_events_and_empty_users_are_forgotten() {
        let mut d = PresenceDirectory::new(TTL);
        d.watch("bob", w(0, 1), 0).unwrap();
        d.watch("bob", w(0, 1), 0).unwrap(); // idempotent
        assert_eq!(d.watches(), 1);
        d.unwatch("bob", w(0, 1));
        d.unwatch("bob", w(0, 1));
        assert_eq!(d.watches(), 0);
        assert!(d.bind("bob", "p", 1, 0).unwrap().watchers.is_empty());
        d.unbind("bob", "p", 1, 0).unwrap();
        assert!(d.users.is_empty());
        d.check_invariants();
    }

    #[test]
    fn limits_refuse_without_changing_anything() {
        let mut d = PresenceDirectory::new(TTL);
        for i in 0..DEVICES_PER_USER_MAX {
            d.bind("bob", &format!("d{i}"), i as u64, 0).unwrap();
        }
        assert_eq!(
            d.bind("bob", "one-more", 999, 0),
            Err(PresenceError::DevicesFull)
        );
        // Rebinding an existing device is not a new session.
        d.bind("bob", "d0", 1000, 0).unwrap();
        assert_eq!(d.sessions(), DEVICES_PER_USER_MAX);
        for i in 0..WATCHERS_PER_USER_MAX {
            d.watch("carol", w(0, i as u64), 0).unwrap();
        }
        assert_eq!(
            d.watch("carol", w(1, 0), 0),
            Err(PresenceError::WatchersFull)
        );
        d.check_invariants();
    }

    #[test]
    fn by_shard_groups_watchers() {
        let mut d = PresenceDirectory::new(TTL);
        d.watch("bob", w(0, 1), 0).unwrap();
        d.watch("bob", w(1, 2), 0).unwrap();
        d.watch("bob", w(1, 3), 0).unwrap();
        let b = d.bind("bob", "p", 9, 0).unwrap();
        let g = by_shard(vec![b]);
        assert_eq!(g[&0][0].1, vec![1]);
        assert_eq!(g[&1][0].1, vec![2, 3]);
        assert_eq!(g[&1][0].0.user, "bob");
    }

    #[test]
    fn owner_is_stable_and_in_range() {
        for n in 1..8 {
            let o = owner_of_user("alice", n);
            assert!(o < n);
            assert_eq!(o, owner_of_user("alice", n));
        }
    }

    /// Random operations against a model: a user is online exactly when the model says a
    /// device is bound, and the counters always match the tables.
    #[test]
    fn property_matches_a_model() {
        let mut rng = Rng::new(61);
        for _ in 0..50 {
            let mut d = PresenceDirectory::new(10 * S);
            // (user, device) -> (conn, last_seen)
            let mut model: BTreeMap<(u64, u64), (u64, i64)> = BTreeMap::new();
            let mut now = 0i64;
            let mut next_conn = 1u64;
            for _ in 0..400 {
                now += rng.below(3 * S as u64) as i64;
                let u = rng.below(4);
                let dev = rng.below(3);
                let (user, device) = (format!("u{u}"), format!("d{dev}"));
                match rng.below(5) {
                    0 | 1 => {
                        next_conn += 1;
                        d.bind(&user, &device, next_conn, now).unwrap();
                        model.insert((u, dev), (next_conn, now));
                    }
                    2 => {
                        // A random (often stale) connection id unbinds.
                        let conn = rng.below(next_conn + 1);
                        let held = model.get(&(u, dev)).map(|(c, _)| *c);
                        let r = d.unbind(&user, &device, conn, now);
                        assert_eq!(r.is_some(), held == Some(conn));
                        if held == Some(conn) {
                            model.remove(&(u, dev));
                        }
                    }
                    3 => {
                        if let Some((c, seen)) = model.get_mut(&(u, dev)) {
                            assert!(d.heartbeat(&user, &device, *c, now));
                            *seen = now;
                        }
                    }
                    _ => {
                        let expired = d.sweep(now);
                        let before = model.len();
                        model.retain(|_, (_, seen)| *seen >= now - 10 * S);
                        assert_eq!(expired.len(), before - model.len());
                    }
                }
                d.check_invariants();
                for uu in 0..4 {
                    let online = model.keys().any(|(x, _)| *x == uu);
                    assert_eq!(d.online(&format!("u{uu}")), online);
                }
                assert_eq!(d.sessions(), model.len());
            }
        }
    }
}
