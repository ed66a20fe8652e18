//! A sans-IO timer structure: deadlines in, expired items out.
//!
//! Why a binary heap and not a hashed wheel: a heap gives exact deadlines in
//! deadline order (ties in insertion order, so runs are deterministic), it
//! has no tick granularity or wheel size to tune, and O(log n) per operation
//! is far below the cost of the work a timer triggers. Tick coalescing is the
//! shard ticker's job, not this structure's. Cancellation is lazy (the item
//! is dropped from a map; its heap entry is skipped later) and the heap is
//! compacted when stale entries outnumber live ones, so the common "arm an
//! ack timeout, then cancel it on ack" pattern keeps memory bounded by the
//! live count.
//!
//! No clocks inside: callers pass `now_ms`, which makes this testable against
//! a trivial model and usable inside the deterministic state machines.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Identifies one armed timer, for cancellation. Ids are never reused, so a
/// stale id can never cancel someone else's timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(u64);

/// Returned by [`Timers::insert`] when `timers_max` timers are armed; gives
/// the item back so the caller can fail its request instead of losing it.
#[derive(PartialEq, Eq)]
pub struct TimersFull<T>(pub T);

// By hand: items are often closures, which have no `Debug`.
impl<T> std::fmt::Debug for TimersFull<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TimersFull(..)")
    }
}

/// Heap entries beyond this many stale ones are tolerated before compaction,
/// so small timer sets never pay for rebuilding.
const STALE_SLACK: usize = 64;

/// Armed timers ordered by `(deadline_ms, insertion order)`.
#[derive(Debug)]
pub struct Timers<T> {
    heap: BinaryHeap<Reverse<(u64, TimerId)>>,
    items: HashMap<TimerId, T>,
    next_id: u64,
    timers_max: usize,
}

impl<T> Timers<T> {
    /// An empty timer set that holds at most `timers_max` armed timers; a
    /// limit, because every timer is memory a client can make us spend.
    pub fn new(timers_max: usize) -> Self {
        assert!(timers_max > 0, "timers_max must be positive");
        Self {
            heap: BinaryHeap::new(),
            items: HashMap::new(),
            next_id: 0,
            timers_max,
        }
    }

    /// Arms a timer that expires once `now_ms >= deadline_ms`.
    pub fn insert(&mut self, deadline_ms: u64, item: T) -> Result<TimerId, TimersFull<T>> {
        if self.items.len() >= self.timers_max {
            return Err(TimersFull(item));
        }
        let id = TimerId(self.next_id);
        self.next_id += 1;
        self.heap.push(Reverse((deadline_ms, id)));
        let previous = self.items.insert(id, item);
        assert!(previous.is_none(), "timer ids are never reused");
        self.check_invariants();
        Ok(id)
    }

    /// Disarms a timer; returns its item if it was still armed (`None` if it
    /// already expired or was cancelled, which callers may treat as a no-op).
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        let item = self.items.remove(&id)?;
        self.discard_stale_top();
        self.compact_if_sparse();
        self.check_invariants();
        Some(item)
    }

    /// The earliest armed deadline, so a driver knows how long it may sleep;
    /// `None` means nothing is armed and the driver may sleep indefinitely.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.heap
            .peek()
            .map(|Reverse((deadline_ms, _))| *deadline_ms)
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Removes and yields, in deadline order, every item whose deadline is
    /// `<= now_ms`. Items not consumed from the iterator stay armed.
    pub fn pop_expired(&mut self, now_ms: u64) -> Expired<'_, T> {
        Expired {
            timers: self,
            now_ms,
        }
    }

    fn pop_one_expired(&mut self, now_ms: u64) -> Option<T> {
        let Reverse((deadline_ms, id)) = *self.heap.peek()?;
        if deadline_ms > now_ms {
            return None;
        }
        self.heap.pop();
        // The top is always live (see `discard_stale_top`).
        let item = self.items.remove(&id).expect("heap top is a live timer");
        self.discard_stale_top();
        self.check_invariants();
        Some(item)
    }

    /// Keeps the invariant "the heap top is a live timer", so that
    /// `next_deadline_ms` can take `&self` and never reports a cancelled one.
    fn discard_stale_top(&mut self) {
        while let Some(Reverse((_, id))) = self.heap.peek() {
            if self.items.contains_key(id) {
                break;
            }
            self.heap.pop();
        }
    }

    fn compact_if_sparse(&mut self) {
        if self.heap.len() > 2 * self.items.len() + STALE_SLACK {
            let items = &self.items;
            self.heap.retain(|Reverse((_, id))| items.contains_key(id));
        }
    }

    fn check_invariants(&self) {
        debug_assert!(self.heap.len() >= self.items.len());
        debug_assert!(self.items.len() <= self.timers_max);
        debug_assert!(self
            .heap
            .peek()
            .is_none_or(|Reverse((_, id))| self.items.contains_key(id)));
    }
}

/// Iterator returned by [`Timers::pop_expired`].
pub struct Expired<'a, T> {
    timers: &'a mut Timers<T>,
    now_ms: u64,
}

