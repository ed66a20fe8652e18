//! Publishes of this shard whose log record is not yet durable, so a CONSUME waits for the
//! disk only when it hands out such a message.
//!
//! The trade-off: a CONSUME changes durable state too (the message becomes pending), but
//! losing that record in a crash only means the message is delivered again after the
//! restart, which at-least-once delivery allows (a consumer crashing before its ACK does the
//! same). What must never happen is a consumer acting on a message that a crash then
//! forgets, so a delivery waits for the *publish* records of the messages it carries, not
//! for its own. A consumer draining a backlog then answers without a disk round, and a
//! consumed message costs one durable round trip (the ACK) instead of two.
//!
//! Journal positions grow with every append on a shard, so the entries are kept in append
//! order and dropped from the front as the durable position passes them.

use crate::queue::message::{IdHashing, MessageId};
use std::collections::{HashMap, VecDeque};

/// Publishes tracked at once. A shard cannot have more unsynced records than its journal
/// backlog allows (64 MiB by default, ≥ 100 B per publish record); past this bound a
/// publish is not tracked and [`Unsynced::wait_for`] answers conservatively.
pub const PUBLISHES_UNSYNCED_MAX: usize = 1 << 20;

#[derive(Default)]
pub struct Unsynced {
    lsn_by_id: HashMap<MessageId, u64, IdHashing>,
    order: VecDeque<(u64, MessageId)>,
    /// Set when a publish could not be tracked (bound reached): until the durable position
    /// passes this, a delivery must wait as if its messages were all unsynced.
    untracked_upto: u64,
}

impl Unsynced {
    /// Records that `id` was published by the journal entry at `lsn` (not yet durable).
    pub fn note(&mut self, id: MessageId, lsn: u64) {
        if let Some(&(last, _)) = self.order.back() {
            assert!(
                lsn >= last,
                "journal positions go backwards: {lsn} < {last}"
            );
        }
        if self.order.len() >= PUBLISHES_UNSYNCED_MAX {
            self.untracked_upto = self.untracked_upto.max(lsn);
            return;
        }
        self.lsn_by_id.insert(id, lsn);
        self.order.push_back((lsn, id));
    }

    /// Forgets every publish the durable position `durable` covers.
    pub fn forget_durable(&mut self, durable: u64) {
        while let Some(&(lsn, id)) = self.order.front() {
            if lsn > durable {
                break;
            }
            self.order.pop_front();
            self.lsn_by_id.remove(&id);
        }
        if self.untracked_upto <= durable {
            self.untracked_upto = 0;
        }
        debug_assert_eq!(self.order.len(), self.lsn_by_id.len());
    }

    /// The journal position a delivery of `ids` must wait for, if any of them may not be
    /// durable yet (`forget_durable` must have run with the current durable position).
    pub fn wait_for(&self, ids: impl IntoIterator<Item = MessageId>) -> Option<u64> {
        let tracked = ids
            .into_iter()
            .filter_map(|id| self.lsn_by_id.get(&id).copied())
            .max();
        match (tracked, self.untracked_upto) {
            (t, 0) => t,
            (t, untracked) => Some(t.unwrap_or(0).max(untracked)),
        }
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::message::IdGenerator;
    use boltq_io::testutil::Rng;

    #[test]
    fn a_delivery_waits_for_its_newest_unsynced_publish_only() {
        let mut ids = IdGenerator::new([7; 7]);
        let (a, b, c) = (ids.next(0), ids.next(0), ids.next(0));
        let mut u = Unsynced::default();
        u.note(a, 10);
        u.note(b, 20);
        assert_eq!(u.wait_for([a]), Some(10));
        assert_eq!(u.wait_for([a, b]), Some(20));
        assert_eq!(u.wait_for([c]), None, "never tracked: durable long ago");
        u.forget_durable(15);
        assert_eq!(u.wait_for([a]), None);
        assert_eq!(u.wait_for([a, b]), Some(20));
        u.forget_durable(20);
        assert!(u.is_empty());
        assert_eq!(u.wait_for([b]), None);
    }

    /// Against a model: a delivery needs a wait exactly when one of its messages was
    /// published at a position the durable position has not reached.
    #[test]
    fn agrees_with_a_model_over_random_appends_and_syncs() {
        let mut rng = Rng::new(11);
        let mut ids = IdGenerator::new([3; 7]);
        let mut u = Unsynced::default();
        let mut published: Vec<(MessageId, u64)> = Vec::new();
        let (mut lsn, mut durable) = (0u64, 0u64);
        for _ in 0..20_000 {
            match rng.below(3) {
                0 => {
                    lsn += 1 + rng.below(300);
                    let id = ids.next(0);
                    u.note(id, lsn);
                    published.push((id, lsn));
                }
                1 => {
                    durable = durable.max(lsn.saturating_sub(rng.below(600)));
                    u.forget_durable(durable);
                }
                _ if !published.is_empty() => {
                    let pick: Vec<(MessageId, u64)> = (0..1 + rng.below(4))
                        .map(|_| published[rng.below(published.len() as u64) as usize])
                        .collect();
                    let want = pick.iter().map(|p| p.1).filter(|&l| l > durable).max();
                    assert_eq!(u.wait_for(pick.iter().map(|p| p.0)), want);
                }
                _ => {}
            }
        }
    }

    #[test]
    fn past_the_bound_every_delivery_waits_until_the_untracked_are_durable() {
        let mut ids = IdGenerator::new([5; 7]);
        let mut u = Unsynced::default();
        for i in 0..PUBLISHES_UNSYNCED_MAX as u64 {
            u.note(ids.next(0), i + 1);
        }
        let over = ids.next(0);
        u.note(over, PUBLISHES_UNSYNCED_MAX as u64 + 1);
        assert_eq!(u.len(), PUBLISHES_UNSYNCED_MAX);
        let old = ids.next(0);
        assert_eq!(
            u.wait_for([old]),
            Some(PUBLISHES_UNSYNCED_MAX as u64 + 1),
            "an untracked publish may be in any delivery"
        );
        u.forget_durable(PUBLISHES_UNSYNCED_MAX as u64 + 1);
        assert_eq!(u.wait_for([old, over]), None);
    }
}
