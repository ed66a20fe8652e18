use super::*;
use boltq_io::testutil::Rng;

const TTL: i64 = 600_000_000_000;

fn key(sender: &str, conv: &str, id: &str) -> DedupKey {
    DedupKey::new(sender, conv, id).unwrap()
}

fn coords(seq: u64) -> Coordinates {
    Coordinates {
        message_id: format!("{seq:032x}"),
        topic: "chat.direct.alice:bob".into(),
        partition: 6,
        seq,
        timestamp_ns: 1_000 + seq as i64,
    }
}

#[test]
fn first_claim_succeeds() {
    let mut t = DedupTable::new(TTL, 10);
    assert_eq!(t.claim(&key("alice", "a:b", "m1"), 0), Claim::Fresh);
    assert_eq!(t.len(), 1);
}

#[test]
fn retry_returns_original_result() {
    let mut t = DedupTable::new(TTL, 10);
    let k = key("alice", "a:b", "m1");
    assert_eq!(t.claim(&k, 0), Claim::Fresh);
    assert!(t.complete(&k, coords(42), 5));
    assert_eq!(t.claim(&k, 10), Claim::Duplicate(coords(42)));
    assert_eq!(t.claim(&k, 11), Claim::Duplicate(coords(42)));
}

#[test]
fn in_flight_retry_is_distinguishable() {
    let mut t = DedupTable::new(TTL, 10);
    let k = key("alice", "a:b", "m1");
    assert_eq!(t.claim(&k, 0), Claim::Fresh);
    assert_eq!(t.claim(&k, 1), Claim::InFlight);
}

#[test]
fn abandon_releases_claim() {
    let mut t = DedupTable::new(TTL, 10);
    let k = key("alice", "a:b", "m1");
    assert_eq!(t.claim(&k, 0), Claim::Fresh);
    assert!(t.release(&k));
    assert!(t.is_empty());
    assert_eq!(t.claim(&k, 1), Claim::Fresh);
}

#[test]
fn abandon_does_not_drop_completed_entry() {
    let mut t = DedupTable::new(TTL, 10);
    let k = key("alice", "a:b", "m1");
    assert_eq!(t.claim(&k, 0), Claim::Fresh);
    t.complete(&k, coords(1), 1);
    assert!(!t.release(&k));
    assert_eq!(t.claim(&k, 2), Claim::Duplicate(coords(1)));
    assert!(!t.release(&key("nobody", "x", "y")));
}

#[test]
fn sender_scoping() {
    let mut t = DedupTable::new(TTL, 10);
    let a = key("alice", "a:b", "m1");
    assert_eq!(t.claim(&a, 0), Claim::Fresh);
    t.complete(&a, coords(1), 0);
    assert_eq!(t.claim(&key("bob", "a:b", "m1"), 1), Claim::Fresh);
}

#[test]
fn conversation_scoping_d22() {
    let mut t = DedupTable::new(TTL, 10);
    let a = key("alice", "a:b", "m1");
    assert_eq!(t.claim(&a, 0), Claim::Fresh);
    t.complete(&a, coords(1), 0);
    // Same sender, same client id, another conversation: a new message.
    assert_eq!(t.claim(&key("alice", "a:c", "m1"), 1), Claim::Fresh);
}

#[test]
fn expiry() {
    let mut t = DedupTable::new(TTL, 10);
    let k = key("alice", "a:b", "m1");
    assert_eq!(t.claim(&k, 0), Claim::Fresh);
    t.complete(&k, coords(1), 100);
    // Completion refreshed the window to 100 + TTL.
    assert_eq!(t.claim(&k, TTL + 99), Claim::Duplicate(coords(1)));
    assert_eq!(t.lookup(&k, TTL + 99), Some(&coords(1)));
    assert_eq!(t.lookup(&k, TTL + 100), None);
    assert_eq!(t.claim(&k, TTL + 100), Claim::Fresh);
    // An in-flight claim expires TTL after the claim.
    let j = key("alice", "a:b", "m2");
    assert_eq!(t.claim(&j, 0), Claim::Fresh);
    assert_eq!(t.claim(&j, TTL - 1), Claim::InFlight);
    assert_eq!(t.claim(&j, TTL), Claim::Fresh);
}

