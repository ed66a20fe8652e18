//! The `reconnect` scenario: roaming devices drop their connections, the writers write
//! while they are away, then every roaming device resumes and must catch up.

use super::device::Phase;
use super::Worker;
use crate::bench::poll;
use crate::bench::stats::{Counters, Series};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

impl Worker<'_> {
    /// Drives `reconnect`'s phases: every roaming device drops its connection abruptly;
    /// once all threads have, the writers write; once every write is acknowledged, every
    /// roaming device reconnects with its resume token.
    pub(super) fn advance_reconnect(&mut self, now: u64) {
        let run = self.run;
        let Some(plan) = run.reconnect.as_ref() else {
            return;
        };
        let c = &run.counters;
        if !self.disconnected {
            self.disconnected = true;
            let mut n = 0;
            for i in 0..self.devs.len() {
                if self.devs[i].spec.roams && self.devs[i].phase == Phase::Ready {
                    self.drop_abruptly(i);
                    n += 1;
                }
            }
            Counters::add(&c.disconnected, n);
        }
        if !self.writers_started
            && Counters::get(&c.disconnected) >= plan.devices
            && self.while_away_done()
        {
            self.writers_started = true;
            for i in 0..self.devs.len() {
                if !self.devs[i].spec.roams {
                    self.fill(i, now);
                    self.flush(i);
                }
            }
        }
        if self.writers_started
            && !self.reconnect_started
            && self.shared.senders_live.load(Ordering::Relaxed) == 0
        {
            self.reconnect_started = true;
            let _ =
                c.reconnect_start_ns
                    .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
            for i in 0..self.devs.len() {
                if self.devs[i].phase == Phase::Away {
                    self.devs[i].reconnecting = true;
                    self.devs[i].phase = Phase::Queued;
                    self.queue.push_back(i);
                }
            }
        }
    }

    /// Whether `--while-away-cmd` has run (or there is none). The first thread to get here
    /// runs it, blocking its own loop (its devices are away, its writers not started);
    /// the others wait for it. A command that fails counts as an error and the run goes on.
    fn while_away_done(&mut self) -> bool {
        let Some(cmd) = self
            .run
            .reconnect
            .as_ref()
            .and_then(|p| p.while_away_cmd.as_ref())
        else {
            return true;
        };
        let state = &self.run.counters.while_away;
        if state
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let status = std::process::Command::new("sh").arg("-c").arg(cmd).status();
            let ok = status.as_ref().is_ok_and(|s| s.success());
            if !ok {
                self.shared.error(None, "--while-away-cmd failed", 1);
                eprintln!("--while-away-cmd {cmd:?}: {status:?}");
            }
            state.store(if ok { 2 } else { 3 }, Ordering::Release);
        }
        state.load(Ordering::Acquire) >= 2
    }

    /// Whether device `i` is back on another node than it left (`--resume-url`), where a
    /// fresh session is expected.
    pub(super) fn elsewhere(&self, i: usize) -> bool {
        self.devs[i].reconnecting
            && self
                .run
                .reconnect
                .as_ref()
                .is_some_and(|p| p.resume_at.is_some())
    }

    /// Closes with a RST and no Close frame: a phone that lost its network.
    pub(super) fn drop_abruptly(&mut self, i: usize) {
        let d = &mut self.devs[i];
        if let Some(s) = d.stream.take() {
            let _ = self.epoll.delete(s.socket().as_raw_fd());
            let _ = poll::reset_on_close(s.socket().as_raw_fd());
        }
        d.phase = Phase::Away;
        d.out.clear();
        d.out_pos = 0;
        d.want_write = false;
        d.rx.clear();
        d.frag.clear();
        d.frag_open = false;
    }

    pub(super) fn check_caught_up(&mut self, i: usize, now: u64) {
        let run = self.run;
        let Some(plan) = run.reconnect.as_ref() else {
            return;
        };
        let d = &self.devs[i];
        if !d.reconnecting || d.phase != Phase::Ready || d.away_received < plan.away {
            return;
        }
        let c = &run.counters;
        Counters::add(&c.caught_up, 1);
        c.last_caught_up_ns.fetch_max(now, Ordering::Relaxed);
        let start = c.reconnect_start_ns.load(Ordering::Relaxed);
        self.local.record(Series::CatchUp, start, now);
        self.close(i);
    }
}
