//! Pub/sub topics of one broker: live subscribers (pushed to) and durable registrations
//! (a backlog kept while the subscriber is offline, handed back on re-subscribe).
//!
//! Fixes of v1 (spec §12 items 7 and 8):
//! - a durable backlog fills only while its subscriber is offline, so a re-subscribe replays
//!   exactly what was missed, with no duplicates of live deliveries and no unbounded growth;
//! - a subscription ends when its connection closes (`disconnect`): a non-durable one is
//!   removed, a durable one goes offline and starts backlogging;
//! - re-subscribing the same `(topic, id)` replaces the previous live registration.
//!
//! A durable registration is sticky: a later non-durable subscribe with the same id keeps it
//! durable (v1 had no unsubscribe; dropping a backlog on a flag change would lose data).
//!
//! Durable delivery is at-least-once across disconnects (issue 13, failure 2). A copy pushed
//! to a durable registration's live connection stays in `unconfirmed`, numbered, until that
//! connection confirms the number (`confirm`: the server does so once the peer's TCP has
//! acknowledged the bytes). A disconnect, however abrupt, returns every unconfirmed copy to
//! the front of the backlog, in order, so a push written into a socket the peer had already
//! reset is handed out again on re-subscribe. Duplicates after a reset are possible; loss is
//! not.

use super::command::Effect;
use super::ConsumerRef;
use crate::queue::message::Message;
use imbl::{OrdMap, Vector};
use std::collections::{BTreeMap, BTreeSet};

/// Topics one broker tracks at once (a topic exists while it has a registration).
pub const TOPICS_MAX: usize = 65_536;
/// Registrations (live or durable) per topic.
pub const SUBSCRIBERS_PER_TOPIC_MAX: usize = 4_096;

#[derive(Clone, Debug, PartialEq)]
pub(super) struct Subscription {
    pub durable: bool,
    /// The connection receiving pushes; `None` only for an offline durable registration.
    pub live: Option<ConsumerRef>,
    /// Messages published while offline (and pushes a connection never confirmed), oldest
    /// first; empty while live.
    pub backlog: Vector<Message>,
    /// Durable only: copies pushed to the live connection and not yet confirmed received,
    /// oldest first; empty while offline.
    pub unconfirmed: Vector<Message>,
    /// Delivery number of the newest copy ever added to `unconfirmed`: the copies in it are
    /// numbered `delivery_seq - len + 1 ..= delivery_seq`. Counts up for the registration's
    /// whole life, across connections and restarts.
    pub delivery_seq: u64,
    /// Payload bytes in `backlog` and `unconfirmed` (derived: restored by summing).
    pub kept_bytes: u64,
}

/// What one durable registration may keep (backlog and unconfirmed pushes together).
#[derive(Clone, Copy, Debug)]
pub struct KeptLimits {
    pub messages: usize,
    pub bytes: u64,
}

impl Subscription {
    /// A registration with nothing kept yet.
    pub fn new(durable: bool, live: Option<ConsumerRef>) -> Subscription {
        Subscription {
            durable,
            live,
            backlog: Vector::new(),
            unconfirmed: Vector::new(),
            delivery_seq: 0,
            kept_bytes: 0,
        }
    }

    /// Whether `msg` would pass what the registration may keep.
    fn is_full_for(&self, msg: &Message, limits: KeptLimits) -> bool {
        self.kept() >= limits.messages || self.kept_bytes + msg.payload.len() as u64 > limits.bytes
    }

    /// Sets `kept_bytes` from what is kept (after a restore).
    pub fn count_kept_bytes(&mut self) {
        self.kept_bytes = self
            .backlog
            .iter()
            .chain(self.unconfirmed.iter())
            .map(|m| m.payload.len() as u64)
            .sum();
    }

    /// Adds a copy pushed to the live connection; returns its delivery number.
    fn track(&mut self, msg: Message) -> u64 {
        self.kept_bytes += msg.payload.len() as u64;
        self.unconfirmed.push_back(msg);
        self.delivery_seq += 1;
        self.delivery_seq
    }

    /// Copies kept for this registration (backlog and unconfirmed), bounded together.
    fn kept(&self) -> usize {
        self.backlog.len() + self.unconfirmed.len()
    }
}