#[test]
fn sweep_removes_only_expired_entries() {
    let mut t = DedupTable::new(TTL, 10);
    let (a, b, c) = (key("u", "c", "a"), key("u", "c", "b"), key("u", "c", "c"));
    let _ = t.claim(&a, 0);
    let _ = t.claim(&b, 10);
    t.complete(&b, coords(2), 20);
    let _ = t.claim(&c, 30);
    assert_eq!(t.next_expiry_ns(), Some(TTL));
    assert_eq!(t.sweep(TTL + 19), 1); // a
    assert_eq!(t.next_expiry_ns(), Some(TTL + 20));
    assert_eq!(t.sweep(TTL + 20), 1); // b
    assert_eq!(t.len(), 1);
    assert_eq!(t.claim(&c, TTL + 20), Claim::InFlight);
    assert_eq!(t.sweep(TTL + 30), 1);
    assert!(t.is_empty());
    assert_eq!(t.next_expiry_ns(), None);
}

#[test]
fn sweep_is_batched() {
    let mut t = DedupTable::new(TTL, DEDUP_SWEEP_BATCH_MAX + 10);
    for i in 0..DEDUP_SWEEP_BATCH_MAX + 10 {
        let _ = t.claim(&key("u", "c", &i.to_string()), 0);
    }
    assert_eq!(t.sweep(TTL), DEDUP_SWEEP_BATCH_MAX);
    assert!(t.next_expiry_ns().unwrap() <= TTL);
    assert_eq!(t.sweep(TTL), 10);
    assert!(t.is_empty());
}

#[test]
fn complete_after_sweep_still_deduplicates() {
    let mut t = DedupTable::new(TTL, 10);
    let k = key("alice", "a:b", "m1");
    assert_eq!(t.claim(&k, 0), Claim::Fresh);
    assert_eq!(t.sweep(TTL), 1);
    assert!(t.is_empty());
    assert!(t.complete(&k, coords(7), TTL + 1));
    assert_eq!(t.claim(&k, TTL + 2), Claim::Duplicate(coords(7)));
}

#[test]
fn concurrent_claims_elect_exactly_one_winner() {
    let mut t = DedupTable::new(TTL, 10);
    let k = key("alice", "a:b", "m1");
    let outcomes: Vec<Claim> = (0..200).map(|i| t.claim(&k, i)).collect();
    assert_eq!(outcomes.iter().filter(|c| **c == Claim::Fresh).count(), 1);
    assert_eq!(outcomes[0], Claim::Fresh);
    assert!(outcomes[1..].iter().all(|c| *c == Claim::InFlight));
}

#[test]
fn concurrent_distinct_keys() {
    let mut t = DedupTable::new(TTL, 1000);
    for i in 0..200 {
        assert_eq!(t.claim(&key("u", "c", &i.to_string()), 0), Claim::Fresh);
    }
    assert_eq!(t.len(), 200);
}

#[test]
fn lookup_only_returns_completed() {
    let mut t = DedupTable::new(TTL, 10);
    let k = key("alice", "a:b", "m1");
    assert_eq!(t.lookup(&k, 0), None);
    let _ = t.claim(&k, 0);
    assert_eq!(t.lookup(&k, 1), None);
    t.complete(&k, coords(3), 2);
    assert_eq!(t.lookup(&k, 3), Some(&coords(3)));
}

