//! Frames waiting to be written to one connection: replies in request order, then pushes.
//!
//! Pushes (pub/sub deliveries) may be produced at any time by any shard. They are held back
//! while replies are outstanding, so a push can never overtake the reply a client is waiting
//! for (a v1 Go client would take the push for the reply; the `subscribed` reply must precede
//! every push of its subscription).

use super::delivery::Tracked;
use boltq_io::event::Event;
use std::cell::{Cell, RefCell};

/// Most push bytes held for one connection. Non-durable pub/sub delivery is at-most-once (v1):
/// past this, pushes to a client that does not read are dropped and counted, never buffered
/// without end. A durable push that finds no room closes the connection instead (its
/// registration hands everything unconfirmed out again on re-subscribe).
pub const PUSH_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Why a push frame was not queued.
enum Refused {
    Closed,
    NotEncoded,
    NoRoom,
}

#[derive(Default)]
pub struct Outbound {
    pushes: RefCell<Vec<u8>>,
    /// The durable pushes among `pushes`, in order (see `delivery.rs`).
    tracked: RefCell<Vec<Tracked>>,
    /// A durable push found no room: the connection must close (it cannot skip one).
    overrun: Cell<bool>,
    pushes_dropped: Cell<u64>,
    /// Wakes the connection task when pushes arrive.
    pub push_event: Event,
    closed: Cell<bool>,
    /// Who is on the other end and since when (Unix ms), and when the server last read
    /// bytes from it, for `/connections`.
    pub peer: std::cell::RefCell<String>,
    pub since_ms: Cell<u64>,
    last_read: Cell<Option<std::time::Instant>>,
    /// Work-queue messages this connection consumed and has not acked or nacked yet
    /// (v1 PREFETCH counts these per connection).
    unacked: Cell<u64>,
}

impl Outbound {
    /// An outbound for a client at `peer` (e.g. `127.0.0.1:5555`), connected now.
    pub fn for_peer(peer: String) -> Outbound {
        let out = Outbound::default();
        *out.peer.borrow_mut() = peer;
        out.since_ms.set(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        );
        out.last_read.set(Some(std::time::Instant::now()));
        out
    }

    /// Records that bytes were read from the connection `at` (the caller's clock reading).
    pub fn note_read(&self, at: std::time::Instant) {
        self.last_read.set(Some(at));
    }

    /// Milliseconds since bytes were last read from the connection (or it connected).
    pub fn idle_ms(&self) -> u64 {
        self.last_read
            .get()
            .map_or(0, |at| at.elapsed().as_millis() as u64)
    }

    /// Queues the push frame `encode` appends to the connection's buffer (encoding in place
    /// saves a copy per push); `encode` returns false when it could not encode, and then
    /// nothing is queued. False if dropped for lack of room, a closed client or `encode`.
    pub fn push_encoded(&self, encode: impl FnOnce(&mut Vec<u8>) -> bool) -> bool {
        self.queue_frame(encode).is_ok()
    }

    /// Queues a durable registration's push (see `push_encoded`), remembered with `tracked`
    /// so the connection can confirm it once the peer has it. A push that cannot be encoded
    /// (too large for a frame) can never be delivered: it is confirmed with the next write,
    /// loudly, rather than block its registration. One that finds no room marks the
    /// connection overrun: it must close, since confirming later pushes would skip this one.
    pub fn push_durable(&self, mut tracked: Tracked, encode: impl FnOnce(&mut Vec<u8>) -> bool) {
        match self.queue_frame(encode) {
            // Closed: the disconnect hands it out again.
            Err(Refused::Closed) => return,
            Err(Refused::NoRoom) => {
                self.overrun.set(true);
                self.push_event.notify();
                return;
            }
            Ok(()) => {}
            Err(Refused::NotEncoded) => tracked.sent = false,
        }
        let mut t = self.tracked.borrow_mut();
        t.push(tracked);
        if t.len() == 1 {
            self.push_event.notify();
        }
    }

    fn queue_frame(&self, encode: impl FnOnce(&mut Vec<u8>) -> bool) -> Result<(), Refused> {
        if self.closed.get() {
            return Err(Refused::Closed);
        }
        let mut p = self.pushes.borrow_mut();
        let start = p.len();
        if !encode(&mut p) {
            p.truncate(start);
            return Err(Refused::NotEncoded);
        }
        if p.len() > PUSH_BYTES_MAX {
            p.truncate(start);
            self.pushes_dropped.set(self.pushes_dropped.get() + 1);
            return Err(Refused::NoRoom);
        }
        drop(p);
        if start == 0 {
            self.push_event.notify();
        }
        Ok(())
    }

    pub fn has_pushes(&self) -> bool {
        !self.pushes.borrow().is_empty() || !self.tracked.borrow().is_empty()
    }

