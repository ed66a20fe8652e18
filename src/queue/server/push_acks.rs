//! Durable pushes the subscriber acknowledges itself: a SUBSCRIBE with `"ack": true` (a
//! BoltQ addition to v1's protocol) has its pushes confirmed to their slot only when the
//! client sends an ACK with the pushed message's id, not when the peer's TCP acknowledged
//! the bytes (`delivery.rs`). A subscriber that crashed with pushes read into its kernel but
//! not processed then gets them again on its next subscribe.
//!
//! The slot keeps a registration's unconfirmed copies as a numbered run and drops them from
//! the front, so a confirmation means "everything up to number n". Clients acknowledge
//! pushes one by one and maybe out of order, so each registration's pushes wait here in
//! order, each marked once acknowledged, and the slot is told the end of the acknowledged
//! front only. A push acknowledged behind one that is not comes again after a reconnect:
//! duplicates, never loss.
//!
//! Bound: [`PUSHES_AWAITING_ACK_MAX`] per connection; past it the connection is closed (its
//! pushes go back to the backlog), so a client that never acknowledges costs bounded
//! memory here and is told so by its subscription ending.

use super::delivery::Tracked;
use crate::queue::message::{IdHashing, MessageId};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// Pushes one connection may hold unacknowledged in ack mode, over all its registrations.
pub const PUSHES_AWAITING_ACK_MAX: usize = 65_536;

/// A registration: (topic, subscriber id).
type Registration = (String, String);

/// One push waiting for the client's ACK.
#[derive(Debug)]
struct Awaiting {
    delivery: u64,
    acked: bool,
}

#[derive(Default)]
pub struct PushAcks {
    /// Registrations of this connection whose subscriber acknowledges its pushes: subscriber
    /// ids by topic.
    acking: BTreeMap<String, BTreeSet<String>>,
    /// Per registration, pushes not yet confirmed to the slot, in delivery order.
    awaiting: BTreeMap<Registration, VecDeque<Awaiting>>,
    /// Where each awaited id sits: registration and delivery number (a message pushed to
    /// two registrations of this connection sits in both). Found by number, an ACK costs a
    /// binary search whatever order the client acknowledges in.
    by_id: HashMap<MessageId, Vec<(Registration, u64)>, IdHashing>,
    len: usize,
    /// The acknowledged front of each registration not yet sent to its slot.
    confirmable: BTreeMap<Registration, u64>,
}

impl PushAcks {
    /// The latest SUBSCRIBE of `(topic, sub_id)` on this connection asked for acks or not.
    pub fn set_mode(&mut self, topic: &str, sub_id: &str, acking: bool) {
        if acking {
            self.acking
                .entry(topic.to_string())
                .or_default()
                .insert(sub_id.to_string());
        } else if let Some(ids) = self.acking.get_mut(topic) {
            ids.remove(sub_id);
            if ids.is_empty() {
                self.acking.remove(topic);
            }
        }
    }

    /// Whether `t`'s registration waits for the client's acks.
    pub fn takes(&self, t: &Tracked) -> bool {
        self.acking
            .get(&t.topic)
            .is_some_and(|ids| ids.contains(&t.sub_id))
    }

    /// Holds a written push until the client acknowledges it. One that could not be sent
    /// (too large for a frame) counts as acknowledged: the client will never see it.
    pub fn track(&mut self, t: Tracked) {
        let key = (t.topic, t.sub_id);
        let queue = self.awaiting.entry(key.clone()).or_default();
        if let Some(last) = queue.back() {
            assert!(
                t.delivery > last.delivery,
                "push numbers of {key:?} go backwards: {} after {}",
                t.delivery,
                last.delivery
            );
        }
        queue.push_back(Awaiting {
            delivery: t.delivery,
            acked: !t.sent,
        });
        self.len += 1;
        if t.sent {
            self.by_id.entry(t.id).or_default().push((key, t.delivery));
        } else {
            self.advance(&key);
        }
    }

    /// The client acknowledged the push `id`; false when no push of this connection awaits
    /// that id (then the ACK is for a work-queue message).
    pub fn ack(&mut self, id: MessageId) -> bool {
        let Some(keys) = self.by_id.remove(&id) else {
            return false;
        };
        for (key, delivery) in keys {
            let queue = self.awaiting.get_mut(&key).expect("indexed registration");
            let at = queue
                .binary_search_by_key(&delivery, |a| a.delivery)
                .expect("indexed pushes wait until acknowledged");
            queue[at].acked = true;
            self.advance(&key);
        }
        true
    }