#[test]
fn cap_is_hard_and_evicts_oldest_completed_d32() {
    let mut t = DedupTable::new(TTL, 3);
    let ks: Vec<DedupKey> = (0..5).map(|i| key("u", "c", &i.to_string())).collect();
    for (i, k) in ks[..3].iter().enumerate() {
        assert_eq!(t.claim(k, i as i64), Claim::Fresh);
    }
    // All in flight: nothing may be evicted.
    assert_eq!(t.claim(&ks[3], 3), Claim::Full);
    assert_eq!(t.len(), 3);
    // Complete 1 then 0: 1 is the oldest completed.
    t.complete(&ks[1], coords(1), 4);
    t.complete(&ks[0], coords(0), 5);
    assert_eq!(t.claim(&ks[3], 6), Claim::Fresh);
    assert_eq!(t.len(), 3);
    assert_eq!(t.evicted_total(), 1);
    assert_eq!(t.lookup(&ks[1], 6), None);
    assert_eq!(t.lookup(&ks[0], 6), Some(&coords(0)));
    assert_eq!(t.claim(&ks[4], 7), Claim::Fresh);
    assert_eq!(t.lookup(&ks[0], 7), None);
    assert_eq!(t.claim(&ks[1], 8), Claim::Full);
    assert_eq!(t.evicted_total(), 2);
}

#[test]
fn expired_claims_make_room_before_completed_entries() {
    let mut t = DedupTable::new(100, 2);
    let (a, b, c) = (key("u", "c", "a"), key("u", "c", "b"), key("u", "c", "c"));
    let _ = t.claim(&a, 0);
    let _ = t.claim(&b, 50);
    t.complete(&b, coords(2), 60);
    assert_eq!(t.claim(&c, 100), Claim::Fresh);
    assert_eq!(
        t.evicted_total(),
        0,
        "the expired claim went, not a completed entry"
    );
    assert_eq!(t.lookup(&b, 100), Some(&coords(2)));
}

#[test]
fn complete_of_a_swept_claim_respects_the_cap() {
    let mut t = DedupTable::new(100, 1);
    let (a, b) = (key("u", "c", "a"), key("u", "c", "b"));
    let _ = t.claim(&a, 0);
    let _ = t.sweep(100);
    let _ = t.claim(&b, 100);
    assert!(!t.complete(&a, coords(1), 101), "table full of live claims");
    assert_eq!(t.len(), 1);
    assert!(t.complete(&b, coords(2), 102));
    assert!(
        t.complete(&a, coords(1), 103),
        "evicts b, the oldest completed"
    );
    assert_eq!(t.lookup(&a, 104), Some(&coords(1)));
    assert_eq!(t.lookup(&b, 104), None);
}

#[test]
fn defaults_and_limits() {
    let t = DedupTable::new(0, 0);
    assert_eq!(t.ttl_ns(), DEDUP_TTL_DEFAULT_NS);
    assert_eq!(t.entries_max(), DEDUP_ENTRIES_DEFAULT_MAX);
    assert_eq!(
        DedupTable::new(-5, usize::MAX).entries_max(),
        DEDUP_ENTRIES_LIMIT_MAX
    );
    // The window never wraps at the end of time.
    let mut t = DedupTable::new(TTL, 1);
    let k = key("u", "c", "m");
    assert_eq!(t.claim(&k, i64::MAX - 1), Claim::Fresh);
    assert_eq!(t.claim(&k, i64::MAX - 1), Claim::InFlight);
}

#[test]
fn key_validation() {
    assert_eq!(
        DedupKey::new("u", "c", ""),
        Err(DedupKeyError::EmptyClientMsgId)
    );
    let long = "x".repeat(CLIENT_MSG_ID_BYTES_MAX + 1);
    let e = DedupKey::new("u", "c", &long).unwrap_err();
    assert!(e.to_string().contains("client_msg_id is 257 bytes"), "{e}");
    assert!(DedupKey::new(&"s".repeat(SENDER_BYTES_MAX + 1), "c", "m").is_err());
    assert!(DedupKey::new("u", &"c".repeat(CONVERSATION_BYTES_MAX + 1), "m").is_err());
    let k = DedupKey::new(&"s".repeat(128), &"c".repeat(200), &"m".repeat(256)).unwrap();
    assert!(k.within_limits());
    let unbounded = DedupKey {
        client_msg_id: long,
        ..k
    };
    assert!(!unbounded.within_limits());
}

/// A naive model: a list of (key, completed coordinates or None, expiry, serial) with
/// linear scans, following the rules in the module docs.
#[derive(Default)]
struct Model {
    entries: Vec<(DedupKey, Option<Coordinates>, i64, u64)>,
    serial: u64,
    cap: usize,
    ttl: i64,
}

