//! How devices end: closed when done, failed (during setup that fails the run), or given up
//! on at a request timeout or the drain deadline.

use super::device::Phase;
use super::Worker;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

impl Worker<'_> {
    /// Closes a device that is done (without counting anything).
    pub(super) fn close(&mut self, i: usize) {
        let d = &mut self.devs[i];
        if d.phase == Phase::Done {
            return;
        }
        if d.phase.holds_slot() {
            self.slots_used -= 1;
        }
        if let Some(s) = d.stream.take() {
            let _ = self.epoll.delete(s.socket().as_raw_fd());
            let _ = s.socket().shutdown(std::net::Shutdown::Both);
        }
        d.phase = Phase::Done;
        self.live -= 1;
        if !d.sender_counted && d.sends() && self.running {
            d.sender_counted = true;
            self.shared.senders_live.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The device broke: during setup that fails the run; later, what it had in flight
    /// counts as errors of kind `why`.
    pub(super) fn fail(&mut self, i: usize, why: &str) {
        let d = &mut self.devs[i];
        if d.phase == Phase::Done {
            return;
        }
        if !self.running {
            let name = d.spec.device.clone();
            self.setup_error
                .get_or_insert_with(|| format!("device {name}: {why}"));
        } else {
            self.shared
                .error(None, &format!("connection lost ({why})"), 1);
        }
        self.give_up(i, why);
    }

    /// Counts what device `i` still waits for as errors of kind `why`, then closes it.
    pub(super) fn give_up(&mut self, i: usize, why: &str) {
        let d = &mut self.devs[i];
        for p in d.inflight.drain(..) {
            if p.prime {
                self.shared.error(None, why, 1);
            } else {
                self.shared.error(Some(p.op), why, 1);
            }
        }
        d.sends_inflight = 0;
        d.done_sending = true;
        if !self.running && d.phase != Phase::Done {
            // Setup is over for this device either way; the run will be called off.
            self.setup_left = self.setup_left.saturating_sub(1);
        }
        self.close(i);
    }

    /// A request unanswered for `--request-timeout-secs` ends its device.
    pub(super) fn scan_timeouts(&mut self, now: u64) {
        let limit = self.shared.request_timeout_ns;
        for i in 0..self.devs.len() {
            let late = self.devs[i]
                .inflight
                .front()
                .is_some_and(|p| now.saturating_sub(p.written) > limit);
            if late {
                self.fail(i, "timeout: no reply within --request-timeout-secs");
            }
        }
    }

    /// The drain deadline passed: whatever is still outstanding is a timeout.
    pub(super) fn abandon_all(&mut self) {
        for i in 0..self.devs.len() {
            if self.devs[i].phase != Phase::Done {
                self.give_up(i, "timeout: no reply before the drain deadline");
            }
        }
    }
}
