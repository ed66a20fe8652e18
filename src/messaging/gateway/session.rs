//! Gateway sessions: the state a device keeps across sockets (spec/messaging-edge.md §2.8),
//! sans-IO.
//!
//! A session lives on the shard that created it; its id's first byte names that shard, so a
//! resume arriving on another shard knows where to ask. The resume secret is kept only as a
//! SHA-256 digest and compared in constant time; it is rotated on every `welcome`.
//! Positions are the next sequence to deliver per subscription, advanced only when a batch
//! was actually written to a socket.

use crate::config::secret::secret_matches;
use std::collections::{BTreeSet, HashMap};

/// Sessions one shard keeps (attached and resumable); the oldest detached one is evicted
/// beyond it.
pub const SESSIONS_MAX: usize = 200_000;
/// Subscriptions remembered per session (as `gateway.max_subscriptions` allows at most).
pub const SESSION_SUBSCRIPTIONS_MAX: usize = 1024;

pub type SubKey = (String, u32);

/// What a session carries from one socket to the next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionState {
    pub user: String,
    pub device: String,
    /// (topic, partition) → next sequence to deliver (written to a socket before it).
    pub positions: HashMap<SubKey, u64>,
    pub watched_users: Vec<String>,
}

struct Session {
    secret_digest: [u8; 32],
    state: SessionState,
    /// The connection holding it, if any.
    attached: Option<u64>,
    detached_at_ns: i64,
}

pub enum Resume {
    /// Not resumable (unknown, expired, wrong secret or another user): start fresh.
    Fresh,
    /// Resumed; if it was attached to `previous`, that connection must be closed (4009).
    Resumed {
        state: SessionState,
        previous: Option<u64>,
    },
}

fn digest(secret: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, secret);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

pub struct SessionStore {
    sessions: HashMap<String, Session>,
    /// The detached sessions by (detached at, id), oldest first: eviction and reaping take
    /// from the front instead of scanning every session (issue 17 item 6).
    detached: BTreeSet<(i64, String)>,
    sessions_max: usize,
}

impl Default for SessionStore {
    fn default() -> SessionStore {
        SessionStore::with_max(SESSIONS_MAX)
    }
}

impl SessionStore {
    /// A store that evicts beyond `sessions_max` sessions (`SESSIONS_MAX` in the server).
    pub fn with_max(sessions_max: usize) -> SessionStore {
        SessionStore {
            sessions: HashMap::new(),
            detached: BTreeSet::new(),
            sessions_max,
        }
    }

    /// Creates an attached session for `conn`.
    pub fn create(&mut self, id: String, secret: &[u8], state: SessionState, conn: u64) {
        if self.sessions.len() >= self.sessions_max {
            self.evict_oldest_detached();
        }
        let replaced = self.sessions.insert(
            id.clone(),
            Session {
                secret_digest: digest(secret),
                state,
                attached: Some(conn),
                detached_at_ns: 0,
            },
        );
        if let Some(old) = replaced.filter(|s| s.attached.is_none()) {
            self.detached.remove(&(old.detached_at_ns, id));
        }
    }

    fn evict_oldest_detached(&mut self) {
        if let Some((_, id)) = self.detached.pop_first() {
            self.sessions.remove(&id);
        }
    }

    /// Takes a session over for `conn` when the secret and user match and it is within the
    /// resume window; newest wins over a still-attached socket. The secret is replaced by
    /// `new_secret` (rotation).
    #[allow(clippy::too_many_arguments)]
    pub fn resume(
        &mut self,
        id: &str,
        secret: &[u8],
        user: &str,
        new_secret: &[u8],
        conn: u64,
        now_ns: i64,
        window_ns: i64,
    ) -> Resume {
        let Some(s) = self.sessions.get_mut(id) else {
            return Resume::Fresh;
        };
        let ok = secret_matches(s.secret_digest, digest(secret));
        let expired = s.attached.is_none() && now_ns - s.detached_at_ns > window_ns;
        if !ok || s.state.user != user || expired {
            return Resume::Fresh;
        }
        let previous = s.attached.replace(conn);
        if previous.is_none() {
            self.detached.remove(&(s.detached_at_ns, id.to_string()));
        }
        s.secret_digest = digest(new_secret);
        Resume::Resumed {
            state: s.state.clone(),
            previous,
        }
    }

