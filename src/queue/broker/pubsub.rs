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

use super::command::Effect;
use super::ConsumerRef;
use crate::queue::message::Message;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Topics one broker tracks at once (a topic exists while it has a registration).
pub const TOPICS_MAX: usize = 65_536;
/// Registrations (live or durable) per topic.
pub const SUBSCRIBERS_PER_TOPIC_MAX: usize = 4_096;

#[derive(Clone, Debug, PartialEq)]
pub(super) struct Subscription {
    pub durable: bool,
    /// The connection receiving pushes; `None` only for an offline durable registration.
    pub live: Option<ConsumerRef>,
    /// Messages published while offline, oldest first; empty while live.
    pub backlog: VecDeque<Message>,
}

/// Where the copies of one publish went besides the pushes to live subscribers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Fanned {
    /// Copies kept in offline durable subscribers' backlogs: durable state changed.
    pub backlogged: u64,
    /// Copies refused because a backlog was full.
    pub dropped: u64,
}

#[derive(Default)]
pub(super) struct PubSub {
    topics: BTreeMap<String, BTreeMap<String, Subscription>>,
    /// Live registrations per connection, so a disconnect touches only its own.
    by_consumer: BTreeMap<ConsumerRef, BTreeSet<(String, String)>>,
}

impl PubSub {
    /// Registers (or replaces) `(topic, sub_id)` as live on `consumer`; returns the catch-up:
    /// the backlog accumulated while it was offline, oldest first.
    pub fn subscribe(
        &mut self,
        topic: &str,
        sub_id: &str,
        durable: bool,
        consumer: ConsumerRef,
    ) -> Result<Vec<Message>, String> {
        self.check_room(topic, sub_id)?;
        let subs = self.topics.entry(topic.to_string()).or_default();
        let sub = subs
            .entry(sub_id.to_string())
            .or_insert_with(|| Subscription {
                durable,
                live: None,
                backlog: VecDeque::new(),
            });
        sub.durable |= durable;
        let previous = sub.live.replace(consumer);
        let catch_up: Vec<Message> = sub.backlog.drain(..).collect();
        let key = (topic.to_string(), sub_id.to_string());
        if let Some(previous) = previous {
            unindex(&mut self.by_consumer, previous, &key);
        }
        self.by_consumer.entry(consumer).or_default().insert(key);
        Ok(catch_up)
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
    /// durable one, in subscriber-id order. Returns how many copies were not kept because an
    /// offline subscriber's backlog was at capacity (the newest are refused, so a catch-up
    /// is contiguous from the moment the subscriber went offline). See [`Fanned`].
    pub fn publish(
        &mut self,
        msg: &Message,
        backlog_capacity: usize,
        effects: &mut Vec<Effect>,
    ) -> Fanned {
        let mut fanned = Fanned::default();
        let Some(subs) = self.topics.get_mut(&msg.topic) else {
            return fanned;
        };
        for (sub_id, sub) in subs.iter_mut() {
            match sub.live {
                Some(to) => effects.push(Effect::Push {
                    to,
                    sub_id: sub_id.clone(),
                    msg: msg.clone(),
                }),
                None if sub.backlog.len() < backlog_capacity => {
                    sub.backlog.push_back(msg.clone());
                    fanned.backlogged += 1;
                }
                None => fanned.dropped += 1,
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

    /// Restores an offline durable registration with its backlog.
    pub fn restore_subscription(
        &mut self,
        topic: &str,
        sub_id: &str,
        durable: bool,
        backlog: VecDeque<Message>,
        live: Option<ConsumerRef>,
    ) -> Result<(), String> {
        if !durable && (live.is_none() || !backlog.is_empty()) {
            return Err(format!(
                "non-durable subscription {topic}/{sub_id} must be live with no backlog"
            ));
        }
        if live.is_some() && !backlog.is_empty() {
            return Err(format!(
                "durable subscription {topic}/{sub_id} is live but has a backlog"
            ));
        }
        if let Some(consumer) = live {
            self.by_consumer
                .entry(consumer)
                .or_default()
                .insert((topic.to_string(), sub_id.to_string()));
        }
        let subs = self.topics.entry(topic.to_string()).or_default();
        let sub = Subscription {
            durable,
            live,
            backlog,
        };
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

    /// Every registration that outlives a snapshot: durable ones and live ones.
    pub fn all(&self) -> impl Iterator<Item = (&String, &String, &Subscription)> {
        self.topics
            .iter()
            .flat_map(|(topic, subs)| subs.iter().map(move |(id, s)| (topic, id, s)))
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
