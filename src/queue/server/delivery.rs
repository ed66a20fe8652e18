//! Confirming durable pushes: a copy pushed to a durable registration stays kept by its
//! slot (unconfirmed, numbered) until the connection confirms its number, and a disconnect
//! hands every unconfirmed copy out again (`broker/pubsub.rs`). The connection confirms a
//! push once the peer's TCP has acknowledged the bytes that carried it, not when the write
//! returned: a write into a socket the peer has just reset succeeds, and its bytes are gone.
//!
//! Trade-off: a client that took the bytes into its kernel and then crashed before reading
//! them loses them (the peer's TCP acknowledged). v1 clients have no way to say more; a
//! client that subscribes with `"ack": true` confirms by its own ACKs instead
//! (`push_acks.rs`). Confirming costs one `getsockopt` per connection and loop iteration
//! while pushes wait, and one logged record per registration per confirmation round.

use super::plane::Plane;
use super::push_acks::PushAcks;
use crate::queue::broker::{Command, ConsumerRef};
use crate::queue::message::{Message, MessageId};
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
    /// The pushed message, which a subscriber in ack mode acknowledges by.
    pub id: MessageId,
    /// False when the push could not be encoded (too large for a frame): never sent.
    pub sent: bool,
}

/// The durable pushes one connection wrote, waiting for the peer's acknowledgement.
#[derive(Default)]
pub struct Confirmations {
    /// (mark the write ended at, the pushes it carried), oldest first.
    awaiting: VecDeque<(u64, Vec<Tracked>)>,
    /// The socket stopped being established: nothing more is confirmed.
    broken: bool,
    /// Pushes of registrations whose subscriber acknowledges them itself: confirmed by its
    /// ACKs, not by TCP.
    pub acks: PushAcks,
}

