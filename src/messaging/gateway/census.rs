//! Numbers for the admin routes: the presence census of one shard's users, and every
//! shard's census (with its typing and push numbers) asked over the mesh.

use super::{GatewayCtx, GatewayMsg};
use crate::messaging::presence::{self, Delivery, DeviceMap, EventKind, PresenceState};
use std::collections::HashMap;

/// Every presence state, in the order of [`PresenceCensus::by_state`].
pub const PRESENCE_STATES: [PresenceState; 3] = [
    PresenceState::Online,
    PresenceState::Away,
    PresenceState::Offline,
];

fn state_index(s: PresenceState) -> usize {
    match s {
        PresenceState::Online => 0,
        PresenceState::Away => 1,
        PresenceState::Offline => 2,
    }
}

/// One bound device as `/presence?user=` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePresence {
    pub device: String,
    pub state: PresenceState,
    /// When the device entered `state`.
    pub since_ns: i64,
}

/// A user's presence as its owner shard knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserPresence {
    pub user: String,
    /// Any device bound.
    pub online: bool,
    /// The most present state among the devices (online > away > offline).
    pub state: PresenceState,
    pub devices: Vec<DevicePresence>,
}

/// The device states of one shard's users, kept from the transitions its presence
/// directory reports (bound, state changed, unbound, expired).
///
/// Trade-off: a second, smaller copy of what the directory holds (no watchers, no
/// heartbeat times) rather than a scan of the directory on each admin request; it is
/// exactly as bounded as the directory, since it only ever holds devices the directory
/// accepted, and a per-state count is kept so a scrape is O(1).
#[derive(Debug, Default)]
pub struct PresenceCensus {
    users: HashMap<String, DeviceMap<(PresenceState, i64)>>,
    by_state: [u64; 3],
}

impl PresenceCensus {
    /// Applies one transition of the directory (snapshots change nothing).
    pub fn apply(&mut self, d: &Delivery) {
        let ev = &d.event;
        match ev.kind {
            EventKind::Snapshot => {}
            EventKind::Bound | EventKind::StateChanged => {
                let devices = self.users.entry(ev.user.clone()).or_default();
                if let Some((old, _)) = devices.insert(ev.device.clone(), (ev.state, ev.at_ns)) {
                    self.by_state[state_index(old)] -= 1;
                }
                self.by_state[state_index(ev.state)] += 1;
            }
            EventKind::Unbound | EventKind::Expired => {
                let Some(devices) = self.users.get_mut(&ev.user) else {
                    return;
                };
                if let Some((old, _)) = devices.remove(&ev.device) {
                    self.by_state[state_index(old)] -= 1;
                }
                if devices.is_empty() {
                    self.users.remove(&ev.user);
                }
            }
        }
    }

    pub fn apply_all(&mut self, ds: &[Delivery]) {
        for d in ds {
            self.apply(d);
        }
    }

    /// Bound devices.
    pub fn sessions(&self) -> u64 {
        self.by_state.iter().sum()
    }

    /// Users with at least one bound device.
    pub fn users_online(&self) -> u64 {
        self.users.len() as u64
    }

    /// Bound devices by state, in the order of [`PRESENCE_STATES`].
    pub fn by_state(&self) -> [u64; 3] {
        self.by_state
    }

    /// `user`'s devices in device order; an unknown user is offline with none.
    pub fn user(&self, user: &str) -> UserPresence {
        let devices: Vec<DevicePresence> = self
            .users
            .get(user)
            .into_iter()
            .flat_map(DeviceMap::iter)
            .map(|(device, (state, since_ns))| DevicePresence {
                device: device.clone(),
                state: *state,
                since_ns: *since_ns,
            })
            .collect();
        let state = devices
            .iter()
            .map(|d| d.state)
            .min_by_key(|s| state_index(*s))
            .unwrap_or(PresenceState::Offline);
        UserPresence {
            user: user.to_string(),
            online: !devices.is_empty(),
            state,
            devices,
        }
    }
}

/// One shard's numbers for `/presence`, the overview and `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct ShardCensus {
    /// Bound devices of the users this shard owns.
    pub sessions: u64,
    pub users_online: u64,
    /// In the order of [`PRESENCE_STATES`].
    pub by_state: [u64; 3],
    /// (watched user, watching connection) pairs.
    pub watches: u64,
    /// Typing topics with listeners, and listeners, on this shard.
    pub signal_topics: u64,
    pub signal_listeners: u64,
    /// `None` when push is off.
    pub push: Option<crate::messaging::push::dispatcher::PushStats>,
}

impl GatewayCtx {
    /// This shard's [`ShardCensus`].
    pub fn census(&self) -> ShardCensus {
        let e = &self.ephemeral;
        let census = e.census.borrow();
        let dir = e.presence.borrow();
        debug_assert_eq!(census.sessions(), dir.sessions() as u64, "census drift");
        let hub = e.hub.borrow();
        ShardCensus {
            sessions: census.sessions(),
            users_online: census.users_online(),
            by_state: census.by_state(),
            watches: dir.watches() as u64,
            signal_topics: hub.topics() as u64,
            signal_listeners: hub.listens() as u64,
            push: self.pusher.borrow().as_ref().map(|p| p.stats()),
        }
    }

