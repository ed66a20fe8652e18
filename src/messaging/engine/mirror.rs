//! A shard's view of the partitions its subscribers read: the recent durable records of
//! each, pushed by the owners, and one wake-up per partition for the local subscriptions.
//!
//! Live delivery never reads the disk and never asks the owner: a subscription that has
//! caught up takes its records from here. One that is behind (history, a reconnect) reads
//! from the owner until it reaches the cached window. Memory is bounded per partition; a
//! partition whose cache was trimmed is simply read from the owner.

use boltq_io::event::Event;
use boltq_io::record::Record;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

/// Records kept per watched partition.
pub const MIRROR_RECORDS_MAX: usize = 512;
/// Bytes (key + payload + headers) kept per watched partition.
pub const MIRROR_BYTES_MAX: usize = 1024 * 1024;

pub type PartitionKey = (String, u32);

pub struct MirrorPartition {
    /// Local subscriptions reading this partition.
    pub subscribers: usize,
    /// One past the newest durable record known here.
    pub next_seq: u64,
    pub first_seq: u64,
    cache: VecDeque<Record>,
    cache_bytes: usize,
    /// Notified whenever `next_seq` moves; subscriptions take a ticket before they look.
    pub event: Rc<Event>,
}

/// What a subscription at `pos` should do.
pub enum Take {
    /// Records from `pos`, in order.
    Records(Vec<Record>),
    /// `pos` is outside the cached window: read from the owner.
    Miss,
    /// Nothing new yet: wait for the event.
    Wait,
}

#[derive(Default)]
pub struct Mirror {
    partitions: HashMap<PartitionKey, MirrorPartition>,
}

fn record_bytes(r: &Record) -> usize {
    r.key.len()
        + r.payload.len()
        + r.headers
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
}

impl Mirror {
    /// Adds a local subscriber; returns true when it is the first (the owner must be told to
    /// send this shard the partition's tail).
    pub fn subscribe(&mut self, key: &PartitionKey) -> (bool, Rc<Event>) {
        let p = self
            .partitions
            .entry(key.clone())
            .or_insert_with(|| MirrorPartition {
                subscribers: 0,
                next_seq: 0,
                first_seq: 0,
                cache: VecDeque::new(),
                cache_bytes: 0,
                event: Rc::new(Event::default()),
            });
        p.subscribers += 1;
        (p.subscribers == 1, Rc::clone(&p.event))
    }

    /// Removes a local subscriber; returns true when it was the last (tell the owner).
    pub fn unsubscribe(&mut self, key: &PartitionKey) -> bool {
        let Some(p) = self.partitions.get_mut(key) else {
            return false;
        };
        assert!(p.subscribers > 0);
        p.subscribers -= 1;
        if p.subscribers == 0 {
            p.event.notify();
            self.partitions.remove(key);
            return true;
        }
        false
    }

    /// Records what an owner said about the partition's bounds (a read reply).
    pub fn learn_bounds(&mut self, key: &PartitionKey, first_seq: u64, next_seq: u64) {
        if let Some(p) = self.partitions.get_mut(key) {
            p.first_seq = p.first_seq.max(first_seq);
            if next_seq > p.next_seq {
                p.next_seq = next_seq;
                p.event.notify();
            }
        }
    }

    /// Takes durable records pushed by the owner. Records already known are skipped; a
    /// batch that does not continue the cache replaces it (the window restarts there).
    pub fn apply_tail(&mut self, key: &PartitionKey, records: Vec<Record>, first_seq: u64) {
        let Some(p) = self.partitions.get_mut(key) else {
            return; // nobody here reads it any more; the owner learns with Unwatch
        };
        p.first_seq = p.first_seq.max(first_seq);
        let mut moved = false;
        for r in records {
            if r.seq < p.next_seq && p.cache.back().is_some_and(|b| b.seq >= r.seq) {
                continue;
            }
            if p.cache.back().is_some_and(|b| b.seq + 1 != r.seq) {
                p.cache.clear();
                p.cache_bytes = 0;
            }
            p.next_seq = p.next_seq.max(r.seq + 1);
            p.cache_bytes += record_bytes(&r);
            p.cache.push_back(r);
            moved = true;
            while p.cache.len() > MIRROR_RECORDS_MAX
                || (p.cache_bytes > MIRROR_BYTES_MAX && p.cache.len() > 1)
            {
                let old = p.cache.pop_front().expect("non-empty");
                p.cache_bytes -= record_bytes(&old);
            }
        }
        // Records below the retention horizon are gone from the owner too.
        while p.cache.front().is_some_and(|r| r.seq < p.first_seq) {
            let old = p.cache.pop_front().expect("non-empty");
            p.cache_bytes -= record_bytes(&old);
        }
        if moved {
            p.event.notify();
        }
    }

