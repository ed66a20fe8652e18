//! The gateway's messages to a device: each reply matched against the head of its FIFO,
//! setup (subscribes, primes) driven to ready, and records checked for order and counted.

use super::device::{Pending, Phase};
use super::Worker;
use crate::bench::gateway::proto::{self, Inbound, Stamp, StampKind};
use crate::bench::poll::now_ns;
use crate::bench::stats::{Counters, Op, Series};

impl Worker<'_> {
    pub(super) fn message(&mut self, i: usize, bytes: &[u8]) {
        let now = now_ns();
        let m = match proto::parse(bytes) {
            Ok(m) => m,
            Err(e) => return self.fail(i, &format!("protocol: {e}")),
        };
        match m.op.as_ref() {
            "record" if m.id.is_none() => self.on_record(i, &m, now),
            "sent" => self.on_sent(i, &m, now),
            "ack" => self.on_ack(i, &m),
            "welcome" => self.on_welcome(i, &m, now),
            "error" => self.on_error(i, &m, now),
            "gap" => self.shared.error(None, "server: history_gap", 1),
            "pong" => {}
            other => {
                let why = format!("protocol: unexpected {other:?} frame");
                self.shared.error(None, &why, 1);
            }
        }
    }

    /// The request a reply answers: the head of the FIFO, whose id must match.
    pub(super) fn pop_reply(&mut self, i: usize, m: &Inbound<'_>) -> Option<Pending> {
        let d = &mut self.devs[i];
        let id = proto::numeric_id(m.id.as_deref());
        match d.inflight.front() {
            Some(p) if Some(p.id) == id => d.inflight.pop_front(),
            front => {
                let why = format!(
                    "protocol: {} with id {:?} while waiting for {:?}",
                    m.op,
                    m.id,
                    front.map(|p| p.id)
                );
                self.fail(i, &why);
                None
            }
        }
    }

    pub(super) fn on_welcome(&mut self, i: usize, m: &Inbound<'_>, now: u64) {
        let Some(p) = self.pop_reply(i, m) else {
            return;
        };
        Counters::add(&self.shared.counters.acknowledged[Op::Hello as usize], 1);
        self.local.record(Series::Hello, p.start, now);
        let d = &mut self.devs[i];
        d.resume = m.token.clone();
        if d.reconnecting {
            if m.resumed {
                Counters::add(&self.run.counters.resumed, 1);
                return self.become_ready(i, now);
            }
            Counters::add(&self.run.counters.not_resumed, 1);
            if !self.elsewhere(i) {
                self.shared
                    .error(None, "resume refused (a fresh session)", 1);
            }
        }
        self.start_setup(i, now);
    }

    /// Subscribes (and, first time round, primes).
    pub(super) fn start_setup(&mut self, i: usize, now: u64) {
        let elsewhere = self.elsewhere(i);
        let d = &mut self.devs[i];
        d.phase = Phase::Setup;
        let mut subscribes = 0;
        for s in 0..d.subs.len() {
            let id = d.take_id();
            // Inboxes, and the conversations of roaming devices, from their start: a
            // pointer or prime written before this subscribe (by another device) must
            // arrive too.
            // A device back on another node (a fresh session there) starts at its
            // committed cursor, as an app would.
            let from =
                (d.subs[s].inbox || (d.spec.roams && !(d.reconnecting && elsewhere))).then_some(1);
            let frame = proto::subscribe(id, &d.subs[s].topic, from);
            d.request(Op::Subscribe, id, &frame, now);
            subscribes += 1;
        }
        Counters::add(
            &self.shared.counters.sent[Op::Subscribe as usize],
            subscribes,
        );
        d.setup_pending = subscribes as u32;
        if !d.reconnecting {
            for k in 0..d.spec.primes.len() {
                let conv = d.spec.primes[k];
                d.queue_send(self.run, &mut self.json, conv, StampKind::Prime, now, now);
                d.setup_pending += 1;
                Counters::add(&self.run.counters.prime_sent, 1);
            }
            if d.spec.roams {
                d.need_prime = true;
                d.setup_pending += 1;
            }
        }
        self.maybe_ready(i, now);
    }

    pub(super) fn maybe_ready(&mut self, i: usize, now: u64) {
        if self.devs[i].phase == Phase::Setup && self.devs[i].setup_pending == 0 {
            self.become_ready(i, now);
        }
    }

    pub(super) fn become_ready(&mut self, i: usize, now: u64) {
        let d = &mut self.devs[i];
        if d.phase.holds_slot() {
            self.slots_used -= 1;
        }
        d.phase = Phase::Ready;
        if !self.running {
            self.setup_left -= 1;
        } else {
            self.check_caught_up(i, now);
            self.fill(i, now);
        }
    }

    pub(super) fn on_ack(&mut self, i: usize, m: &Inbound<'_>) {
        let Some(p) = self.pop_reply(i, m) else {
            return;
        };
        let now = now_ns();
        match p.op {
            Op::Subscribe => {
                Counters::add(
                    &self.shared.counters.acknowledged[Op::Subscribe as usize],
                    1,
                );
                let d = &mut self.devs[i];
                let topic = m.topic.as_deref().unwrap_or("");
                if let Some(s) = d.subs.iter_mut().find(|s| s.topic == topic) {
                    if s.last_seq.is_none() {
                        s.last_seq = Some(m.from_seq.unwrap_or(1).saturating_sub(1));
                    }
                }
            }
            Op::Commit => {
                Counters::add(&self.shared.counters.acknowledged[Op::Commit as usize], 1);
            }
            other => {
                let why = format!("protocol: ack for a {} request", other.name());
                return self.fail(i, &why);
            }
        }
        let d = &mut self.devs[i];
        d.setup_pending = d.setup_pending.saturating_sub(1);
        self.maybe_ready(i, now);
    }

    pub(super) fn on_sent(&mut self, i: usize, m: &Inbound<'_>, now: u64) {
        let Some(p) = self.pop_reply(i, m) else {
            return;
        };
        if m.sent.as_ref().is_some_and(|s| s.duplicate) {
            Counters::add(&self.run.counters.sent_duplicates, 1);
        }
        if p.prime {
            Counters::add(&self.run.counters.prime_acked, 1);
            let d = &mut self.devs[i];
            d.setup_pending = d.setup_pending.saturating_sub(1);
            return self.maybe_ready(i, now);
        }
        Counters::add(&self.shared.counters.acknowledged[Op::Send as usize], 1);
        self.local.record(Series::Send, p.start, now);
        self.devs[i].sends_inflight -= 1;
        self.fill(i, now);
    }

    pub(super) fn on_error(&mut self, i: usize, m: &Inbound<'_>, now: u64) {
        let kind = m
            .error
            .as_ref()
            .map(|e| e.kind())
            .unwrap_or_else(|| "server: error without a body".into());
        if m.id.is_none() {
            return self.shared.error(None, &kind, 1);
        }
        let Some(p) = self.pop_reply(i, m) else {
            return;
        };
        if p.op == Op::Send && !p.prime {
            self.devs[i].sends_inflight -= 1;
            let retryable = m.error.as_ref().is_some_and(|e| e.retryable);
            if retryable && self.run.reconnect.is_some() {
                // A writer does what an app does with "retry": the same send again
                // shortly (a leader is being elected), under its own client_msg_id.
                return self.retry_send(i, p.seq, p.start, now);
            }
            self.shared.error(Some(Op::Send), &kind, 1);
            return self.fill(i, now);
        }
        // A setup step was refused: the device cannot take part.
        self.devs[i].inflight.push_front(p);
        self.fail(i, &kind);
    }

    pub(super) fn on_record(&mut self, i: usize, m: &Inbound<'_>, now: u64) {
        let topic = m.topic.as_deref().unwrap_or("");
        let Some(s) = self.devs[i].subs.iter().position(|s| s.topic == topic) else {
            let why = format!("protocol: record for a topic not subscribed ({topic})");
            return self.shared.error(None, &why, 1);
        };
        let run = self.run;
        let c = &run.counters;
        let roaming = run.reconnect.is_some();
        let (mut delivered, mut echoes, mut primes) = (0u64, 0u64, 0u64);
        let mut commit_at = None;
        for r in &m.records {
            let d = &mut self.devs[i];
            let sub = &mut d.subs[s];
            let last = sub.last_seq.unwrap_or(r.seq.saturating_sub(1));
            if r.seq <= last {
                Counters::add(&c.duplicates, 1);
                continue;
            }
            if r.seq > last + 1 {
                Counters::add(&c.holes, r.seq - last - 1);
            }
            sub.last_seq = Some(r.seq);
            if sub.inbox {
                Counters::add(&c.pointers, 1);
                continue;
            }
            let stamp = r.payload.as_deref().and_then(Stamp::from_payload_b64);
            let Some(stamp) = stamp else {
                self.shared
                    .error(None, "protocol: record without a bench stamp", 1);
                continue;
            };
            match stamp.kind {
                StampKind::Prime => {
                    primes += 1;
                    if d.need_prime {
                        d.need_prime = false;
                        commit_at = Some(r.seq + 1);
                    }
                }
                StampKind::Measured if stamp.sender == d.spec.index => echoes += 1,
                StampKind::Measured => {
                    delivered += 1;
                    if !roaming {
                        self.local.record(Series::Delivery, stamp.sent_ns, now);
                    }
                    if d.reconnecting {
                        d.away_received += 1;
                    }
                }
            }
        }
        Counters::add(&self.shared.counters.delivered, delivered);
        Counters::add(&c.echoes, echoes);
        Counters::add(&c.prime_deliveries, primes);
        if let Some(seq) = commit_at {
            // The position a roaming device resumes from: everything up to its prime.
            let d = &mut self.devs[i];
            let id = d.take_id();
            let frame = proto::commit(id, topic, seq);
            d.request(Op::Commit, id, &frame, now);
            Counters::add(&self.shared.counters.sent[Op::Commit as usize], 1);
        }
        self.check_caught_up(i, now);
    }
}
