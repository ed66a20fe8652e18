//! When an append counts as acknowledged.

/// The durability contract of a journal (design.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// An append is acknowledged only after the commit round's fdatasync returned. Nothing
    /// acknowledged is lost on a crash or power failure.
    Always,
    /// Appends are acknowledged once buffered; an fdatasync runs every `interval_ms`. A power
    /// failure loses at most the last `interval_ms` of acknowledged appends; a process crash
    /// loses nothing that reached the device cache (the journal is written within one round).
    Interval { interval_ms: u64 },
    /// Appends are acknowledged once buffered and written without fdatasync. A process crash
    /// loses what was not yet written (at most one commit round); a power failure can lose
    /// everything since the last checkpoint.
    Never,
}

impl Durability {
    /// True when callers must wait for the round's fdatasync before replying.
    pub fn waits_for_sync(&self) -> bool {
        matches!(self, Durability::Always)
    }
}