    /// What a subscription at `pos` gets now, at most `records_max` records and about
    /// `bytes_max` bytes (at least one record when any is available).
    pub fn take(&self, key: &PartitionKey, pos: u64, records_max: usize, bytes_max: usize) -> Take {
        let Some(p) = self.partitions.get(key) else {
            return Take::Miss;
        };
        if pos >= p.next_seq {
            return Take::Wait;
        }
        let Some(front) = p.cache.front() else {
            return Take::Miss;
        };
        if pos < front.seq {
            return Take::Miss;
        }
        let start = (pos - front.seq) as usize;
        if start >= p.cache.len() {
            return Take::Miss;
        }
        let mut out = Vec::new();
        let mut bytes = 0;
        for r in p.cache.iter().skip(start) {
            if out.len() >= records_max || (bytes >= bytes_max && !out.is_empty()) {
                break;
            }
            bytes += record_bytes(r);
            out.push(r.clone());
        }
        Take::Records(out)
    }

    /// The wake-up of a partition with local readers.
    pub fn event(&self, key: &PartitionKey) -> Option<Rc<Event>> {
        self.partitions.get(key).map(|p| Rc::clone(&p.event))
    }

    pub fn next_seq(&self, key: &PartitionKey) -> Option<u64> {
        self.partitions.get(key).map(|p| p.next_seq)
    }

    pub fn watched(&self) -> usize {
        self.partitions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn rec(seq: u64) -> Record {
        Record {
            seq,
            timestamp_ns: 1,
            flags: 0,
            epoch: 0,
            key: Bytes::from_static(b"k"),
            headers: vec![],
            payload: Bytes::from(vec![0u8; 10]),
        }
    }

    fn seqs(t: Take) -> Vec<u64> {
        match t {
            Take::Records(r) => r.iter().map(|r| r.seq).collect(),
            Take::Miss => vec![u64::MAX],
            Take::Wait => vec![],
        }
    }

    #[test]
    fn caught_up_subscriptions_read_the_cache_and_wait_at_the_head() {
        let mut m = Mirror::default();
        let key = ("t".to_string(), 0);
        let (first, event) = m.subscribe(&key);
        assert!(first);
        m.learn_bounds(&key, 1, 5);
        let ticket = event.ticket();
        m.apply_tail(&key, vec![rec(5), rec(6)], 1);
        assert_ne!(event.ticket(), ticket, "new records wake the subscribers");
        assert_eq!(seqs(m.take(&key, 5, 10, 1 << 20)), vec![5, 6]);
        assert_eq!(seqs(m.take(&key, 6, 10, 1 << 20)), vec![6]);
        assert!(
            seqs(m.take(&key, 7, 10, 1 << 20)).is_empty(),
            "wait at the head"
        );
        assert_eq!(
            seqs(m.take(&key, 2, 10, 1 << 20)),
            vec![u64::MAX],
            "behind: ask owner"
        );
        // A duplicate push changes nothing.
        m.apply_tail(&key, vec![rec(6)], 1);
        assert_eq!(seqs(m.take(&key, 5, 10, 1 << 20)), vec![5, 6]);
        // A discontinuous push restarts the window.
        m.apply_tail(&key, vec![rec(9)], 1);
        assert_eq!(seqs(m.take(&key, 5, 10, 1 << 20)), vec![u64::MAX]);
        assert_eq!(seqs(m.take(&key, 9, 10, 1 << 20)), vec![9]);
    }

    #[test]
    fn the_cache_is_bounded_and_the_last_subscriber_leaving_drops_it() {
        let mut m = Mirror::default();
        let key = ("t".to_string(), 3);
        m.subscribe(&key);
        let (first, _) = m.subscribe(&key);
        assert!(!first);
        let batch: Vec<Record> = (1..=(MIRROR_RECORDS_MAX as u64 + 10)).map(rec).collect();
        m.apply_tail(&key, batch, 1);
        assert_eq!(
            seqs(m.take(&key, 1, 1, 1 << 20)),
            vec![u64::MAX],
            "oldest trimmed"
        );
        assert_eq!(seqs(m.take(&key, 11, 1, 1 << 20)), vec![11]);
        assert!(!m.unsubscribe(&key));
        assert!(m.unsubscribe(&key));
        assert_eq!(m.watched(), 0);
    }
}
