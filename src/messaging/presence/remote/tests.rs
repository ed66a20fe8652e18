use super::super::{PresenceDirectory, PresenceState, Watcher};
use super::*;
use boltq_io::testutil::Rng;
use std::collections::BTreeMap;

const S: i64 = 1_000_000_000;
const TTL: i64 = 90 * S;

fn w(conn: u64) -> Watcher {
    Watcher { shard: 0, conn }
}

fn set(user: &str, device: &str, state: PresenceState) -> RemoteChange {
    RemoteChange::Set {
        user: user.into(),
        device: device.into(),
        state,
    }
}

fn unbound(user: &str, device: &str) -> RemoteChange {
    RemoteChange::Unbound {
        user: user.into(),
        device: device.into(),
    }
}

#[test]
fn a_device_on_another_node_makes_the_user_online_for_watchers_here() {
    let mut d = PresenceDirectory::new(TTL);
    d.watch("bob", w(7), 0).unwrap();
    let b = d.apply_remote(2, set("bob", "phone", PresenceState::Online), S);
    let b = b.unwrap().expect("a new device is a transition");
    assert_eq!(b.event.kind, EventKind::Bound);
    assert!(b.event.online);
    assert_eq!(b.event.device, "phone");
    assert_eq!(b.watchers, vec![w(7)]);
    assert!(d.online("bob"));
    // A local device comes and goes: bob stays online through the remote one.
    d.bind("bob", "laptop", 10, 2 * S).unwrap();
    let u = d.unbind("bob", "laptop", 10, 3 * S).unwrap();
    assert!(u.event.online, "the phone on node 2 is still bound");
    let snap = d.snapshot("bob", 3 * S);
    assert!(snap.online);
    assert_eq!(snap.state, PresenceState::Online);
    let gone = d.apply_remote(2, unbound("bob", "phone"), 4 * S);
    let gone = gone.unwrap().expect("a bound device left");
    assert_eq!(gone.event.kind, EventKind::Unbound);
    assert_eq!(gone.event.state, PresenceState::Offline);
    assert!(!gone.event.online);
    assert!(!d.online("bob"));
    d.check_invariants();
}

#[test]
fn a_repeated_report_refreshes_and_a_new_state_is_a_change() {
    let mut d = PresenceDirectory::new(TTL);
    d.watch("bob", w(7), 0).unwrap();
    d.apply_remote(2, set("bob", "phone", PresenceState::Online), 0)
        .unwrap();
    let again = d.apply_remote(2, set("bob", "phone", PresenceState::Online), S);
    assert_eq!(again, Ok(None));
    let away = d.apply_remote(2, set("bob", "phone", PresenceState::Away), S);
    let away = away.unwrap().expect("a state change");
    assert_eq!(away.event.kind, EventKind::StateChanged);
    assert_eq!(away.event.state, PresenceState::Away);
    assert_eq!(d.snapshot("bob", S).state, PresenceState::Away);
    // An unknown device's removal tells nobody.
    assert_eq!(d.apply_remote(3, unbound("bob", "phone"), S), Ok(None));
    assert_eq!(d.remote_sessions(), 1);
    d.check_invariants();
}

#[test]
fn one_device_id_on_two_nodes_is_two_bindings_until_each_goes() {
    let mut d = PresenceDirectory::new(TTL);
    d.bind("bob", "phone", 1, 0).unwrap();
    d.apply_remote(2, set("bob", "phone", PresenceState::Online), 0)
        .unwrap();
    d.apply_remote(3, set("bob", "phone", PresenceState::Away), 0)
        .unwrap();
    assert_eq!((d.sessions(), d.remote_sessions()), (1, 2));
    d.unbind("bob", "phone", 1, S).unwrap();
    d.apply_remote(2, unbound("bob", "phone"), S).unwrap();
    assert!(d.online("bob"), "node 3's binding is still there");
    d.apply_remote(3, unbound("bob", "phone"), S).unwrap();
    assert!(!d.online("bob"));
    assert_eq!(d.local_devices(), Vec::new());
    d.check_invariants();
}

#[test]
fn a_silent_node_is_forgotten_and_stale_reports_expire_after_the_ttl() {
    let mut d = PresenceDirectory::new(TTL);
    d.watch("bob", w(7), 0).unwrap();
    d.apply_remote(2, set("bob", "phone", PresenceState::Online), 0)
        .unwrap();
    d.apply_remote(2, set("carol", "phone", PresenceState::Online), 0)
        .unwrap();
    d.apply_remote(3, set("bob", "tablet", PresenceState::Online), 0)
        .unwrap();
    let forgotten = d.forget_node(2, S);
    let who: Vec<_> = forgotten.iter().map(|d| d.event.user.as_str()).collect();
    assert_eq!(who, ["bob", "carol"]);
    assert!(forgotten.iter().all(|d| d.event.kind == EventKind::Expired));
    assert_eq!(forgotten[0].watchers, vec![w(7)]);
    assert!(forgotten[0].event.online, "bob's tablet on node 3 remains");
    assert!(!d.online("carol"));
    // Node 3 refreshes the tablet at 60 s but then says nothing more.
    d.apply_remote(3, set("bob", "tablet", PresenceState::Online), 60 * S)
        .unwrap();
    assert!(
        d.sweep_remote(60 * S + TTL - 1).is_empty(),
        "refreshed in time"
    );
    let expired = d.sweep_remote(60 * S + TTL + 1);
    assert_eq!(expired.len(), 1);
    assert!(!expired[0].event.online);
    assert!(!d.online("bob"));
    d.check_invariants();
}