impl Model {
    fn position(&self, k: &DedupKey) -> Option<usize> {
        self.entries.iter().position(|e| &e.0 == k)
    }

    fn push(&mut self, k: &DedupKey, c: Option<Coordinates>, now: i64) {
        self.entries
            .push((k.clone(), c, now + self.ttl, self.serial));
        self.serial += 1;
    }

    fn make_room(&mut self, now: i64) -> bool {
        if self.entries.len() < self.cap {
            return true;
        }
        let oldest = |completed: bool, entries: &[(DedupKey, Option<Coordinates>, i64, u64)]| {
            entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.1.is_some() == completed)
                .min_by_key(|(_, e)| (e.2, e.3))
                .map(|(i, e)| (i, e.2))
        };
        if let Some((i, exp)) = oldest(false, &self.entries) {
            if exp <= now {
                self.entries.remove(i);
                return true;
            }
        }
        if let Some((i, _)) = oldest(true, &self.entries) {
            self.entries.remove(i);
            return true;
        }
        false
    }

    fn claim(&mut self, k: &DedupKey, now: i64) -> Claim {
        if let Some(i) = self.position(k) {
            let e = &self.entries[i];
            if e.2 > now {
                return match &e.1 {
                    None => Claim::InFlight,
                    Some(c) => Claim::Duplicate(c.clone()),
                };
            }
            self.entries.remove(i);
        }
        if !self.make_room(now) {
            return Claim::Full;
        }
        self.push(k, None, now);
        Claim::Fresh
    }

    fn complete(&mut self, k: &DedupKey, c: Coordinates, now: i64) -> bool {
        match self.position(k) {
            Some(i) => {
                self.entries.remove(i);
            }
            None => {
                if !self.make_room(now) {
                    return false;
                }
            }
        }
        self.push(k, Some(c), now);
        true
    }

    fn release(&mut self, k: &DedupKey) -> bool {
        match self.position(k) {
            Some(i) if self.entries[i].1.is_none() => {
                self.entries.remove(i);
                true
            }
            _ => false,
        }
    }

    fn sweep(&mut self, now: i64) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| e.2 > now);
        before - self.entries.len()
    }
}

#[test]
fn model_based() {
    for seed in 1..=40u64 {
        let mut rng = Rng::new(seed);
        let cap = 1 + rng.below(8) as usize;
        let ttl = 1 + rng.below(50) as i64;
        let mut t = DedupTable::new(ttl, cap);
        let mut m = Model {
            cap,
            ttl,
            ..Default::default()
        };
        let keys: Vec<DedupKey> = (0..12)
            .map(|i| {
                key(
                    ["a", "b"][i % 2],
                    ["c", "d"][i / 2 % 2],
                    &(i / 4).to_string(),
                )
            })
            .collect();
        let mut now = 0i64;
        for step in 0..2000 {
            let k = &keys[rng.below(keys.len() as u64) as usize];
            let ctx = format!("seed {seed} step {step}");
            match rng.below(10) {
                0..=3 => assert_eq!(t.claim(k, now), m.claim(k, now), "{ctx}"),
                4..=5 => {
                    let c = coords(step);
                    assert_eq!(
                        t.complete(k, c.clone(), now),
                        m.complete(k, c, now),
                        "{ctx}"
                    );
                }
                6 => assert_eq!(t.release(k), m.release(k), "{ctx}"),
                7 => assert_eq!(t.sweep(now), m.sweep(now), "{ctx}"),
                _ => now += rng.below(ttl as u64 / 2 + 2) as i64,
            }
            assert_eq!(t.len(), m.entries.len(), "{ctx}");
            assert!(t.len() <= cap, "{ctx}");
            for k in &keys {
                let expect = m
                    .position(k)
                    .and_then(|i| {
                        let e = &m.entries[i];
                        (e.2 > now).then_some(e.1.as_ref()).flatten()
                    })
                    .cloned();
                assert_eq!(t.lookup(k, now).cloned(), expect, "{ctx}");
            }
        }
    }
}