    /// Drops the acknowledged front of `key`'s pushes and notes its end for the slot.
    fn advance(&mut self, key: &Registration) {
        let queue = self.awaiting.get_mut(key).expect("tracked registration");
        let mut newest = None;
        while queue.front().is_some_and(|a| a.acked) {
            let a = queue.pop_front().expect("checked above");
            newest = Some(a.delivery);
            self.len -= 1;
        }
        if queue.is_empty() {
            self.awaiting.remove(key);
        }
        if let Some(n) = newest {
            self.confirmable.insert(key.clone(), n);
        }
    }

    /// The acknowledged fronts gathered since the last call, newest number per
    /// registration: what to confirm to the slots.
    pub fn take_confirmable(&mut self) -> BTreeMap<Registration, u64> {
        std::mem::take(&mut self.confirmable)
    }

    /// Pushes held for acks; past [`PUSHES_AWAITING_ACK_MAX`] the connection must close.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn over_limit(&self) -> bool {
        self.len > PUSHES_AWAITING_ACK_MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> MessageId {
        let mut ids = crate::queue::message::IdGenerator::new([n as u8; 7]);
        ids.next(0)
    }

    fn push(topic: &str, delivery: u64, n: u64) -> Tracked {
        Tracked {
            topic: topic.into(),
            sub_id: "s".into(),
            delivery,
            id: id(n),
            sent: true,
        }
    }

    fn key(topic: &str) -> Registration {
        (topic.to_string(), "s".to_string())
    }

    #[test]
    fn only_the_acknowledged_front_is_confirmed() {
        let mut a = PushAcks::default();
        for (delivery, n) in [(5, 1), (6, 2), (7, 3), (8, 4)] {
            a.track(push("news", delivery, n));
        }
        assert!(a.ack(id(2)));
        assert!(a.ack(id(4)));
        assert!(
            a.take_confirmable().is_empty(),
            "5 is not acknowledged: nothing can be confirmed"
        );
        assert!(a.ack(id(1)));
        assert_eq!(a.take_confirmable(), BTreeMap::from([(key("news"), 6)]));
        assert_eq!(a.len(), 2);
        assert!(a.ack(id(3)));
        assert_eq!(a.take_confirmable(), BTreeMap::from([(key("news"), 8)]));
        assert_eq!(a.len(), 0);
        assert!(!a.ack(id(3)), "acknowledged twice: not a push any more");
        assert!(!a.ack(id(9)), "never pushed here");
    }

    #[test]
    fn a_message_pushed_to_two_registrations_is_acknowledged_in_both() {
        let mut a = PushAcks::default();
        a.track(push("news", 1, 7));
        a.track(Tracked {
            sub_id: "other".into(),
            ..push("news", 40, 7)
        });
        assert!(a.ack(id(7)));
        let confirmable = a.take_confirmable();
        assert_eq!(confirmable.len(), 2);
        assert_eq!(confirmable[&key("news")], 1);
        assert_eq!(confirmable[&("news".to_string(), "other".to_string())], 40);
    }

    #[test]
    fn a_push_that_could_not_be_sent_does_not_hold_back_the_others() {
        let mut a = PushAcks::default();
        a.track(Tracked {
            sent: false,
            ..push("news", 1, 1)
        });
        assert_eq!(a.take_confirmable(), BTreeMap::from([(key("news"), 1)]));
        a.track(push("news", 2, 2));
        a.track(Tracked {
            sent: false,
            ..push("news", 3, 3)
        });
        assert!(a.take_confirmable().is_empty());
        assert!(a.ack(id(2)));
        assert_eq!(a.take_confirmable(), BTreeMap::from([(key("news"), 3)]));
    }

    #[test]
    fn the_mode_follows_the_latest_subscribe_and_the_limit_counts_every_registration() {
        let mut a = PushAcks::default();
        assert!(!a.takes(&push("news", 1, 1)));
        a.set_mode("news", "s", true);
        assert!(a.takes(&push("news", 1, 1)));
        assert!(!a.takes(&push("sport", 1, 1)));
        a.set_mode("news", "s", false);
        assert!(!a.takes(&push("news", 1, 1)));
        for n in 0..=PUSHES_AWAITING_ACK_MAX as u64 {
            let topic = if n % 2 == 0 { "news" } else { "sport" };
            a.track(push(topic, n + 1, n % 200));
        }
        assert!(a.over_limit());
    }
}