    /// Removes a session for a resume on another shard (same checks as `resume`); returns
    /// its state and the connection to close here, if any.
    pub fn take(
        &mut self,
        id: &str,
        secret: &[u8],
        user: &str,
        now_ns: i64,
        window_ns: i64,
    ) -> Option<(SessionState, Option<u64>)> {
        let s = self.sessions.get(id)?;
        let ok = secret_matches(s.secret_digest, digest(secret));
        let expired = s.attached.is_none() && now_ns - s.detached_at_ns > window_ns;
        if !ok || s.state.user != user || expired {
            return None;
        }
        let s = self.sessions.remove(id)?;
        if s.attached.is_none() {
            self.detached.remove(&(s.detached_at_ns, id.to_string()));
        }
        Some((s.state, s.attached))
    }

    /// Records a batch written on `conn`: the subscription continues at `next`. Positions
    /// only move forward, and only for the connection holding the session.
    pub fn advance(&mut self, id: &str, conn: u64, key: &SubKey, next: u64) {
        if let Some(s) = self.sessions.get_mut(id) {
            if s.attached != Some(conn) {
                return;
            }
            if let Some(p) = s.state.positions.get_mut(key) {
                *p = (*p).max(next);
            }
        }
    }

    pub fn set_position(&mut self, id: &str, conn: u64, key: SubKey, pos: u64) {
        if let Some(s) = self.sessions.get_mut(id) {
            if s.attached != Some(conn) {
                return;
            }
            if s.state.positions.len() >= SESSION_SUBSCRIPTIONS_MAX
                && !s.state.positions.contains_key(&key)
            {
                return;
            }
            s.state.positions.insert(key, pos);
        }
    }

    pub fn remove_position(&mut self, id: &str, conn: u64, key: &SubKey) {
        if let Some(s) = self.sessions.get_mut(id) {
            if s.attached == Some(conn) {
                s.state.positions.remove(key);
            }
        }
    }

    pub fn set_watched(&mut self, id: &str, conn: u64, users: Vec<String>) {
        if let Some(s) = self.sessions.get_mut(id) {
            if s.attached == Some(conn) {
                s.state.watched_users = users;
            }
        }
    }

    /// `conn` ended: its session becomes resumable for the window (unless someone else
    /// already took it over).
    pub fn detach(&mut self, id: &str, conn: u64, now_ns: i64) {
        if let Some(s) = self.sessions.get_mut(id) {
            if s.attached == Some(conn) {
                s.attached = None;
                s.detached_at_ns = now_ns;
                self.detached.insert((now_ns, id.to_string()));
            }
        }
    }