impl<T> Iterator for Expired<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.timers.pop_one_expired(self.now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tiny deterministic PRNG so tests need no `rand` and replay by seed.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn expires_in_deadline_then_insertion_order() {
        let mut timers = Timers::new(16);
        timers.insert(30, "c").unwrap();
        timers.insert(10, "a").unwrap();
        timers.insert(10, "b").unwrap();
        timers.insert(40, "d").unwrap();
        assert_eq!(timers.next_deadline_ms(), Some(10));
        assert_eq!(timers.pop_expired(9).count(), 0);
        let got: Vec<_> = timers.pop_expired(30).collect();
        assert_eq!(got, ["a", "b", "c"]);
        assert_eq!(timers.next_deadline_ms(), Some(40));
        assert_eq!(timers.len(), 1);
    }

    #[test]
    fn cancel_removes_and_next_deadline_skips_cancelled() {
        let mut timers = Timers::new(16);
        let a = timers.insert(5, 'a').unwrap();
        timers.insert(7, 'b').unwrap();
        assert_eq!(timers.cancel(a), Some('a'));
        assert_eq!(timers.cancel(a), None, "double cancel is a no-op");
        assert_eq!(timers.next_deadline_ms(), Some(7));
        assert_eq!(timers.pop_expired(100).collect::<Vec<_>>(), ['b']);
        assert!(timers.is_empty());
        assert_eq!(timers.next_deadline_ms(), None);
    }

    #[test]
    fn full_returns_the_item() {
        let mut timers = Timers::new(2);
        timers.insert(1, 1).unwrap();
        let id = timers.insert(2, 2).unwrap();
        assert_eq!(timers.insert(3, 3), Err(TimersFull(3)));
        timers.cancel(id);
        assert!(timers.insert(3, 3).is_ok());
    }

    #[test]
    fn cancel_heavy_use_keeps_heap_bounded() {
        let mut timers = Timers::new(1_000_000);
        let keep = timers.insert(u64::MAX, 0).unwrap();
        for i in 0..100_000 {
            let id = timers.insert(1_000 + i, i).unwrap();
            timers.cancel(id);
        }
        assert!(timers.heap.len() <= 2 * timers.len() + STALE_SLACK + 1);
        assert_eq!(timers.cancel(keep), Some(0));
    }

    #[test]
    fn partially_consumed_iterator_leaves_rest_armed() {
        let mut timers = Timers::new(8);
        for d in 1..=4 {
            timers.insert(d, d).unwrap();
        }
        assert_eq!(timers.pop_expired(10).next(), Some(1));
        assert_eq!(timers.len(), 3);
        assert_eq!(timers.next_deadline_ms(), Some(2));
    }

    /// The model: a Vec kept sorted by (deadline, insertion sequence).
    #[derive(Default)]
    struct Model {
        armed: Vec<(u64, u64, u32)>,
    }

    impl Model {
        fn insert(&mut self, deadline_ms: u64, seq: u64, item: u32) {
            self.armed.push((deadline_ms, seq, item));
            self.armed.sort_unstable();
        }

        fn pop_expired(&mut self, now_ms: u64) -> Vec<u32> {
            let split = self.armed.partition_point(|(d, _, _)| *d <= now_ms);
            self.armed.drain(..split).map(|(_, _, item)| item).collect()
        }
    }

    fn run_model_case(seed: u64) {
        let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let timers_max = 1 + rng.below(64) as usize;
        let mut timers = Timers::new(timers_max);
        let mut model = Model::default();
        // (id, seq, item) of timers the real structure may still hold.
        let mut ids: Vec<(TimerId, u64)> = Vec::new();
        let mut now_ms = rng.below(1_000);
        let mut next_item = 0_u32;
        for step in 0..500 {
            match rng.below(10) {
                0..=4 => {
                    let deadline_ms = now_ms + rng.below(200);
                    let item = next_item;
                    next_item += 1;
                    match timers.insert(deadline_ms, item) {
                        Ok(id) => {
                            assert!(model.armed.len() < timers_max, "seed {seed} step {step}");
                            model.insert(deadline_ms, id.0, item);
                            ids.push((id, id.0));
                        }
                        Err(TimersFull(back)) => {
                            assert_eq!(back, item, "seed {seed} step {step}");
                            assert_eq!(model.armed.len(), timers_max, "seed {seed} step {step}");
                        }
                    }
                }
                5 | 6 if !ids.is_empty() => {
                    let (id, seq) = ids.swap_remove(rng.below(ids.len() as u64) as usize);
                    let expected = model
                        .armed
                        .iter()
                        .position(|(_, s, _)| *s == seq)
                        .map(|i| model.armed.remove(i).2);
                    assert_eq!(timers.cancel(id), expected, "seed {seed} step {step}");
                }
                _ => {
                    now_ms += rng.below(100);
                    let got: Vec<u32> = timers.pop_expired(now_ms).collect();
                    let want = model.pop_expired(now_ms);
                    assert_eq!(got, want, "seed {seed} step {step} now {now_ms}");
                }
            }
            assert_eq!(timers.len(), model.armed.len(), "seed {seed} step {step}");
            assert_eq!(
                timers.next_deadline_ms(),
                model.armed.first().map(|(d, _, _)| *d),
                "seed {seed} step {step}"
            );
        }
        let got: Vec<u32> = timers.pop_expired(u64::MAX).collect();
        assert_eq!(got, model.pop_expired(u64::MAX), "seed {seed} final drain");
    }

    /// Many random insert/cancel/expire sequences against the sorted-Vec
    /// model. Set `BOLTQ_SEED` to replay one failing seed.
    #[test]
    fn matches_sorted_vec_model_for_random_seeds() {
        if let Some(seed) = std::env::var("BOLTQ_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            run_model_case(seed);
            return;
        }
        for seed in 0..300 {
            run_model_case(seed);
        }
    }
}