/// What a subscribe hands the connection before any live push: the messages kept while it
/// was away, oldest first, and, for a durable registration, the delivery number of the first
/// (`catch_up[i]` is number `first_delivery + i`; the connection confirms by number).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CatchUp {
    pub messages: Vec<Message>,
    pub first_delivery: Option<u64>,
}

/// Where the copies of one publish went besides the pushes to live subscribers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Fanned {
    /// Copies a durable registration keeps until its subscriber has them (an offline one's
    /// backlog, or a live one's unconfirmed pushes): durable state changed.
    pub kept: u64,
    /// Copies refused because a durable registration already kept its capacity.
    pub dropped: u64,
}

/// Every registration by topic and id; persistent, so a snapshot copies it in O(1) (see
/// `queue.rs`).
pub(super) type Registrations = OrdMap<String, OrdMap<String, Subscription>>;

#[derive(Default)]
pub(super) struct PubSub {
    topics: Registrations,
    /// Live registrations per connection, so a disconnect touches only its own.
    by_consumer: BTreeMap<ConsumerRef, BTreeSet<(String, String)>>,
}

impl PubSub {
    /// Registers (or replaces) `(topic, sub_id)` as live on `consumer`; returns the catch-up:
    /// what was kept while it was offline, and what a previous connection had not confirmed,
    /// oldest first. For a durable registration the catch-up stays unconfirmed, numbered,
    /// until `consumer` confirms it. A re-subscribe from the connection that is already live
    /// changes nothing it was sent.
    pub fn subscribe(
        &mut self,
        topic: &str,
        sub_id: &str,
        durable: bool,
        consumer: ConsumerRef,
    ) -> Result<CatchUp, String> {
        self.check_room(topic, sub_id)?;
        let subs = self.topics.entry(topic.to_string()).or_default();
        let sub = subs
            .entry(sub_id.to_string())
            .or_insert_with(|| Subscription::new(durable, None));
        sub.durable |= durable;
        let previous = sub.live.replace(consumer);
        let mut catch_up = CatchUp::default();
        if previous != Some(consumer) {
            let mut kept = std::mem::take(&mut sub.unconfirmed);
            kept.append(std::mem::take(&mut sub.backlog));
            sub.kept_bytes = 0; // counted again below as the catch-up is tracked
            if sub.durable {
                catch_up.first_delivery = Some(sub.delivery_seq + 1);
                for msg in &kept {
                    sub.track(msg.clone());
                }
            }
            catch_up.messages = kept.into_iter().collect();
        } else if sub.durable {
            catch_up.first_delivery = Some(sub.delivery_seq + 1);
        }
        let key = (topic.to_string(), sub_id.to_string());
        if let Some(previous) = previous {
            unindex(&mut self.by_consumer, previous, &key);
        }
        self.by_consumer.entry(consumer).or_default().insert(key);
        Ok(catch_up)
    }

    /// `consumer` has every copy of `(topic, sub_id)` numbered up to `delivery`: they leave
    /// the registration. Returns how many did; 0 when the registration is not live on
    /// `consumer` any more (a confirm that crossed its disconnect or a re-subscribe elsewhere
    /// confirms nothing: those copies were handed out again).
    pub fn confirm(
        &mut self,
        consumer: ConsumerRef,
        topic: &str,
        sub_id: &str,
        delivery: u64,
    ) -> u64 {
        let Some(sub) = self.topics.get_mut(topic).and_then(|s| s.get_mut(sub_id)) else {
            return 0;
        };
        if sub.live != Some(consumer) {
            return 0;
        }
        let oldest = sub.delivery_seq + 1 - sub.unconfirmed.len() as u64;
        let count = (delivery + 1)
            .saturating_sub(oldest)
            .min(sub.unconfirmed.len() as u64);
        let confirmed: u64 = sub
            .unconfirmed
            .iter()
            .take(count as usize)
            .map(|m| m.payload.len() as u64)
            .sum();
        sub.kept_bytes -= confirmed;
        sub.unconfirmed = sub.unconfirmed.skip(count as usize);
        count
    }