    /// True once a durable push found no room (see `push_durable`).
    pub fn overrun(&self) -> bool {
        self.overrun.get()
    }

    /// Moves every held push frame to the end of `out` (by swapping buffers when `out` is
    /// empty, so the bytes are not copied and both allocations are reused), and the durable
    /// ones among them to `tracked`.
    pub fn take_pushes(&self, out: &mut Vec<u8>, tracked: &mut Vec<Tracked>) {
        let mut p = self.pushes.borrow_mut();
        if out.is_empty() {
            std::mem::swap(out, &mut p);
        } else {
            out.append(&mut p);
        }
        tracked.append(&mut self.tracked.borrow_mut());
    }

    pub fn pushes_dropped(&self) -> u64 {
        self.pushes_dropped.get()
    }

    pub fn unacked(&self) -> u64 {
        self.unacked.get()
    }

    pub fn add_unacked(&self, n: u64) {
        self.unacked.set(self.unacked.get() + n);
    }

    /// One consumed message left the connection's hands (ack, nack, timeout or expiry):
    /// the prefetch window reopens by one. Floors at 0 because an ack may come from a
    /// connection that did not consume the message (v1 allows acking from anywhere).
    pub fn release_prefetch(&self) {
        self.unacked.set(self.unacked.get().saturating_sub(1));
    }

    pub fn close(&self) {
        self.closed.set(true);
        self.pushes.borrow_mut().clear();
        self.tracked.borrow_mut().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push_bytes(out: &Outbound, bytes: &[u8]) -> bool {
        out.push_encoded(|b| {
            b.extend_from_slice(bytes);
            true
        })
    }

    #[test]
    fn pushes_are_taken_in_order_and_appended_after_what_is_there() {
        let out = Outbound::default();
        assert!(push_bytes(&out, b"ab"));
        assert!(push_bytes(&out, b"cd"));
        let mut buf = Vec::new();
        out.take_pushes(&mut buf, &mut Vec::new());
        assert_eq!(buf, b"abcd");
        assert!(!out.has_pushes());
        assert!(push_bytes(&out, b"ef"));
        out.take_pushes(&mut buf, &mut Vec::new());
        assert_eq!(
            buf, b"abcdef",
            "appended, not swapped, when out holds bytes"
        );
    }

    #[test]
    fn a_push_past_the_limit_or_not_encoded_leaves_nothing_behind() {
        let out = Outbound::default();
        assert!(push_bytes(&out, &vec![1; PUSH_BYTES_MAX - 1]));
        assert!(!push_bytes(&out, b"xy"), "over the limit");
        assert_eq!(out.pushes_dropped(), 1);
        assert!(!out.push_encoded(|b| {
            b.push(9);
            false
        }));
        assert_eq!(
            out.pushes_dropped(),
            1,
            "an encode failure is not a drop for room"
        );
        let mut buf = Vec::new();
        out.take_pushes(&mut buf, &mut Vec::new());
        assert_eq!(buf.len(), PUSH_BYTES_MAX - 1);
        assert!(buf.iter().all(|&b| b == 1));
        out.close();
        assert!(!push_bytes(&out, b"z"), "closed");
    }

    fn tracked(n: u64) -> Tracked {
        Tracked {
            topic: "t".into(),
            sub_id: "s".into(),
            delivery: n,
            id: crate::queue::message::IdGenerator::new([1; 7]).next(0),
            sent: true,
        }
    }

    #[test]
    fn durable_pushes_are_taken_with_their_bytes_and_an_unencodable_one_still_counts() {
        let out = Outbound::default();
        out.push_durable(tracked(1), |b| {
            b.extend_from_slice(b"one");
            true
        });
        out.push_durable(tracked(2), |_| false);
        assert!(out.has_pushes());
        let (mut buf, mut t) = (Vec::new(), Vec::new());
        out.take_pushes(&mut buf, &mut t);
        assert_eq!(buf, b"one");
        assert_eq!(t.iter().map(|t| t.delivery).collect::<Vec<_>>(), [1, 2]);
        assert!(!out.has_pushes());
        assert!(!out.overrun());
    }

    #[test]
    fn a_durable_push_without_room_overruns_the_connection_and_is_not_tracked() {
        let out = Outbound::default();
        assert!(push_bytes(&out, &vec![1; PUSH_BYTES_MAX - 1]));
        out.push_durable(tracked(7), |b| {
            b.extend_from_slice(b"xy");
            true
        });
        assert!(
            out.overrun(),
            "it cannot be skipped: the connection must close"
        );
        let (mut buf, mut t) = (Vec::new(), Vec::new());
        out.take_pushes(&mut buf, &mut t);
        assert!(t.is_empty());
        assert_eq!(buf.len(), PUSH_BYTES_MAX - 1);
    }
}
