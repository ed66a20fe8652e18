//! Send latency histograms: how long an append waits to be durable, and how long a record
//! takes from its timestamp to a device's socket.

use super::{now_ns, Engine};
use boltq_io::record::Record;

/// Histogram of append → durable, in µs, per shard registry (`/metrics`).
pub const SEND_DURABLE_METRIC: &str = "boltq_messaging_send_durable_seconds";
/// Histogram of record timestamp → record frame queued for a device, in µs.
pub const SEND_DELIVERED_METRIC: &str = "boltq_messaging_send_delivered_seconds";

impl Engine {
    /// Records the send → delivered latency of records whose frame was just queued for a
    /// device. Inbox pointers count with their own timestamp (the pointer's append), so
    /// this measures how late devices hear of each record, not of each message.
    pub fn note_delivered(&self, records: &[Record]) {
        let now = now_ns();
        for r in records {
            self.send_delivered.record(latency_us(r.timestamp_ns, now));
        }
    }
}

/// Microseconds from `from_ns` to `to_ns`; 0 when the clock went back.
pub(super) fn latency_us(from_ns: i64, to_ns: i64) -> u64 {
    (to_ns.saturating_sub(from_ns).max(0) / 1_000) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_is_microseconds_and_never_negative() {
        assert_eq!(latency_us(1_000, 3_500_000), 3_499);
        assert_eq!(latency_us(5_000, 1_000), 0);
        assert_eq!(latency_us(i64::MIN, i64::MAX), (i64::MAX / 1_000) as u64);
    }
}