    fn check_room(&self, topic: &str, sub_id: &str) -> Result<(), String> {
        match self.topics.get(topic) {
            None if self.topics.len() >= TOPICS_MAX => {
                Err(format!("too many topics (limit {TOPICS_MAX})"))
            }
            Some(subs) if !subs.contains_key(sub_id) && subs.len() >= SUBSCRIBERS_PER_TOPIC_MAX => {
                Err(format!(
                    "topic \"{topic}\" has too many subscribers (limit {SUBSCRIBERS_PER_TOPIC_MAX})"
                ))
            }
            _ => Ok(()),
        }
    }

    /// Pushes `msg` to every live subscriber of its topic and backlogs it for every offline
    /// durable one, in subscriber-id order; a durable one keeps a live push unconfirmed.
    /// A durable registration keeps at most `limits` (messages and payload bytes, backlog
    /// and unconfirmed together): past that the newest are refused and counted, so a
    /// catch-up is contiguous. See [`Fanned`].
    pub fn publish(
        &mut self,
        msg: &Message,
        limits: KeptLimits,
        effects: &mut Vec<Effect>,
    ) -> Fanned {
        let mut fanned = Fanned::default();
        let Some(subs) = self.topics.get_mut(&*msg.topic) else {
            return fanned;
        };
        let ids: Vec<String> = subs.keys().cloned().collect();
        for sub_id in ids {
            let sub = subs.get_mut(&sub_id).expect("listed above");
            if sub.durable && sub.is_full_for(msg, limits) {
                fanned.dropped += 1;
                continue;
            }
            match sub.live {
                Some(to) => {
                    let delivery = sub.durable.then(|| sub.track(msg.clone()));
                    fanned.kept += u64::from(delivery.is_some());
                    effects.push(Effect::Push {
                        to,
                        sub_id,
                        msg: msg.clone(),
                        delivery,
                    });
                }
                None => {
                    sub.kept_bytes += msg.payload.len() as u64;
                    sub.backlog.push_back(msg.clone());
                    fanned.kept += 1;
                }
            }
        }
        fanned
    }

    /// The connection closed: its non-durable subscriptions end, its durable ones go offline.
    pub fn disconnect(&mut self, consumer: ConsumerRef) {
        let Some(keys) = self.by_consumer.remove(&consumer) else {
            return;
        };
        for (topic, sub_id) in keys {
            let subs = self.topics.get_mut(&topic).expect("indexed topic exists");
            let sub = subs.get_mut(&sub_id).expect("indexed subscription exists");
            assert_eq!(
                sub.live,
                Some(consumer),
                "index out of step for {topic}/{sub_id}"
            );
            if sub.durable {
                sub.live = None;
                debug_assert!(sub.backlog.is_empty(), "live with a backlog");
                sub.backlog = std::mem::take(&mut sub.unconfirmed);
            } else {
                subs.remove(&sub_id);
                if subs.is_empty() {
                    self.topics.remove(&topic);
                }
            }
        }
    }

    /// True when `consumer` is the live connection of a durable registration: its
    /// disconnect starts a backlog.
    pub fn holds_durable(&self, consumer: ConsumerRef) -> bool {
        self.by_consumer.get(&consumer).is_some_and(|keys| {
            keys.iter()
                .any(|(topic, sub_id)| self.is_durable(topic, sub_id))
        })
    }

    /// True when any durable registration is live on a connection.
    pub fn has_live_durable(&self) -> bool {
        self.by_consumer.keys().any(|c| self.holds_durable(*c))
    }

    /// True when `(topic, sub_id)` is registered durable.
    pub fn is_durable(&self, topic: &str, sub_id: &str) -> bool {
        self.topics
            .get(topic)
            .and_then(|subs| subs.get(sub_id))
            .is_some_and(|s| s.durable)
    }

    /// Every connection is gone (process restart).
    pub fn disconnect_all(&mut self) {
        let consumers: Vec<ConsumerRef> = self.by_consumer.keys().copied().collect();
        for consumer in consumers {
            self.disconnect(consumer);
        }
        assert!(self.by_consumer.is_empty());
    }