    /// Every shard's [`GatewayCtx::census`], by shard id (`None`: no answer in time).
    pub async fn censuses(&self, timeout_ms: u64) -> Vec<Option<ShardCensus>> {
        let shard = &self.port;
        let mut out = Vec::with_capacity(shard.count());
        for dest in 0..shard.count() {
            if dest == shard.id() {
                out.push(Some(self.census()));
                continue;
            }
            let msg = GatewayMsg::Census;
            out.push(match shard.request(dest, msg, timeout_ms).await {
                Ok(GatewayMsg::CensusOf(c)) => Some(*c),
                _ => None,
            });
        }
        out
    }

    pub(super) fn user_presence_here(&self, user: &str) -> UserPresence {
        self.ephemeral.census.borrow().user(user)
    }

    /// `user`'s presence, asked of its owner shard; `None` when it did not answer.
    pub async fn user_presence(&self, user: &str, timeout_ms: u64) -> Option<UserPresence> {
        let shard = &self.port;
        let dest = presence::owner_of_user(user, shard.count());
        if dest == shard.id() {
            return Some(self.user_presence_here(user));
        }
        let msg = GatewayMsg::UserPresence {
            user: user.to_string(),
        };
        match shard.request(dest, msg, timeout_ms).await {
            Ok(GatewayMsg::UserPresenceIs(p)) => Some(*p),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messaging::presence::PresenceDirectory;
    use crate::messaging::presence::Watcher;
    use boltq_io::testutil::Rng;

    const TTL_NS: i64 = 1_000;

    #[test]
    fn census_follows_bind_state_and_unbind() {
        let mut dir = PresenceDirectory::new(TTL_NS);
        let mut c = PresenceCensus::default();
        c.apply(&dir.bind("alice", "phone", 1, 10).unwrap());
        c.apply(&dir.bind("alice", "laptop", 2, 11).unwrap());
        c.apply(&dir.bind("bob", "phone", 3, 12).unwrap());
        c.apply(
            &dir.set_state("alice", "phone", 1, PresenceState::Away, 20)
                .unwrap(),
        );
        // A watch snapshot changes nothing.
        c.apply(&dir.watch("bob", Watcher { shard: 0, conn: 9 }, 21).unwrap());
        assert_eq!(c.sessions(), 3);
        assert_eq!(c.users_online(), 2);
        assert_eq!(c.by_state(), [2, 1, 0]);
        let a = c.user("alice");
        assert!(a.online);
        assert_eq!(
            a.state,
            PresenceState::Online,
            "the most present device wins"
        );
        assert_eq!(a.devices.len(), 2);
        assert_eq!(a.devices[1].device, "phone");
        assert_eq!(a.devices[1].since_ns, 20);
        c.apply(&dir.unbind("alice", "laptop", 2, 30).unwrap());
        assert_eq!(c.user("alice").state, PresenceState::Away);
        c.apply(&dir.unbind("alice", "phone", 1, 31).unwrap());
        let gone = c.user("alice");
        assert!(!gone.online && gone.devices.is_empty());
        assert_eq!(gone.state, PresenceState::Offline);
        assert_eq!((c.sessions(), c.users_online()), (1, 1));
        c.apply_all(&dir.sweep(12 + TTL_NS + 1));
        assert_eq!(
            (c.sessions(), c.users_online(), c.by_state()),
            (0, 0, [0; 3])
        );
    }

    #[test]
    fn census_agrees_with_the_directory_under_random_traffic() {
        let users = ["a", "b", "c", "d"];
        let devices = ["p", "l", "t"];
        for seed in 0..20 {
            let mut rng = Rng::new(seed);
            let mut dir = PresenceDirectory::new(TTL_NS);
            let mut c = PresenceCensus::default();
            let mut now = 0i64;
            for _ in 0..400 {
                now += rng.below(100) as i64;
                let u = users[rng.below(users.len() as u64) as usize];
                let d = devices[rng.below(devices.len() as u64) as usize];
                let conn = rng.below(3);
                let out: Vec<Delivery> = match rng.below(5) {
                    0 => dir.bind(u, d, conn, now).into_iter().collect(),
                    1 => dir.unbind(u, d, conn, now).into_iter().collect(),
                    2 => {
                        let s = PRESENCE_STATES[rng.below(3) as usize];
                        dir.set_state(u, d, conn, s, now).into_iter().collect()
                    }
                    3 => {
                        dir.heartbeat(u, d, conn, now);
                        Vec::new()
                    }
                    _ => dir.sweep(now),
                };
                c.apply_all(&out);
                assert_eq!(c.sessions(), dir.sessions() as u64, "seed {seed}");
                for u in users {
                    let snap = dir.snapshot(u, now);
                    let mine = c.user(u);
                    assert_eq!(mine.online, snap.online, "seed {seed} user {u}");
                    assert_eq!(mine.state, snap.state, "seed {seed} user {u}");
                }
                let online = users.iter().filter(|u| dir.online(u)).count() as u64;
                assert_eq!(c.users_online(), online, "seed {seed}");
            }
        }
    }
}
