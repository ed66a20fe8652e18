//! Confirming durable pushes: a copy pushed to a durable registration stays kept by its
//! slot (unconfirmed, numbered) until the connection confirms its number, and a disconnect
//! hands every unconfirmed copy out again (`broker/pubsub.rs`). The connection confirms a
//! push once the peer's TCP has acknowledged the bytes that carried it, not when the write
//! returned: a write into a socket the peer has just reset succeeds, and its bytes are gone.
//!
//! Trade-off: a client that took the bytes into its kernel and then crashed before reading
//! them loses them (the peer's TCP acknowledged); an application-level ack would close
//! that, at the price of a v1 protocol change every client would need. Confirming costs one
//! `getsockopt` per connection and loop iteration while pushes wait, and one logged record
//! per registration per confirmation round.

use super::plane::Plane;
use crate::queue::broker::{Command, ConsumerRef};
use crate::queue::message::Message;
use crate::queue::protocol::reply;
use boltq_io::listener::Conn;
use futures_lite::AsyncWriteExt;
use std::collections::{BTreeMap, VecDeque};

/// How often a connection with unconfirmed pushes asks its socket what the peer has, when
/// nothing else wakes it.
pub const CONFIRM_POLL_MS: u64 = 10;

/// One durable push written (or about to be written) to a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracked {
    pub topic: String,
    pub sub_id: String,
    pub delivery: u64,
}

/// The durable pushes one connection wrote, waiting for the peer's acknowledgement.
#[derive(Default)]
pub struct Confirmations {
    /// (mark the write ended at, the pushes it carried), oldest first.
    awaiting: VecDeque<(u64, Vec<Tracked>)>,
    /// The socket stopped being established: nothing more is confirmed.
    broken: bool,
}

impl Confirmations {
    /// `batch` was just written to `conn` (the caller awaited the write): flush it and
    /// remember where it ends. On a socket no longer established nothing is remembered: the
    /// disconnect hands those pushes out again.
    pub async fn written(&mut self, conn: &mut Conn, batch: Vec<Tracked>) {
        if batch.is_empty() || self.broken {
            return;
        }
        if conn.flush().await.is_err() {
            self.broken = true;
            return;
        }
        match conn.written_mark() {
            Ok(Some(mark)) => self.awaiting.push_back((mark, batch)),
            Ok(None) => self.broken = true,
            Err(e) => {
                log::warn!(
                    "cannot tell what a subscriber received ({e}): durable pushes stay unconfirmed"
                );
                self.broken = true;
            }
        }
    }

    /// True while written pushes wait for their confirmation.
    pub fn waiting(&self) -> bool {
        !self.awaiting.is_empty() && !self.broken
    }

    /// Confirms, to their slots, every push `conn`'s peer has acknowledged.
    pub fn confirm(&mut self, conn: &Conn, plane: &Plane, me: ConsumerRef) {
        if !self.waiting() {
            return;
        }
        let acked = match conn.acked_bytes() {
            Ok(Some(acked)) => acked,
            Ok(None) | Err(_) => {
                self.broken = true;
                return;
            }
        };
        let newest = self.take_acknowledged(acked);
        if !newest.is_empty() {
            plane.confirm_deliveries(me, newest);
        }
    }

    /// Removes the writes that ended at or before `acked`; returns the newest delivery
    /// number each registration had among them.
    fn take_acknowledged(&mut self, acked: u64) -> BTreeMap<(String, String), u64> {
        let mut newest = BTreeMap::new();
        while self
            .awaiting
            .front()
            .is_some_and(|(mark, _)| *mark <= acked)
        {
            let (_, batch) = self.awaiting.pop_front().expect("checked above");
            for t in batch {
                let n = newest.entry((t.topic, t.sub_id)).or_insert(0);
                *n = t.delivery.max(*n);
            }
        }
        newest
    }
}

/// Appends a subscribe's catch-up to `frames` as push frames, and its durable copies (when
/// `first_delivery` says the registration is durable) to `tracked`, in order. A message too
/// large for a frame is left out of `frames`, loudly, but still tracked: it can never be
/// pushed, and holding its number back would hold back every later one.
pub fn encode_catch_up(
    topic: &str,
    sub_id: &str,
    catch_up: &[Message],
    first_delivery: Option<u64>,
    frames: &mut Vec<u8>,
    tracked: &mut Vec<Tracked>,
) {
    for (i, m) in catch_up.iter().enumerate() {
        if reply::push(m, sub_id, frames).is_err() {
            log::warn!("catch-up message {} too large for a frame", m.id);
        }
        if let Some(first) = first_delivery {
            tracked.push(Tracked {
                topic: topic.to_string(),
                sub_id: sub_id.to_string(),
                delivery: first + i as u64,
            });
        }
    }
}

impl Plane {
    /// Tells the owners of the registrations that `consumer` has their pushes up to the
    /// numbers given. One-way: a confirm that is lost or crosses a disconnect only means
    /// those pushes are handed out again (duplicates, never loss).
    pub fn confirm_deliveries(
        &self,
        consumer: ConsumerRef,
        newest: BTreeMap<(String, String), u64>,
    ) {
        for ((topic, sub_id), delivery) in newest {
            let slot = super::dispatch::slot_of_name(&topic);
            let cmd = Command::Confirm {
                consumer,
                topic,
                sub_id,
                delivery,
            };
            let owner = self.owner_of(slot);
            if owner == self.shard.id() {
                let _ = self.apply_local(slot, cmd);
            } else {
                self.send_without_loss(owner, super::mesh::QueueMsg::Confirm { slot, cmd });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(topic: &str, delivery: u64) -> Tracked {
        Tracked {
            topic: topic.into(),
            sub_id: "s".into(),
            delivery,
        }
    }

    #[test]
    fn only_writes_the_peer_acknowledged_are_confirmed_newest_number_per_registration() {
        let mut c = Confirmations::default();
        c.awaiting
            .push_back((100, vec![t("a", 1), t("b", 1), t("a", 2)]));
        c.awaiting.push_back((250, vec![t("a", 3)]));
        assert!(c.take_acknowledged(99).is_empty());
        let newest = c.take_acknowledged(100);
        assert_eq!(newest.len(), 2);
        assert_eq!(newest[&("a".to_string(), "s".to_string())], 2);
        assert_eq!(newest[&("b".to_string(), "s".to_string())], 1);
        assert!(c.waiting());
        assert!(c.take_acknowledged(249).is_empty());
        assert_eq!(c.take_acknowledged(1_000).len(), 1);
        assert!(!c.waiting());
    }
}