    /// Restores a registration from a snapshot, checking what a snapshot can get wrong.
    pub fn restore_subscription(
        &mut self,
        topic: &str,
        sub_id: &str,
        sub: Subscription,
    ) -> Result<(), String> {
        if !sub.durable && (sub.live.is_none() || sub.kept() > 0) {
            return Err(format!(
                "non-durable subscription {topic}/{sub_id} must be live with nothing kept"
            ));
        }
        if sub.live.is_some() && !sub.backlog.is_empty() {
            return Err(format!(
                "durable subscription {topic}/{sub_id} is live but has a backlog"
            ));
        }
        if sub.live.is_none() && !sub.unconfirmed.is_empty() {
            return Err(format!(
                "durable subscription {topic}/{sub_id} is offline with unconfirmed pushes"
            ));
        }
        if (sub.unconfirmed.len() as u64) > sub.delivery_seq {
            return Err(format!(
                "durable subscription {topic}/{sub_id} has more unconfirmed pushes than numbers"
            ));
        }
        if let Some(consumer) = sub.live {
            self.by_consumer
                .entry(consumer)
                .or_default()
                .insert((topic.to_string(), sub_id.to_string()));
        }
        let subs = self.topics.entry(topic.to_string()).or_default();
        if subs.insert(sub_id.to_string(), sub).is_some() {
            return Err(format!(
                "durable subscription {topic}/{sub_id} appears twice"
            ));
        }
        Ok(())
    }

    /// `(topic, registrations)` for every topic, by name.
    pub fn topic_counts(&self) -> impl Iterator<Item = (&String, usize)> {
        self.topics.iter().map(|(t, subs)| (t, subs.len()))
    }

    /// `(topic, sub_id, subscription)` of every durable registration.
    /// True while any subscription is registered on a connection.
    pub fn has_live(&self) -> bool {
        !self.by_consumer.is_empty()
    }

    pub fn live_consumers(&self) -> impl Iterator<Item = ConsumerRef> + '_ {
        self.by_consumer.keys().copied()
    }

    /// Every registration, copied in O(1) (for `Broker::freeze`).
    pub fn registrations(&self) -> Registrations {
        self.topics.clone()
    }

    pub fn durable(&self) -> impl Iterator<Item = (&String, &String, &Subscription)> {
        self.topics.iter().flat_map(|(topic, subs)| {
            subs.iter()
                .filter(|(_, s)| s.durable)
                .map(move |(id, s)| (topic, id, s))
        })
    }

    /// Checks the consumer index against the registrations (tests and debugging).
    pub fn check_invariants(&self) {
        let mut live = 0;
        for (topic, subs) in &self.topics {
            assert!(!subs.is_empty(), "topic {topic} kept with no registrations");
            for (sub_id, sub) in subs {
                assert!(
                    sub.durable || sub.live.is_some(),
                    "offline non-durable {topic}/{sub_id}"
                );
                assert!(
                    sub.live.is_none() || sub.backlog.is_empty(),
                    "live with a backlog"
                );
                assert!(
                    sub.live.is_some() || sub.unconfirmed.is_empty(),
                    "offline with unconfirmed pushes"
                );
                assert!(
                    sub.durable || sub.unconfirmed.is_empty(),
                    "non-durable with unconfirmed pushes"
                );
                assert!(sub.unconfirmed.len() as u64 <= sub.delivery_seq);
                let mut counted = sub.clone();
                counted.count_kept_bytes();
                assert_eq!(
                    sub.kept_bytes, counted.kept_bytes,
                    "kept bytes of {topic}/{sub_id}"
                );
                if let Some(c) = sub.live {
                    live += 1;
                    let key = (topic.clone(), sub_id.clone());
                    assert!(self.by_consumer.get(&c).is_some_and(|s| s.contains(&key)));
                }
            }
        }
        assert_eq!(
            live,
            self.by_consumer.values().map(BTreeSet::len).sum::<usize>()
        );
    }
}

/// `(topic, sub_id, subscription)` of every registration in `topics`, by topic and id.
pub(super) fn all(
    topics: &Registrations,
) -> impl Iterator<Item = (&String, &String, &Subscription)> {
    topics
        .iter()
        .flat_map(|(topic, subs)| subs.iter().map(move |(id, s)| (topic, id, s)))
}

fn unindex(
    by_consumer: &mut BTreeMap<ConsumerRef, BTreeSet<(String, String)>>,
    consumer: ConsumerRef,
    key: &(String, String),
) {
    let keys = by_consumer
        .get_mut(&consumer)
        .expect("live consumer is indexed");
    assert!(
        keys.remove(key),
        "live registration missing from its consumer's index"
    );
    if keys.is_empty() {
        by_consumer.remove(&consumer);
    }
}
