//! How many segment files a shard's logs may hold open, and which logs give theirs back.
//!
//! A log holds its active segment's two files open while it has bytes to write or sync. A
//! shard may own far more logs than the process may hold descriptors (the messaging plane
//! opens one per written partition, every user's inbox among them), so the store counts the
//! descriptors its logs hold and, past a limit, closes the files of idle logs (nothing to
//! write or sync), least recently used first; they reopen by name on their next flush.
//!
//! Trade-off: choosing victims scans every log, so a pass closes down to a low-water mark
//! well below the limit ([`LOW_WATER_PERCENT`]) and the scan is paid once per many opens, not
//! per open. Logs with pending I/O are never chosen, so the limit is soft: it can be passed
//! by the logs a checkpoint is flushing at that moment (one at a time, 2–4 descriptors).

/// Descriptors a shard's segment files may hold by default: 2,048 logs with an open active
/// segment. With the default 20,000-file process limit this leaves room for sockets on a
/// few shards; raise the process limit with the shard count.
pub const OPEN_SEGMENT_FILES_MAX_DEFAULT: usize = 4096;

/// The smallest accepted limit: one log rolling holds two segments (4 descriptors) open.
pub const OPEN_SEGMENT_FILES_MIN: usize = 4;

/// A pass closes files until at most this share of the limit stays open.
pub const LOW_WATER_PERCENT: usize = 75;

/// Refuses a limit below [`OPEN_SEGMENT_FILES_MIN`] with an error naming it.
pub fn check_limit(open_segment_files_max: usize) -> std::io::Result<()> {
    if open_segment_files_max < OPEN_SEGMENT_FILES_MIN {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "open_segment_files_max is {open_segment_files_max}; it must be at least \
                 {OPEN_SEGMENT_FILES_MIN}"
            ),
        ));
    }
    Ok(())
}

/// A log whose files could be closed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<K> {
    pub key: K,
    /// The budget's clock at the log's latest file I/O.
    pub used_tick: u64,
    /// Descriptors it holds.
    pub files: usize,
}

/// The count of open segment files of one store, against its limit. Plain state: the store
/// reports opens and closes and asks which logs to close.
#[derive(Debug)]
pub struct FileBudget {
    limit: usize,
    open: usize,
    clock: u64,
}

impl FileBudget {
    pub fn new(limit: usize) -> FileBudget {
        assert!(
            limit >= OPEN_SEGMENT_FILES_MIN,
            "open-files limit {limit} below {OPEN_SEGMENT_FILES_MIN}"
        );
        FileBudget {
            limit,
            open: 0,
            clock: 0,
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Descriptors held by segment files now.
    pub fn open(&self) -> usize {
        self.open
    }

    pub fn over_limit(&self) -> bool {
        self.open > self.limit
    }

    /// Records that a log did file I/O, its descriptors going from `before` to `after`;
    /// returns the stamp to keep as its `used_tick`.
    pub fn record_use(&mut self, before: usize, after: usize) -> u64 {
        self.open = (self.open + after)
            .checked_sub(before)
            .expect("a log closed files the budget never counted");
        self.clock += 1;
        self.clock
    }

    /// Records `files` descriptors closed by the store.
    pub fn record_closed(&mut self, files: usize) {
        self.open = self
            .open
            .checked_sub(files)
            .expect("closed more files than were open");
    }

    /// The logs to close, least recently used first, so that at most the low-water mark stays
    /// open. Empty when under the limit. Fewer when the idle logs do not hold enough.
    pub fn choose_victims<K: Copy>(&self, mut candidates: Vec<Candidate<K>>) -> Vec<K> {
        if !self.over_limit() {
            return Vec::new();
        }
        let target = self.limit * LOW_WATER_PERCENT / 100;
        candidates.sort_unstable_by_key(|c| c.used_tick);
        let mut open = self.open;
        let mut out = Vec::new();
        for c in candidates {
            if open <= target {
                break;
            }
            if c.files == 0 {
                continue;
            }
            open -= c.files.min(open);
            out.push(c.key);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    fn cand(key: usize, used_tick: u64, files: usize) -> Candidate<usize> {
        Candidate {
            key,
            used_tick,
            files,
        }
    }

    #[test]
    fn under_the_limit_nothing_is_closed() {
        let mut b = FileBudget::new(8);
        for _ in 0..4 {
            b.record_use(0, 2);
        }
        assert_eq!(b.open(), 8);
        assert!(!b.over_limit());
        assert!(b.choose_victims(vec![cand(1, 1, 2)]).is_empty());
    }

    #[test]
    fn over_the_limit_the_least_recently_used_go_down_to_low_water() {
        let mut b = FileBudget::new(8);
        let mut ticks = Vec::new();
        for _ in 0..5 {
            ticks.push(b.record_use(0, 2));
        }
        assert!(b.over_limit());
        // Offered out of order: the two oldest (ticks[0], ticks[1]) bring 10 down to 6.
        let c = vec![
            cand(4, ticks[4], 2),
            cand(0, ticks[0], 2),
            cand(2, ticks[2], 2),
            cand(1, ticks[1], 2),
        ];
        assert_eq!(b.choose_victims(c), vec![0, 1]);
        b.record_closed(4);
        assert_eq!(b.open(), 6);
        assert!(!b.over_limit());
    }

    #[test]
    fn busy_logs_hold_the_count_above_the_limit() {
        let mut b = FileBudget::new(4);
        for _ in 0..4 {
            b.record_use(0, 2);
        }
        assert_eq!(b.choose_victims(vec![cand(7, 1, 2)]), vec![7]);
        assert!(
            b.choose_victims::<usize>(Vec::new()).is_empty(),
            "no idle log: nothing to close"
        );
    }

    #[test]
    fn victims_never_leave_more_than_low_water_when_enough_are_idle() {
        for seed in 1..200 {
            let mut rng = Rng::new(seed);
            let limit = OPEN_SEGMENT_FILES_MIN + rng.below(60) as usize;
            let mut b = FileBudget::new(limit);
            let mut cands = Vec::new();
            for key in 0..rng.below(80) as usize {
                let files = 2 * rng.below(3) as usize;
                let tick = b.record_use(0, files);
                cands.push(cand(key, tick, files));
            }
            let open = b.open();
            let victims = b.choose_victims(cands.clone());
            let closed: usize = victims.iter().map(|&k| cands[k].files).sum();
            if open <= limit {
                assert!(victims.is_empty(), "seed {seed}");
                continue;
            }
            assert!(
                open - closed <= limit * LOW_WATER_PERCENT / 100,
                "seed {seed}"
            );
            // Every victim is older than every idle survivor holding files.
            let newest_victim = victims.iter().map(|&k| cands[k].used_tick).max();
            let oldest_kept = cands
                .iter()
                .filter(|c| c.files > 0 && !victims.contains(&c.key))
                .map(|c| c.used_tick)
                .min();
            if let (Some(v), Some(k)) = (newest_victim, oldest_kept) {
                assert!(v < k, "seed {seed}: least recently used first");
            }
        }
    }

    #[test]
    fn limits_below_the_minimum_are_refused() {
        assert!(check_limit(OPEN_SEGMENT_FILES_MIN).is_ok());
        let e = check_limit(OPEN_SEGMENT_FILES_MIN - 1).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("open_segment_files_max"));
    }

    #[test]
    fn closing_uncounted_files_is_caught() {
        let r = std::panic::catch_unwind(|| {
            let mut b = FileBudget::new(4);
            b.record_closed(2);
        });
        assert!(r.is_err());
    }
}
