//! Sending: as many sends as a device's window, open-loop schedule and the run allow, and
//! the count of senders still live.

use super::device::Phase;
use super::Worker;
use crate::bench::gateway::proto::StampKind;
use crate::bench::stats::{Counters, Op, Series};
use std::cmp::Reverse;
use std::sync::atomic::Ordering;

/// How long a `reconnect` writer waits before sending a send refused as retryable again.
pub const RETRY_PAUSE_NS: u64 = 200_000_000;

impl Worker<'_> {
    /// Queues as many sends as the device's window, schedule and the run allow.
    pub(super) fn fill(&mut self, i: usize, now: u64) {
        let d = &mut self.devs[i];
        if d.phase != Phase::Ready || d.done_sending {
            return self.sender_done_check(i);
        }
        let writer = self.run.reconnect.is_some();
        if writer && !self.writers_started {
            return;
        }
        let shared = self.shared;
        let (mut sent, mut bytes) = (0u64, 0u64);
        while d.sends_inflight < self.run.depth {
            if let Some(&(due, seq, start)) = d.retries.front() {
                if due <= now {
                    d.retries.pop_front();
                    let conv = d.spec.targets[(seq - 1) as usize % d.spec.targets.len()];
                    let kind = StampKind::Measured;
                    bytes += d.queue_send_numbered(
                        self.run,
                        &mut self.json,
                        conv,
                        kind,
                        seq,
                        start,
                        now,
                    ) as u64;
                    d.sends_inflight += 1;
                    continue;
                }
                if !d.scheduled {
                    d.scheduled = true;
                    self.heap.push(Reverse((due, i)));
                }
            }
            if writer {
                let total =
                    self.run.reconnect.as_ref().map_or(0, |r| r.away) * d.spec.targets.len() as u64;
                if d.seq >= total {
                    d.done_sending = d.retries.is_empty();
                    break;
                }
            } else if shared.stopped() {
                d.done_sending = true;
                if let Some(interval) = self.run.interval_ns {
                    // Scheduled before the stop but never sent: report, don't hide.
                    let stop = shared.stop_ns.load(Ordering::Relaxed);
                    if d.next_due < stop {
                        let missed = (stop - d.next_due) / interval + 1;
                        Counters::add(&shared.counters.unsent_scheduled, missed);
                    }
                }
                break;
            }
            let start = match self.run.interval_ns {
                Some(interval) if !writer => {
                    if d.next_due > now {
                        if !d.scheduled {
                            d.scheduled = true;
                            self.heap.push(Reverse((d.next_due, i)));
                        }
                        break;
                    }
                    let t = d.next_due;
                    d.next_due += interval;
                    t
                }
                _ => now,
            };
            if !writer && !shared.claim_send() {
                d.done_sending = true;
                break;
            }
            let conv = d.spec.targets[d.seq as usize % d.spec.targets.len()];
            let size = d.queue_send(
                self.run,
                &mut self.json,
                conv,
                StampKind::Measured,
                start,
                now,
            );
            bytes += size as u64;
            if self.run.interval_ns.is_some() && !writer {
                self.local.record(Series::SendLag, start, now);
            }
            d.sends_inflight += 1;
            sent += 1;
        }
        let counters = &shared.counters;
        Counters::add(&counters.sent[Op::Send as usize], sent);
        Counters::add(&counters.payload_messages, sent);
        Counters::add(&counters.payload_bytes, bytes);
        self.sender_done_check(i);
    }

    /// Sends the send numbered `seq` again after `RETRY_PAUSE_NS`.
    pub(super) fn retry_send(&mut self, i: usize, seq: u64, start: u64, now: u64) {
        let d = &mut self.devs[i];
        d.retries.push_back((now + RETRY_PAUSE_NS, seq, start));
        d.done_sending = false;
        Counters::add(&self.run.counters.send_retries, 1);
        self.fill(i, now);
    }

    /// A sender that will send nothing more and has every reply: one fewer live sender.
    /// Writers (`reconnect`) then close; chat devices stay to receive.
    pub(super) fn sender_done_check(&mut self, i: usize) {
        let d = &mut self.devs[i];
        if !d.sends() || d.sender_counted || !d.done_sending || d.sends_inflight > 0 {
            return;
        }
        d.sender_counted = true;
        self.shared.senders_live.fetch_sub(1, Ordering::Relaxed);
        if self.run.reconnect.is_some() && !d.spec.roams {
            self.close(i);
        }
    }
}