#[test]
fn past_the_per_user_limit_a_report_is_refused_and_nothing_changes() {
    let mut d = PresenceDirectory::new(TTL);
    for i in 0..REMOTE_DEVICES_PER_USER_MAX {
        d.apply_remote(2, set("bob", &format!("d{i}"), PresenceState::Online), 0)
            .unwrap();
    }
    let refused = d.apply_remote(3, set("bob", "one-more", PresenceState::Online), 0);
    assert_eq!(refused, Err(PresenceError::DevicesFull));
    assert_eq!(d.remote_sessions(), REMOTE_DEVICES_PER_USER_MAX);
    // A known device still refreshes past the limit.
    assert_eq!(
        d.apply_remote(2, set("bob", "d0", PresenceState::Online), S),
        Ok(None)
    );
    d.check_invariants();
}

#[test]
fn only_own_transitions_become_reports() {
    let mut d = PresenceDirectory::new(TTL);
    let bound = d.bind("bob", "phone", 1, 0).unwrap();
    assert_eq!(
        RemoteChange::of(&bound),
        Some(set("bob", "phone", PresenceState::Online))
    );
    let snap = d.watch("bob", w(7), 0).unwrap();
    assert_eq!(RemoteChange::of(&snap), None);
    let expired = d.sweep(TTL + 1);
    assert_eq!(
        RemoteChange::of(&expired[0]),
        Some(RemoteChange::Expired {
            user: "bob".into(),
            device: "phone".into()
        })
    );
}

/// Random local and remote operations against a model of who is bound where: the
/// directory's aggregate must always be the model's.
#[test]
fn random_reports_agree_with_a_model() {
    let mut rng = Rng::new(0x9e11);
    for _ in 0..200 {
        let mut d = PresenceDirectory::new(TTL);
        // (node, user, device) → (state, last seen); node 0 = this node.
        let mut model: BTreeMap<(u64, String, String), (PresenceState, i64)> = BTreeMap::new();
        let mut now = 0i64;
        for _ in 0..100 {
            now += rng.below(20) as i64 * S;
            let node = rng.below(3);
            let user = format!("u{}", rng.below(3));
            let device = format!("d{}", rng.below(2));
            let state = [
                PresenceState::Online,
                PresenceState::Away,
                PresenceState::Offline,
            ][rng.below(3) as usize];
            let key = (node, user.clone(), device.clone());
            match (rng.below(5), node) {
                (0 | 1, 0) => {
                    d.bind(&user, &device, 1, now).unwrap();
                    model.insert(key, (PresenceState::Online, now));
                }
                (0 | 1, _) => {
                    d.apply_remote(node, set(&user, &device, state), now)
                        .unwrap();
                    model.insert(key, (state, now));
                }
                (2, 0) => {
                    d.unbind(&user, &device, 1, now);
                    model.remove(&key);
                }
                (2, _) => {
                    d.apply_remote(node, unbound(&user, &device), now).unwrap();
                    model.remove(&key);
                }
                (3, 0) => {
                    d.sweep(now);
                    d.sweep_remote(now);
                    model.retain(|_, (_, seen)| *seen >= now - TTL);
                }
                (3, _) => {
                    d.forget_node(node, now);
                    model.retain(|(n, _, _), _| *n != node);
                }
                (_, 0) => {
                    d.heartbeat(&user, &device, 1, now);
                    if let Some((_, seen)) = model.get_mut(&key) {
                        *seen = now;
                    }
                }
                _ => {}
            }
            d.check_invariants();
            for u in ["u0", "u1", "u2"] {
                let bound: Vec<PresenceState> = model
                    .iter()
                    .filter(|((_, mu, _), _)| mu == u)
                    .map(|(_, (s, _))| *s)
                    .collect();
                let snap = d.snapshot(u, now);
                assert_eq!(snap.online, !bound.is_empty(), "{u} at {now}");
                let best = [PresenceState::Online, PresenceState::Away]
                    .into_iter()
                    .find(|s| bound.contains(s))
                    .unwrap_or(PresenceState::Offline);
                assert_eq!(snap.state, best, "{u} at {now}");
            }
        }
    }
}
