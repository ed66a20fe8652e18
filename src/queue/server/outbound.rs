//! Frames waiting to be written to one connection: replies in request order, then pushes.
//!
//! Pushes (pub/sub deliveries) may be produced at any time by any shard. They are held back
//! while replies are outstanding, so a push can never overtake the reply a client is waiting
//! for (a v1 Go client would take the push for the reply; the `subscribed` reply must precede
//! every push of its subscription).

use boltq_io::event::Event;
use std::cell::{Cell, RefCell};

/// Most push bytes held for one connection. Pub/sub delivery is at-most-once (v1): past this,
/// pushes to a client that does not read are dropped and counted, never buffered without end.
pub const PUSH_BYTES_MAX: usize = 16 * 1024 * 1024;

#[derive(Default)]
pub struct Outbound {
    pushes: RefCell<Vec<u8>>,
    pushes_dropped: Cell<u64>,
    /// Wakes the connection task when pushes arrive.
    pub push_event: Event,
    closed: Cell<bool>,
    /// Who is on the other end and since when, for `/connections`.
    pub peer: std::cell::RefCell<String>,
    pub since_ms: Cell<u64>,
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
        out
    }

    /// Queues the push frame `encode` appends to the connection's buffer (encoding in place
    /// saves a copy per push); `encode` returns false when it could not encode, and then
    /// nothing is queued. False if dropped for lack of room, a closed client or `encode`.
    pub fn push_encoded(&self, encode: impl FnOnce(&mut Vec<u8>) -> bool) -> bool {
        if self.closed.get() {
            return false;
        }
        let mut p = self.pushes.borrow_mut();
        let start = p.len();
        if !encode(&mut p) {
            p.truncate(start);
            return false;
        }
        if p.len() > PUSH_BYTES_MAX {
            p.truncate(start);
            self.pushes_dropped.set(self.pushes_dropped.get() + 1);
            return false;
        }
        drop(p);
        if start == 0 {
            self.push_event.notify();
        }
        true
    }

    pub fn has_pushes(&self) -> bool {
        !self.pushes.borrow().is_empty()
    }

    /// Moves every held push frame to the end of `out` (by swapping buffers when `out` is
    /// empty, so the bytes are not copied and both allocations are reused).
    pub fn take_pushes(&self, out: &mut Vec<u8>) {
        let mut p = self.pushes.borrow_mut();
        if out.is_empty() {
            std::mem::swap(out, &mut p);
        } else {
            out.append(&mut p);
        }
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
        out.take_pushes(&mut buf);
        assert_eq!(buf, b"abcd");
        assert!(!out.has_pushes());
        assert!(push_bytes(&out, b"ef"));
        out.take_pushes(&mut buf);
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
        out.take_pushes(&mut buf);
        assert_eq!(buf.len(), PUSH_BYTES_MAX - 1);
        assert!(buf.iter().all(|&b| b == 1));
        out.close();
        assert!(!push_bytes(&out, b"z"), "closed");
    }
}