    /// Drops detached sessions older than the window.
    pub fn reap(&mut self, now_ns: i64, window_ns: i64) -> usize {
        let mut reaped = 0;
        while let Some((at, _)) = self.detached.first() {
            if now_ns - *at <= window_ns {
                break;
            }
            let (_, id) = self.detached.pop_first().expect("checked above");
            self.sessions.remove(&id);
            reaped += 1;
        }
        reaped
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    pub fn attached(&self) -> usize {
        self.sessions.len() - self.detached.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(user: &str) -> SessionState {
        SessionState {
            user: user.into(),
            device: "d1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn resume_needs_the_secret_and_the_same_user_and_rotates_the_secret() {
        let mut s = SessionStore::default();
        s.create("s1".into(), b"secret", state("alice"), 1);
        s.detach("s1", 1, 0);
        assert!(matches!(
            s.resume("s1", b"wrong", "alice", b"n", 2, 1, 100),
            Resume::Fresh
        ));
        assert!(matches!(
            s.resume("s1", b"secret", "bob", b"n", 2, 1, 100),
            Resume::Fresh
        ));
        assert!(matches!(
            s.resume("nope", b"secret", "alice", b"n", 2, 1, 100),
            Resume::Fresh
        ));
        match s.resume("s1", b"secret", "alice", b"next", 2, 1, 100) {
            Resume::Resumed { previous, .. } => assert_eq!(previous, None),
            Resume::Fresh => panic!("must resume"),
        }
        // The old secret stopped working; the rotated one works, and takes over conn 2.
        assert!(matches!(
            s.resume("s1", b"secret", "alice", b"x", 3, 1, 100),
            Resume::Fresh
        ));
        match s.resume("s1", b"next", "alice", b"x", 3, 1, 100) {
            Resume::Resumed { previous, .. } => assert_eq!(previous, Some(2), "newest wins"),
            Resume::Fresh => panic!("must resume"),
        }
    }

    #[test]
    fn detached_sessions_expire_after_the_window_and_attached_ones_never() {
        let mut s = SessionStore::default();
        s.create("a".into(), b"x", state("u"), 1);
        s.create("b".into(), b"x", state("u"), 2);
        s.detach("a", 1, 0);
        s.detach("b", 99, 0); // a stale connection cannot detach it
        assert!(matches!(
            s.resume("a", b"x", "u", b"y", 3, 101, 100),
            Resume::Fresh
        ));
        assert_eq!(s.reap(101, 100), 1);
        assert_eq!(s.len(), 1);
        assert_eq!(s.attached(), 1);
    }

    #[test]
    fn positions_only_move_forward_and_only_for_the_holder() {
        let mut s = SessionStore::default();
        s.create("a".into(), b"x", state("u"), 1);
        let key = ("t".to_string(), 0);
        s.set_position("a", 1, key.clone(), 10);
        s.advance("a", 1, &key, 15);
        s.advance("a", 1, &key, 12);
        s.advance("a", 7, &key, 99);
        s.advance("a", 1, &("other".to_string(), 0), 5); // unknown: creates nothing
        let (st, conn) = s.take("a", b"x", "u", 0, 100).unwrap();
        assert_eq!(conn, Some(1));
        assert_eq!(st.positions.len(), 1);
        assert_eq!(st.positions[&key], 15);
    }

    /// The store against a model that scans every session, as the store did before it kept
    /// an index of the detached ones: random creates (past the limit, so evictions), detaches,
    /// resumes, takes and reaps; the same sessions, attached or not, after every step.
    #[test]
    fn the_detached_index_agrees_with_a_scan_of_every_session() {
        #[derive(Clone)]
        struct Modelled {
            secret: Vec<u8>,
            attached: Option<u64>,
            detached_at_ns: i64,
        }
        let mut rng = boltq_io::testutil::Rng::new(17);
        for round in 0..20 {
            let max = 1 + round % 8;
            let mut store = SessionStore::with_max(max);
            let mut model: HashMap<String, Modelled> = HashMap::new();
            let window_ns = 50;
            for step in 0..400i64 {
                let now = step * 3;
                let id = format!("s{}", rng.below(12));
                let conn = rng.below(4);
                match rng.below(5) {
                    0 => {
                        let secret = format!("k{step}").into_bytes();
                        store.create(id.clone(), &secret, state("u"), conn);
                        if model.len() >= max {
                            let oldest = model
                                .iter()
                                .filter(|(_, m)| m.attached.is_none())
                                .min_by_key(|(_, m)| m.detached_at_ns)
                                .map(|(id, _)| id.clone());
                            if let Some(oldest) = oldest {
                                model.remove(&oldest);
                            }
                        }
                        let m = Modelled {
                            secret,
                            attached: Some(conn),
                            detached_at_ns: 0,
                        };
                        model.insert(id, m);
                    }
                    1 => {
                        store.detach(&id, conn, now);
                        if let Some(m) = model.get_mut(&id).filter(|m| m.attached == Some(conn)) {
                            m.attached = None;
                            m.detached_at_ns = now;
                        }
                    }
                    2 => {
                        let Some(m) = model.get(&id).cloned() else {
                            continue;
                        };
                        let next = format!("r{step}").into_bytes();
                        let resumed =
                            store.resume(&id, &m.secret, "u", &next, conn, now, window_ns);
                        let expired = m.attached.is_none() && now - m.detached_at_ns > window_ns;
                        assert_eq!(matches!(resumed, Resume::Resumed { .. }), !expired);
                        if !expired {
                            let m = model.get_mut(&id).expect("present");
                            m.attached = Some(conn);
                            m.secret = next;
                        }
                    }
                    3 => {
                        let Some(m) = model.get(&id).cloned() else {
                            continue;
                        };
                        let taken = store.take(&id, &m.secret, "u", now, window_ns);
                        let expired = m.attached.is_none() && now - m.detached_at_ns > window_ns;
                        assert_eq!(taken.is_some(), !expired);
                        if !expired {
                            model.remove(&id);
                        }
                    }
                    _ => {
                        let before = model.len();
                        model.retain(|_, m| {
                            m.attached.is_some() || now - m.detached_at_ns <= window_ns
                        });
                        assert_eq!(store.reap(now, window_ns), before - model.len());
                    }
                }
                let mut ids: Vec<&String> = model.keys().collect();
                ids.sort();
                let mut have: Vec<&String> = store.sessions.keys().collect();
                have.sort();
                assert_eq!(have, ids, "round {round} step {step}");
                let attached = model.values().filter(|m| m.attached.is_some()).count();
                assert_eq!(store.attached(), attached, "round {round} step {step}");
            }
        }
    }
}