impl Confirmations {
    /// `batch` was just written to `conn` (the caller awaited the write): flush it and
    /// remember where it ends. On a socket no longer established nothing is remembered: the
    /// disconnect hands those pushes out again.
    pub async fn written(&mut self, conn: &mut Conn, mut batch: Vec<Tracked>) {
        if batch.is_empty() || self.broken {
            return;
        }
        if batch.iter().any(|t| self.acks.takes(t)) {
            let (acked_by_client, by_tcp): (Vec<Tracked>, Vec<Tracked>) =
                batch.into_iter().partition(|t| self.acks.takes(t));
            for t in acked_by_client {
                self.acks.track(t);
            }
            batch = by_tcp;
            if batch.is_empty() {
                return;
            }
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

    /// Confirms, to their slots, every push `conn`'s peer has acknowledged, and the
    /// acknowledged front of the pushes its client acknowledges itself.
    pub fn confirm(&mut self, conn: &Conn, plane: &Plane, me: ConsumerRef) {
        let acked = self.acks.take_confirmable();
        if !acked.is_empty() {
            plane.confirm_deliveries(me, acked);
        }
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

/// Encoded catch-up bytes a connection holds at once: a durable backlog may hold
/// `queue.durable_backlog_bytes_max` (256 MiB by default), and encoding it whole would
/// double that in memory for every subscriber catching up at the same time.
pub const CATCH_UP_CHUNK_BYTES: usize = 1 << 20;

/// A durable subscribe's catch-up waiting to be written, encoded a chunk at a time
/// ([`CatchUp::encode_chunk`]). The messages share their payloads with the broker's
/// copies (reference-counted), so holding them costs little; their encoding is the copy.
pub struct CatchUp {
    topic: String,
    sub_id: String,
    messages: std::collections::VecDeque<Message>,
    /// The delivery number of the front message when the registration is durable.
    next_delivery: Option<u64>,
}

impl CatchUp {
    pub fn new(
        topic: &str,
        sub_id: &str,
        messages: Vec<Message>,
        first_delivery: Option<u64>,
    ) -> CatchUp {
        CatchUp {
            topic: topic.to_string(),
            sub_id: sub_id.to_string(),
            messages: messages.into(),
            next_delivery: first_delivery,
        }
    }

    pub fn is_done(&self) -> bool {
        self.messages.is_empty()
    }

    /// Appends push frames of the front messages to `frames` until it holds at least
    /// `bytes_max` (at least one message per call) or none is left, and their durable
    /// copies to `tracked`, in order. A message too large for a frame is left out of
    /// `frames`, loudly, but still tracked: it can never be pushed, and holding its number
    /// back would hold back every later one.
    pub fn encode_chunk(
        &mut self,
        bytes_max: usize,
        frames: &mut Vec<u8>,
        tracked: &mut Vec<Tracked>,
    ) {
        let start = frames.len();
        while let Some(m) = self.messages.pop_front() {
            let sent = reply::push(&m, &self.sub_id, frames).is_ok();
            if !sent {
                log::warn!("catch-up message {} too large for a frame", m.id);
            }
            if let Some(delivery) = self.next_delivery {
                tracked.push(Tracked {
                    topic: self.topic.clone(),
                    sub_id: self.sub_id.clone(),
                    delivery,
                    id: m.id,
                    sent,
                });
                self.next_delivery = Some(delivery + 1);
            }
            if frames.len() - start >= bytes_max {
                break;
            }
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
            if owner != self.shard.id() {
                self.send_without_loss(owner, super::mesh::QueueMsg::Confirm { slot, cmd });
            } else if let Some(replication) = self.replication.get() {
                // Clustered, the slot's state changes only through its group.
                replication.submit(slot, cmd, Box::new(|_, _| {}));
            } else {
                self.apply_in_turn(slot, cmd, |_, _| {});
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
            id: crate::queue::message::IdGenerator::new([1; 7]).next(0),
            sent: true,
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

    /// `n` messages of the topic "news" with payloads of 1 to 2,000 bytes.
    fn backlog(n: usize) -> Vec<Message> {
        let mut ids = crate::queue::message::IdGenerator::new([2; 7]);
        (0..n)
            .map(|i| Message {
                id: ids.next(0),
                payload: bytes::Bytes::from(vec![b'x'; 1 + (i * 37) % 2_000]),
                ..crate::queue::server::wal::tests::message("news")
            })
            .collect()
    }

    #[test]
    fn a_catch_up_in_chunks_writes_what_it_would_whole_in_order_and_bounded() {
        let messages = backlog(300);
        let mut whole = CatchUp::new("news", "s", messages.clone(), Some(7));
        let (mut all_frames, mut all_tracked) = (Vec::new(), Vec::new());
        whole.encode_chunk(usize::MAX, &mut all_frames, &mut all_tracked);
        assert!(whole.is_done());
        assert_eq!(all_tracked.len(), 300);
        assert_eq!(all_tracked.last().unwrap().delivery, 7 + 299);

        let bytes_max = 16 * 1024;
        let largest_push = 2_000 + 512;
        let mut chunked = CatchUp::new("news", "s", messages, Some(7));
        let (mut frames, mut tracked, mut chunks) = (Vec::new(), Vec::new(), 0);
        while !chunked.is_done() {
            let (before_frames, before_tracked) = (frames.len(), tracked.len());
            chunked.encode_chunk(bytes_max, &mut frames, &mut tracked);
            chunks += 1;
            assert!(
                tracked.len() > before_tracked,
                "a chunk holds a message at least"
            );
            assert!(frames.len() - before_frames < bytes_max + largest_push);
        }
        assert!(chunks > 10, "{chunks} chunks");
        assert_eq!(frames, all_frames, "the same bytes, in the same order");
        let numbers = |t: &[Tracked]| t.iter().map(|t| t.delivery).collect::<Vec<_>>();
        assert_eq!(numbers(&tracked), numbers(&all_tracked));
    }

    #[test]
    fn a_non_durable_catch_up_tracks_nothing() {
        let mut c = CatchUp::new("news", "s", backlog(3), None);
        let (mut frames, mut tracked) = (Vec::new(), Vec::new());
        c.encode_chunk(1, &mut frames, &mut tracked);
        c.encode_chunk(1, &mut frames, &mut tracked);
        assert!(!c.is_done());
        c.encode_chunk(1, &mut frames, &mut tracked);
        assert!(c.is_done() && tracked.is_empty() && !frames.is_empty());
    }
}
