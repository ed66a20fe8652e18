//! One simulated device: its phase, its sockets' buffers, what it has in flight (replies
//! come in request order, so a FIFO), its subscriptions and its send schedule.

use super::{DeviceSpec, GwRun};
use crate::bench::gateway::proto::{Stamp, StampKind};
use crate::bench::gateway::ws::{self, opcode};
use crate::bench::size_dist::xorshift;
use crate::bench::stats::Op;
use crate::bench::transport::Stream;
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Waiting for a connect slot.
    Queued,
    Connecting,
    Upgrading,
    Hello,
    /// Subscribes, primes and (reconnect) the commit outstanding.
    Setup,
    Ready,
    /// `reconnect`: disconnected on purpose, waiting for the mass reconnect.
    Away,
    Done,
}

impl Phase {
    /// Holding one of the thread's connect slots.
    pub(super) fn holds_slot(self) -> bool {
        matches!(
            self,
            Phase::Connecting | Phase::Upgrading | Phase::Hello | Phase::Setup
        )
    }
}

pub(super) struct Pending {
    pub(super) op: Op,
    pub(super) id: u64,
    /// Latency is measured from here (the intended send time in open loop).
    pub(super) start: u64,
    /// When it was written; request timeouts count from here.
    pub(super) written: u64,
    pub(super) prime: bool,
    /// A send's stamp sequence (its `client_msg_id` is `<device>-<seq>`); 0 otherwise.
    pub(super) seq: u64,
}

pub(super) struct Sub {
    pub(super) topic: String,
    pub(super) inbox: bool,
    /// Last seq received; set from the subscribe `ack` (its `from_seq` - 1).
    pub(super) last_seq: Option<u64>,
}

pub(super) struct Device {
    pub(super) spec: DeviceSpec,
    pub(super) stream: Option<Stream>,
    pub(super) phase: Phase,
    /// Second connection of a `reconnect` device: hello presents the resume token.
    pub(super) reconnecting: bool,
    pub(super) upgrade_key: String,
    pub(super) out: Vec<u8>,
    pub(super) out_pos: usize,
    pub(super) want_write: bool,
    /// Received bytes not yet a complete frame (usually empty).
    pub(super) rx: Vec<u8>,
    /// A fragmented message being assembled.
    pub(super) frag: Vec<u8>,
    pub(super) frag_open: bool,
    pub(super) inflight: VecDeque<Pending>,
    pub(super) next_id: u64,
    pub(super) subs: Vec<Sub>,
    pub(super) setup_pending: u32,
    /// `reconnect` setup: waiting for its conversation's prime, to commit past it.
    pub(super) need_prime: bool,
    pub(super) resume: Option<String>,
    pub(super) seq: u64,
    pub(super) next_due: u64,
    pub(super) scheduled: bool,
    pub(super) sends_inflight: usize,
    pub(super) done_sending: bool,
    pub(super) sender_counted: bool,
    pub(super) away_received: u64,
    pub(super) rng: u64,
    /// `reconnect` writer: sends refused as retryable, as (due, seq, start), oldest first;
    /// each goes again with its `client_msg_id` (dedup makes a stored one a duplicate).
    pub(super) retries: VecDeque<(u64, u64, u64)>,
}

impl Device {
    pub(super) fn new(spec: DeviceSpec) -> Device {
        let subs = spec
            .subs
            .iter()
            .map(|(topic, inbox)| Sub {
                topic: topic.clone(),
                inbox: *inbox,
                last_seq: None,
            })
            .collect();
        Device {
            rng: 0x2545_f491_4f6c_dd1d ^ (u64::from(spec.index) + 1).wrapping_mul(0x9e37_79b9),
            spec,
            stream: None,
            phase: Phase::Queued,
            reconnecting: false,
            upgrade_key: String::new(),
            out: Vec::new(),
            out_pos: 0,
            want_write: false,
            rx: Vec::new(),
            frag: Vec::new(),
            frag_open: false,
            inflight: VecDeque::new(),
            next_id: 0,
            subs,
            setup_pending: 0,
            need_prime: false,
            resume: None,
            seq: 0,
            next_due: 0,
            scheduled: false,
            sends_inflight: 0,
            done_sending: false,
            sender_counted: false,
            away_received: 0,
            retries: VecDeque::new(),
        }
    }

    pub(super) fn sends(&self) -> bool {
        !self.spec.targets.is_empty()
    }

    pub(super) fn random(&mut self) -> u64 {
        xorshift(&mut self.rng)
    }

    pub(super) fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Frames `json` as a masked text message into the output buffer.
    pub(super) fn queue_text(&mut self, json: &[u8]) {
        let mask = (self.random() as u32).to_ne_bytes();
        ws::encode_client_frame(opcode::TEXT, json, mask, &mut self.out);
    }

    /// Queues a send to conversation `conv` (the next sequence number, a size drawn from the
    /// run's distribution, `kind` and `start` in its stamp) and expects its `sent`; `json` is
    /// the worker's scratch buffer. Returns the payload size.
    pub(super) fn queue_send(
        &mut self,
        run: &GwRun,
        json: &mut Vec<u8>,
        conv: usize,
        kind: StampKind,
        start: u64,
        now: u64,
    ) -> usize {
        self.seq += 1;
        self.queue_send_numbered(run, json, conv, kind, self.seq, start, now)
    }

    /// [`Device::queue_send`] of the send numbered `seq` (a retry keeps its number).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn queue_send_numbered(
        &mut self,
        run: &GwRun,
        json: &mut Vec<u8>,
        conv: usize,
        kind: StampKind,
        seq: u64,
        start: u64,
        now: u64,
    ) -> usize {
        let id = self.take_id();
        let stamp = Stamp {
            kind,
            sender: self.spec.index,
            seq,
            sent_ns: start,
        };
        json.clear();
        let size = run.sizes.sample(&mut self.rng) as usize;
        run.templates[conv].write(json, &stamp, size, &run.filler_b64, &self.spec.device, id);
        self.queue_text(json);
        self.inflight.push_back(Pending {
            op: Op::Send,
            id,
            start,
            written: now,
            prime: kind == StampKind::Prime,
            seq,
        });
        size
    }

    /// Queues a request written with id `id` (from [`Device::take_id`]) and expects its reply.
    pub(super) fn request(&mut self, op: Op, id: u64, json: &str, now: u64) {
        self.queue_text(json.as_bytes());
        self.inflight.push_back(Pending {
            op,
            id,
            start: now,
            written: now,
            prime: false,
            seq: 0,
        });
    }
}
