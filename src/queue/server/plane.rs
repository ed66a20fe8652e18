//! One shard's part of the queue plane: the brokers of the slots it owns, their command
//! logs, the shard's timer loop, and the connections it serves.
//!
//! A command for a slot is applied on the slot's owner, synchronously, in arrival order; if
//! it changed state it is appended to the slot's command log (`queue/slot-NNN/wal`) and the
//! reply waits for that append to be durable. Commands from other shards arrive over the
//! mesh and their replies go back the same way once durable.

use super::exchanges::{self, ExchangeOp, META_SHARD};
use super::mesh::{QueueMsg, QueueReply, ShardReport};
use super::outbound::Outbound;
use super::unsynced::Unsynced;
use super::waiters::{Answer, Waiter, Waiters};
use super::{snapshot, wal};
use crate::queue::broker::exchange::Exchanges;
use crate::queue::broker::{Broker, BrokerConfig, Command, ConsumerRef, Effect, Outcome};
use crate::queue::message::IdGenerator;
use crate::queue::message::Message;
use crate::queue::protocol::reply;
use crate::server::shard_main::ShardMsg;
use boltq_io::event::Event;
use boltq_io::{LogRef, Store};
use boltq_shards::{Incoming, ReplyToken, Shard, ShardId};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

/// How long a shard waits for another shard to answer a queue command before the client
/// gets an error. Generous: the answer waits for the owner's fdatasync.
pub const REMOTE_TIMEOUT_MS: u64 = 30_000;
/// Timer resolution: deadlines are rounded up to this, so one wake-up serves many timers.
pub const TICK_NS: i64 = 10_000_000;

struct SlotState {
    broker: Broker,
    /// Command log and snapshot log; `None` in memory mode.
    logs: Option<SlotLogs>,
}

struct SlotLogs {
    wal: LogRef,
    snap: LogRef,
    /// Command bytes logged since the last snapshot.
    bytes_since_snapshot: u64,
    last_snapshot_bytes: u64,
    last_snapshot_number: u64,
    snapshotting: bool,
    /// Connections with a durable subscription in this slot: their disconnect changes
    /// durable state (the subscription starts backlogging), so it is logged.
    durable_consumers: std::collections::HashSet<ConsumerRef>,
}

/// Keeps `durable_consumers` current; true when this command is the disconnect of one of
/// them (which must then be logged).
fn track_durable_consumers(logs: &mut SlotLogs, cmd: &Command, outcome: &Outcome) -> bool {
    match (cmd, outcome) {
        (
            Command::Subscribe {
                durable: true,
                consumer,
                ..
            },
            Outcome::Subscribed { .. },
        ) => {
            logs.durable_consumers.insert(*consumer);
            false
        }
        (Command::Disconnect { consumer }, _) => logs.durable_consumers.remove(consumer),
        (Command::DisconnectAll, _) => {
            let any = !logs.durable_consumers.is_empty();
            logs.durable_consumers.clear();
            any
        }
        _ => false,
    }
}

impl SlotLogs {
    /// Compaction rule: snapshot once the commands since the last snapshot outweigh both the
    /// threshold and the last snapshot itself, so rewriting the state costs at most about as
    /// much as the commands it replaces (amortised), and the log stays within about twice
    /// the state plus the threshold.
    fn snapshot_due(&self, threshold_bytes: u64) -> bool {
        threshold_bytes > 0
            && !self.snapshotting
            && self.bytes_since_snapshot > threshold_bytes.max(self.last_snapshot_bytes)
    }
}

type RemoteReply =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<ShardMsg, boltq_shards::MeshError>>>>;

/// A command on its way: applied here (outcome known, durability pending) or sent to its
/// owner shard (answer pending).
pub enum Submitted {
    Local(Outcome, Option<u64>),
    /// Applied here; the reply waits for an fdatasync whatever the policy (confirm mode).
    LocalSynced(Outcome, Option<u64>),
    Remote(ShardId, RemoteReply),
    /// A long-poll parked on this shard.
    Parked(Rc<Parked>),
}

/// The answer slot of a long-poll parked on this shard.
#[derive(Default)]
pub struct Parked {
    answer: RefCell<Option<(Outcome, Option<u64>)>>,
    ready: Event,
}

impl Submitted {
    /// The outcome once it is durable.
    pub async fn outcome(self, plane: &Plane) -> Outcome {
        match self {
            Submitted::Local(outcome, lsn) => plane.when_durable(outcome, lsn).await,
            Submitted::LocalSynced(outcome, lsn) => plane.when_synced(outcome, lsn).await,
            Submitted::Parked(parked) => loop {
                let ticket = parked.ready.ticket();
                let answer = parked.answer.borrow_mut().take();
                if let Some((outcome, lsn)) = answer {
                    break plane.when_durable(outcome, lsn).await;
                }
                parked.ready.wait(ticket).await;
            },
            Submitted::Remote(owner, reply) => match reply.await {
                Ok(ShardMsg::QueueReply(QueueReply::Applied(outcome))) => outcome,
                Ok(_) => Outcome::Error("internal error: unexpected reply between shards".into()),
                Err(e) => Outcome::Error(format!("shard {owner} did not answer: {e}")),
            },
        }
    }
}

/// An exchange change on its way to (or applied on) the metadata shard.
pub enum ExchangeSubmitted {
    Local(Result<(), String>, Option<u64>),
    Remote(RemoteReply),
}

impl ExchangeSubmitted {
    pub async fn result(self, plane: &Plane) -> Result<(), String> {
        match self {
            ExchangeSubmitted::Local(result, lsn) => plane.exchange_durable(result, lsn).await,
            ExchangeSubmitted::Remote(reply) => match reply.await {
                Ok(ShardMsg::QueueReply(QueueReply::Exchange(r))) => r,
                Ok(_) => Err("internal error: unexpected reply between shards".into()),
                Err(e) => Err(format!("metadata shard did not answer: {e}")),
            },
        }
    }
}

/// Dead-letter counts of this shard plus the answers of the others.
pub struct DlqListGather {
    local: std::collections::BTreeMap<String, u64>,
    remote: Vec<RemoteReply>,
}

impl DlqListGather {
    pub async fn merged(self) -> std::collections::BTreeMap<String, u64> {
        let mut total = self.local;
        for r in self.remote {
            if let Ok(ShardMsg::QueueReply(QueueReply::DlqCounts(c))) = r.await {
                total.extend(c);
            }
        }
        total
    }
}

/// A read of dead letters on the owner of their queue.
pub struct DlqReadSubmitted {
    queue: String,
    offset: u64,
    local: Option<Vec<Message>>,
    remote: Option<RemoteReply>,
}

impl DlqReadSubmitted {
    pub async fn messages(self) -> (String, u64, Vec<Message>) {
        let messages = match (self.local, self.remote) {
            (Some(m), _) => m,
            (None, Some(r)) => match r.await {
                Ok(ShardMsg::QueueReply(QueueReply::DlqMessages(m))) => m,
                _ => Vec::new(),
            },
            (None, None) => Vec::new(),
        };
        (self.queue, self.offset, messages)
    }
}

/// This shard's report plus the answers of the others.
pub struct StatsGather {
    local: ShardReport,
    remote: Vec<RemoteReply>,
}

impl StatsGather {
    pub async fn merged(self) -> ShardReport {
        let mut total = self.local;
        for r in self.remote {
            match r.await {
                Ok(ShardMsg::QueueReply(QueueReply::Report(s))) => total.merge(&s),
                _ => total.shards_missing += 1,
            }
        }
        total
    }
}

#[derive(Clone, Copy)]
enum CmdKind {
    Consume,
    Other,
}

pub struct Plane {
    pub shard: Shard<ShardMsg>,
    store: Option<Rc<Store>>,
    slots: RefCell<BTreeMap<u16, Rc<RefCell<SlotState>>>>,
    ids: RefCell<IdGenerator>,
    conns: RefCell<HashMap<u64, Rc<Outbound>>>,
    conn_ids: Cell<u64>,
    /// High bits of connection ids: random per process, so a consumer recorded in the log by
    /// an earlier process never names a connection of this one.
    boot_id: u64,
    timers_changed: Event,
    cfg: BrokerConfig,
    api_key: Option<String>,
    /// This shard's replica of the exchange table (the writer's own table on shard 0).
    exchanges: RefCell<Rc<Exchanges>>,
    /// The metadata log; only on the metadata shard in disk mode.
    meta_log: Option<LogRef>,
    /// Per-slot command bytes that make a snapshot due (0 = never compact).
    compaction_threshold_bytes: u64,
    /// `queue.report_unroutable`: refuse exchange publishes that match no binding.
    report_unroutable: bool,
    waiters: RefCell<Waiters>,
    /// True while parked consumers are being served (serving applies commands, which
    /// would otherwise try to serve again).
    serving_waiters: Cell<bool>,
    /// Publishes not yet durable: what a delivery has to wait for (see `unsynced.rs`).
    unsynced: RefCell<Unsynced>,
    /// The last message pushed, encoded (see `reply::PushHead`).
    push_head: RefCell<Option<reply::PushHead>>,
}

fn slot_log_name(slot: u16) -> String {
    format!("queue/slot-{slot:03}/wal")
}

pub fn now_ns() -> i64 {
    boltq_io::store::now_ns()
}

impl Plane {
    /// Opens (and replays) every slot this shard owns, then starts the timer loop.
    pub async fn start(
        shard: Shard<ShardMsg>,
        store: Option<Rc<Store>>,
        cfg: BrokerConfig,
        api_key: Option<String>,
        random: u64,
        compaction_threshold_bytes: u64,
        report_unroutable: bool,
    ) -> Result<Rc<Plane>, String> {
        let mut prefix = [0u8; 7];
        prefix.copy_from_slice(&(random ^ ((shard.id() as u64) << 8)).to_be_bytes()[1..]);
        let (exchanges, meta_log) = match (&store, shard.id() == META_SHARD) {
            (Some(store), true) => {
                let log = store
                    .open_log(exchanges::META_LOG)
                    .await
                    .map_err(|e| format!("open exchange metadata: {e}"))?;
                let table = exchanges::recover(store, &log)
                    .await
                    .map_err(|e| format!("recover exchange metadata: {e}"))?;
                (table, Some(log))
            }
            _ => (Exchanges::new(), None),
        };
        let plane = Rc::new(Plane {
            shard: shard.clone(),
            store,
            slots: RefCell::new(BTreeMap::new()),
            ids: RefCell::new(IdGenerator::new(prefix)),
            conns: RefCell::new(HashMap::new()),
            conn_ids: Cell::new(0),
            boot_id: (random >> 32) << 32,
            timers_changed: Event::default(),
            cfg,
            api_key,
            exchanges: RefCell::new(Rc::new(exchanges)),
            meta_log,
            compaction_threshold_bytes,
            report_unroutable,
            waiters: RefCell::new(Waiters::default()),
            serving_waiters: Cell::new(false),
            unsynced: RefCell::new(Unsynced::default()),
            push_head: RefCell::new(None),
        });
        if shard.id() == META_SHARD {
            plane.broadcast_exchanges();
        }
        for slot in 0..boltq_shards::SLOTS {
            if boltq_shards::owner_of_slot(slot, shard.count()) == shard.id() {
                plane.open_slot(slot).await?;
            }
        }
        boltq_shards::spawn(Rc::clone(&plane).timer_loop()).detach();
        Ok(plane)
    }

    async fn open_slot(&self, slot: u16) -> Result<(), String> {
        let (broker, logs) = match &self.store {
            None => (Broker::new(self.cfg.clone()), None),
            Some(store) => {
                let (broker, logs) = self
                    .recover_slot(store, slot)
                    .await
                    .map_err(|e| format!("recover queue slot {slot}: {e}"))?;
                (broker, Some(logs))
            }
        };
        self.slots
            .borrow_mut()
            .insert(slot, Rc::new(RefCell::new(SlotState { broker, logs })));
        Ok(())
    }

    /// Newest complete snapshot + every command after it.
    async fn recover_slot(
        &self,
        store: &Rc<Store>,
        slot: u16,
    ) -> Result<(Broker, SlotLogs), String> {
        let open = |name: String| async move {
            store
                .open_log(&name)
                .await
                .map_err(|e| format!("open {name}: {e}"))
        };
        let wal = open(slot_log_name(slot)).await?;
        let snap = open(format!("queue/slot-{slot:03}/snap")).await?;
        // Numbering continues after the highest snapshot number seen in any chunk, not the
        // newest complete one (issue 13 item 3: numbers stay unique across crashes).
        let loaded = snapshot::load_newest(store, &snap, &self.cfg).await?;
        let number = loaded.last_number;
        let (mut broker, from, snapshot_bytes) = match loaded.restored {
            Some(r) => (r.broker, r.wal_seq + 1, r.bytes),
            None => (Broker::new(self.cfg.clone()), 1, 0),
        };
        let replayed = wal::replay(store, &wal, from, &mut broker).await?;
        if broker.has_live_subscriptions() {
            // Subscriptions restored or replayed live belonged to connections of an earlier
            // process. Logged, so that later replays see the same offline period.
            let cmd = Command::DisconnectAll;
            broker.apply(&cmd);
            wal::append(store, &wal, &cmd)?;
        }
        Ok((
            broker,
            SlotLogs {
                wal,
                snap,
                bytes_since_snapshot: replayed.bytes,
                last_snapshot_bytes: snapshot_bytes,
                last_snapshot_number: number,
                snapshotting: false,
                durable_consumers: Default::default(),
            },
        ))
    }

    pub fn owner_of(&self, slot: u16) -> ShardId {
        boltq_shards::owner_of_slot(slot, self.shard.count())
    }

    pub fn next_id(&self, slot: u16) -> crate::queue::message::MessageId {
        self.ids.borrow_mut().next(slot)
    }

    pub fn report_unroutable(&self) -> bool {
        self.report_unroutable
    }

    pub fn requires_auth(&self) -> bool {
        self.api_key.is_some()
    }

    /// Compares a presented key with the configured one in constant time (no early exit on
    /// the first differing byte, so timing reveals nothing about the key).
    pub fn key_matches(&self, presented: &str) -> bool {
        let Some(key) = &self.api_key else {
            return true;
        };
        let (a, b) = (key.as_bytes(), presented.as_bytes());
        let mut diff = u8::from(a.len() != b.len());
        for (i, x) in a.iter().enumerate() {
            diff |= x ^ b.get(i).copied().unwrap_or(0);
        }
        diff == 0
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.cfg
    }

    // --- connections --------------------------------------------------------------------

    pub fn register_conn(&self, out: Rc<Outbound>) -> ConsumerRef {
        let n = self.conn_ids.get() + 1;
        self.conn_ids.set(n);
        let conn = self.boot_id | n;
        self.conns.borrow_mut().insert(conn, out);
        ConsumerRef {
            shard: self.shard.id() as u16,
            conn,
        }
    }

    /// Forgets a closed connection and tells every shard, so its live subscriptions end.
    pub fn unregister_conn(&self, consumer: ConsumerRef) {
        if let Some(out) = self.conns.borrow_mut().remove(&consumer.conn) {
            out.close();
        }
        for dest in 0..self.shard.count() {
            let msg = ShardMsg::Queue(QueueMsg::Disconnect { consumer });
            if dest == self.shard.id() {
                self.disconnect_local(consumer);
            } else if self.shard.send(dest, msg).is_err() {
                log::warn!("shard {dest} outbox full: disconnect of a subscriber not sent");
            }
        }
    }

    fn disconnect_local(&self, consumer: ConsumerRef) {
        let gone = self.waiters.borrow_mut().take_of(consumer);
        for w in gone {
            (w.answer)(Outcome::Empty, None);
        }
        let slots: Vec<u16> = self.slots.borrow().keys().copied().collect();
        for slot in slots {
            let _ = self.apply_local(slot, Command::Disconnect { consumer });
        }
    }

    // --- applying commands --------------------------------------------------------------

    /// Applies `cmd` on this shard, which must own `slot`. Returns the outcome and the
    /// journal position the reply must wait for (None: nothing was written).
    pub fn apply_local(&self, slot: u16, cmd: Command) -> (Outcome, Option<u64>) {
        assert_eq!(
            self.owner_of(slot),
            self.shard.id(),
            "slot {slot} applied off its owner"
        );
        let cell = Rc::clone(
            self.slots
                .borrow()
                .get(&slot)
                .expect("owned slots are open"),
        );
        let cmd_kind = if matches!(cmd, Command::Consume { .. }) {
            CmdKind::Consume
        } else {
            CmdKind::Other
        };
        // Refuse before applying: a command applied in memory but not logged would be
        // visible now and gone after a restart (and a client retry would duplicate it).
        if let Some(store) = &self.store {
            if let Err(e) = store.check_room() {
                if !matches!(cmd, Command::Tick { .. } | Command::Disconnect { .. }) {
                    return (Outcome::Error(format!("storage write: {e}")), None);
                }
            }
        }
        let (outcome, effects, lsn) = {
            let mut st = cell.borrow_mut();
            let st = &mut *st;
            let (outcome, effects) = st.broker.apply(&cmd);
            let durable_disconnect = st
                .logs
                .as_mut()
                .is_some_and(|logs| track_durable_consumers(logs, &cmd, &outcome));
            let lsn = match (&self.store, &mut st.logs) {
                (Some(store), Some(logs))
                    if wal::must_log(&cmd, &outcome) || durable_disconnect =>
                {
                    match wal::append(store, &logs.wal, &cmd) {
                        Ok((lsn, bytes)) => {
                            logs.bytes_since_snapshot += bytes;
                            Some(lsn)
                        }
                        Err(e) => {
                            // The state changed in memory but could not be logged: refuse to
                            // acknowledge, and say why. The storage layer has failed; it
                            // accepts nothing more, so memory and log cannot drift further.
                            return (Outcome::Error(format!("storage write: {e}")), None);
                        }
                    }
                }
                _ => None,
            };
            (outcome, effects, lsn)
        };
        let lsn = self.lsn_to_wait_for(&cmd, &outcome, lsn);
        self.maybe_snapshot(slot, &cell);
        if !matches!(cmd_kind, CmdKind::Consume) {
            self.serve_waiters(slot);
        }
        self.timers_changed.notify();
        for effect in effects {
            self.route_effect(effect);
        }
        (outcome, lsn)
    }

    /// The journal position the reply to `cmd` waits for, given the position of its own
    /// record. A publish is remembered until durable; a delivery waits for the publishes of
    /// the messages it carries, not for its own pending record (`unsynced.rs` says why).
    fn lsn_to_wait_for(&self, cmd: &Command, outcome: &Outcome, own: Option<u64>) -> Option<u64> {
        let Some(store) = &self.store else {
            return own;
        };
        let mut unsynced = self.unsynced.borrow_mut();
        unsynced.forget_durable(store.journal().durable());
        match (cmd, outcome, own) {
            (Command::Publish { msg }, Outcome::Published, Some(lsn)) => {
                unsynced.note(msg.id, lsn);
                own
            }
            (Command::Consume { .. }, Outcome::Delivered(msgs), _) => {
                unsynced.wait_for(msgs.iter().map(|m| m.id))
            }
            _ => own,
        }
    }

    /// A consume that parks on this shard (the owner) when nothing is ready and `wait_ms`
    /// allows; `answer` is called once, with the messages or EMPTY at the deadline.
    fn consume_or_park(&self, slot: u16, cmd: Command, wait_ms: u64, answer: Answer) {
        let (outcome, lsn) = self.apply_local(slot, cmd.clone());
        let Command::Consume {
            queue,
            consumer,
            max,
            now_ns,
        } = cmd
        else {
            unreachable!("consume_or_park takes consumes")
        };
        if outcome != Outcome::Empty || wait_ms == 0 || self.waiters.borrow().is_full() {
            return answer(outcome, lsn);
        }
        let waiter = Waiter {
            consumer,
            max,
            deadline_ns: now_ns.saturating_add(wait_ms as i64 * 1_000_000),
            answer,
        };
        self.waiters.borrow_mut().park(slot, queue, waiter);
        self.timers_changed.notify();
    }

    /// Submits a CONSUME that may long-poll (`wait_ms` > 0) on the queue's owner.
    pub fn submit_consume(&self, slot: u16, cmd: Command, wait_ms: u64) -> Submitted {
        if wait_ms == 0 {
            return self.submit(slot, cmd);
        }
        let owner = self.owner_of(slot);
        if owner != self.shard.id() {
            let req = ShardMsg::Queue(QueueMsg::ConsumeWait { slot, cmd, wait_ms });
            return Submitted::Remote(
                owner,
                Box::pin(self.shard.request(owner, req, REMOTE_TIMEOUT_MS)),
            );
        }
        let parked = Rc::new(Parked::default());
        let slot_for_answer = Rc::clone(&parked);
        self.consume_or_park(
            slot,
            cmd,
            wait_ms,
            Box::new(move |outcome, lsn| {
                *slot_for_answer.answer.borrow_mut() = Some((outcome, lsn));
                slot_for_answer.ready.notify();
            }),
        );
        Submitted::Parked(parked)
    }

    /// Serves parked consumers of `slot`, oldest first, while their queues have messages.
    fn serve_waiters(&self, slot: u16) {
        if self.serving_waiters.get() {
            return;
        }
        let queues = self.waiters.borrow().queues_of(slot);
        if queues.is_empty() {
            return;
        }
        self.serving_waiters.set(true);
        for queue in queues {
            loop {
                let Some(w) = self.waiters.borrow_mut().pop(slot, &queue) else {
                    break;
                };
                let cmd = Command::Consume {
                    queue: queue.clone(),
                    consumer: w.consumer,
                    max: w.max,
                    now_ns: now_ns(),
                };
                let (outcome, lsn) = self.apply_local(slot, cmd);
                if outcome == Outcome::Empty {
                    self.waiters.borrow_mut().unpop(slot, queue.clone(), w);
                    break;
                }
                (w.answer)(outcome, lsn);
            }
        }
        self.serving_waiters.set(false);
    }

    /// Answers EMPTY to parked consumers whose deadline passed (all of them at shutdown).
    pub fn expire_waiters(&self, now_ns: i64) {
        let expired = self.waiters.borrow_mut().take_expired(now_ns);
        for w in expired {
            (w.answer)(Outcome::Empty, None);
        }
    }

    /// Takes a snapshot of the slot when its command log has grown enough: the state is
    /// copied now, between two commands (exactly the state after `wal_seq`); serialising it
    /// runs on the shard's blocking pool, so a large state slows the shard down for a while
    /// instead of stopping it. Once the chunks are durable, what they replace is dropped
    /// (whole segments, in the background).
    fn maybe_snapshot(&self, slot: u16, cell: &Rc<RefCell<SlotState>>) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let (state, wal_seq, number, wal, snap) = {
            let mut st = cell.borrow_mut();
            let st = &mut *st;
            let Some(logs) = st.logs.as_mut() else { return };
            if !logs.snapshot_due(self.compaction_threshold_bytes) {
                return;
            }
            logs.snapshotting = true;
            logs.bytes_since_snapshot = 0;
            logs.last_snapshot_number += 1;
            (
                st.broker.snapshot(),
                logs.wal.next_seq() - 1,
                logs.last_snapshot_number,
                logs.wal.clone(),
                logs.snap.clone(),
            )
        };
        self.shard
            .metrics()
            .counter("boltq_snapshots_total", &[])
            .inc();
        let cell = Rc::clone(cell);
        boltq_shards::spawn(async move {
            let result = async {
                let body = boltq_shards::spawn_blocking(move || snapshot::encode(&state)).await?;
                let w = snapshot::write(&store, &snap, &body, wal_seq, number).await?;
                if let Some(logs) = cell.borrow_mut().logs.as_mut() {
                    logs.last_snapshot_bytes = w.bytes;
                }
                // Truncates only once the snapshot is fdatasync'ed (issue 13 item 4).
                snapshot::compact(&store, &wal, &snap, &w).await
            }
            .await;
            if let Err(e) = result {
                log::warn!("snapshot of queue slot {slot} failed: {e}; the log keeps growing");
            }
            if let Some(logs) = cell.borrow_mut().logs.as_mut() {
                logs.snapshotting = false;
            }
        })
        .detach();
    }

    /// Applies `cmd` on the owner of `slot`, wherever it is. Local commands are applied
    /// now; remote ones are queued to their owner now (so pipelined commands keep their
    /// order per owner). Await [`Submitted::outcome`] for the durable result.
    pub fn submit(&self, slot: u16, cmd: Command) -> Submitted {
        self.submit_with(slot, cmd, false)
    }

    /// As `submit`, but the outcome waits for an fdatasync even when `storage.fsync` is
    /// `interval` or `never`: v1's confirm mode promised an fsync before the reply.
    pub fn submit_synced(&self, slot: u16, cmd: Command) -> Submitted {
        self.submit_with(slot, cmd, true)
    }

    fn submit_with(&self, slot: u16, cmd: Command, sync: bool) -> Submitted {
        let owner = self.owner_of(slot);
        if owner == self.shard.id() {
            let (outcome, lsn) = self.apply_local(slot, cmd);
            return if sync {
                Submitted::LocalSynced(outcome, lsn)
            } else {
                Submitted::Local(outcome, lsn)
            };
        }
        let req = ShardMsg::Queue(QueueMsg::Apply { slot, cmd, sync });
        Submitted::Remote(
            owner,
            Box::pin(self.shard.request(owner, req, REMOTE_TIMEOUT_MS)),
        )
    }

    pub async fn when_synced(&self, outcome: Outcome, lsn: Option<u64>) -> Outcome {
        if let (Some(store), Some(lsn)) = (&self.store, lsn) {
            if let Err(e) = store.wait_synced(lsn).await {
                return Outcome::Error(format!("storage write: {e}"));
            }
        }
        outcome
    }

    pub async fn when_durable(&self, outcome: Outcome, lsn: Option<u64>) -> Outcome {
        if let (Some(store), Some(lsn)) = (&self.store, lsn) {
            if let Err(e) = store.wait_durable(lsn).await {
                return Outcome::Error(format!("storage write: {e}"));
            }
        }
        outcome
    }

    fn route_effect(&self, effect: Effect) {
        let to = match &effect {
            Effect::Push { to, .. } => *to,
            Effect::Released { consumer, .. } => *consumer,
        };
        if to.shard as usize == self.shard.id() {
            self.deliver_effect(effect);
        } else if self
            .shard
            .send(to.shard as usize, ShardMsg::Queue(QueueMsg::Effect(effect)))
            .is_err()
        {
            log::warn!(
                "shard {} outbox full: a push or prefetch release was dropped",
                to.shard
            );
        }
    }

    /// Hands a push or a prefetch release to a connection of this shard.
    pub fn deliver_effect(&self, effect: Effect) {
        match effect {
            Effect::Push { to, sub_id, msg } => {
                let conns = self.conns.borrow();
                let Some(out) = conns.get(&to.conn) else {
                    return;
                };
                // The pushes of one publish come one after another: encode it once.
                let mut head = self.push_head.borrow_mut();
                if head.as_ref().is_none_or(|h| h.id() != msg.id) {
                    *head = Some(reply::PushHead::of(&msg));
                }
                let head = head.as_ref().expect("set above");
                out.push_encoded(|frame| match reply::push_from_head(head, &sub_id, frame) {
                    Ok(()) => true,
                    // A message too large for one frame cannot be pushed; v1 pub/sub is
                    // at-most-once, so it is dropped for this subscriber, loudly.
                    Err(e) => {
                        log::warn!("push of {} dropped: {e:?}", msg.id);
                        false
                    }
                });
            }
            Effect::Released { consumer, .. } => {
                if let Some(out) = self.conns.borrow().get(&consumer.conn) {
                    out.release_prefetch();
                }
            }
        }
    }

    /// Answers a remote shard's command once its outcome is durable.
    fn reply_when_durable(self: &Rc<Self>, token: ReplyToken, outcome: Outcome, lsn: Option<u64>) {
        let plane = Rc::clone(self);
        boltq_shards::spawn(async move {
            let outcome = plane.when_durable(outcome, lsn).await;
            let reply = ShardMsg::QueueReply(QueueReply::Applied(outcome));
            plane.shard.reply(token, reply);
        })
        .detach();
    }

    /// Sends `msg()` as a request to every other shard; the answers, in shard order.
    fn ask_other_shards(&self, msg: impl Fn() -> QueueMsg) -> Vec<RemoteReply> {
        (0..self.shard.count())
            .filter(|&dest| dest != self.shard.id())
            .map(|dest| {
                let req = ShardMsg::Queue(msg());
                Box::pin(self.shard.request(dest, req, REMOTE_TIMEOUT_MS)) as RemoteReply
            })
            .collect()
    }

    /// The mesh handler's part for the queue plane.
    pub fn on_mesh(self: &Rc<Self>, incoming: Incoming<ShardMsg>) {
        match incoming {
            Incoming::Message(ShardMsg::Queue(QueueMsg::Effect(e))) => self.deliver_effect(e),
            Incoming::Message(ShardMsg::Queue(QueueMsg::Disconnect { consumer })) => {
                self.disconnect_local(consumer)
            }
            Incoming::Request {
                msg: ShardMsg::Queue(QueueMsg::Apply { slot, cmd, sync }),
                token,
            } => {
                let (outcome, lsn) = self.apply_local(slot, cmd);
                if sync {
                    let plane = Rc::clone(self);
                    boltq_shards::spawn(async move {
                        let outcome = plane.when_synced(outcome, lsn).await;
                        let reply = ShardMsg::QueueReply(QueueReply::Applied(outcome));
                        plane.shard.reply(token, reply);
                    })
                    .detach();
                } else {
                    self.reply_when_durable(token, outcome, lsn);
                }
            }
            Incoming::Request {
                msg: ShardMsg::Queue(QueueMsg::ConsumeWait { slot, cmd, wait_ms }),
                token,
            } => {
                let plane = Rc::clone(self);
                let answer = move |outcome, lsn| plane.reply_when_durable(token, outcome, lsn);
                self.consume_or_park(slot, cmd, wait_ms, Box::new(answer));
            }
            Incoming::Request {
                msg: ShardMsg::Queue(QueueMsg::Stats),
                token,
            } => {
                let report = Box::new(self.local_report());
                self.shard
                    .reply(token, ShardMsg::QueueReply(QueueReply::Report(report)));
            }
            Incoming::Request {
                msg: ShardMsg::Queue(QueueMsg::Exchange(op)),
                token,
            } => {
                let (result, lsn) = self.apply_exchange_local(op);
                let plane = Rc::clone(self);
                boltq_shards::spawn(async move {
                    let result = plane.exchange_durable(result, lsn).await;
                    plane
                        .shard
                        .reply(token, ShardMsg::QueueReply(QueueReply::Exchange(result)));
                })
                .detach();
            }
            Incoming::Message(ShardMsg::Queue(QueueMsg::Exchanges(snapshot))) => {
                match Exchanges::restore(snapshot) {
                    Ok(table) => *self.exchanges.borrow_mut() = Rc::new(table),
                    Err(e) => log::error!("exchange table from the metadata shard refused: {e}"),
                }
            }
            Incoming::Request {
                msg: ShardMsg::Queue(QueueMsg::DlqList { queue }),
                token,
            } => {
                let counts = self.local_dlq_counts(queue.as_deref());
                self.shard
                    .reply(token, ShardMsg::QueueReply(QueueReply::DlqCounts(counts)));
            }
            Incoming::Request {
                msg:
                    ShardMsg::Queue(QueueMsg::DlqRead {
                        queue,
                        offset,
                        limit,
                    }),
                token,
            } => {
                let messages = self.local_dead_letters(&queue, offset, limit);
                self.shard.reply(
                    token,
                    ShardMsg::QueueReply(QueueReply::DlqMessages(messages)),
                );
            }
            Incoming::Request { token, .. } => {
                log::error!(
                    "queue plane: unexpected request from shard {}",
                    token.origin()
                );
                drop(token);
            }
            Incoming::Message(_) => log::error!("queue plane: unexpected message"),
        }
    }

    /// The consumer that HTTP `/consume` records: no connection, so its messages are acked
    /// from anywhere and released only by their ack timeout.
    pub fn http_consumer(&self) -> ConsumerRef {
        ConsumerRef {
            shard: self.shard.id() as u16,
            conn: self.boot_id,
        }
    }

    // --- exchanges ----------------------------------------------------------------------

    /// This shard's replica of the exchange table.
    pub fn exchanges_snapshot(&self) -> crate::queue::broker::exchange::ExchangesSnapshot {
        self.exchanges.borrow().snapshot()
    }

    /// Queues a publish to `exchange` goes to, by this shard's replica of the table.
    pub fn route(
        &self,
        exchange: &str,
        routing_key: &str,
        headers: &std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<String>, String> {
        self.exchanges
            .borrow()
            .route(exchange, routing_key, headers)
    }

    /// Sends an exchange change to the metadata shard (or applies it here, if this is it).
    pub fn submit_exchange(&self, op: ExchangeOp) -> ExchangeSubmitted {
        if self.shard.id() == META_SHARD {
            let (result, lsn) = self.apply_exchange_local(op);
            return ExchangeSubmitted::Local(result, lsn);
        }
        let req = ShardMsg::Queue(QueueMsg::Exchange(op));
        ExchangeSubmitted::Remote(Box::pin(self.shard.request(
            META_SHARD,
            req,
            REMOTE_TIMEOUT_MS,
        )))
    }

    fn apply_exchange_local(&self, op: ExchangeOp) -> (Result<(), String>, Option<u64>) {
        assert_eq!(self.shard.id(), META_SHARD);
        let mut table = (**self.exchanges.borrow()).clone();
        if let Err(e) = op.apply(&mut table) {
            return (Err(e), None);
        }
        let lsn = match (&self.store, &self.meta_log) {
            (Some(store), Some(log)) => match exchanges::persist(store, log, &table) {
                Ok(lsn) => Some(lsn),
                Err(e) => return (Err(format!("storage write: {e}")), None),
            },
            _ => None,
        };
        *self.exchanges.borrow_mut() = Rc::new(table);
        self.broadcast_exchanges();
        (Ok(()), lsn)
    }

    async fn exchange_durable(
        &self,
        result: Result<(), String>,
        lsn: Option<u64>,
    ) -> Result<(), String> {
        result?;
        if let (Some(store), Some(lsn)) = (&self.store, lsn) {
            store
                .wait_durable(lsn)
                .await
                .map_err(|e| format!("storage write: {e}"))?;
        }
        Ok(())
    }

    fn broadcast_exchanges(&self) {
        let snapshot = self.exchanges.borrow().snapshot();
        for dest in 0..self.shard.count() {
            if dest != self.shard.id() {
                let msg = ShardMsg::Queue(QueueMsg::Exchanges(snapshot.clone()));
                if self.shard.send(dest, msg).is_err() {
                    log::error!("shard {dest} outbox full: exchange table not sent");
                }
            }
        }
    }

    // --- dead letters -------------------------------------------------------------------

    fn local_dlq_counts(&self, queue: Option<&str>) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        for cell in self.slots.borrow().values() {
            for (q, n) in cell.borrow().broker.dead_letter_queues() {
                if queue.is_none_or(|want| want == q) {
                    out.insert(q, n);
                }
            }
        }
        out
    }

    fn local_dead_letters(&self, queue: &str, offset: u64, limit: u32) -> Vec<Message> {
        let slot = super::dispatch::slot_of_name(queue);
        match self.slots.borrow().get(&slot) {
            Some(cell) => cell
                .borrow()
                .broker
                .dead_letters(queue, offset as usize, limit as usize),
            None => Vec::new(),
        }
    }

    pub fn gather_dlq_list(&self, queue: Option<String>) -> DlqListGather {
        let remote = self.ask_other_shards(|| QueueMsg::DlqList {
            queue: queue.clone(),
        });
        DlqListGather {
            local: self.local_dlq_counts(queue.as_deref()),
            remote,
        }
    }

    pub fn submit_dlq_read(&self, queue: String, offset: u64, limit: u32) -> DlqReadSubmitted {
        let slot = super::dispatch::slot_of_name(&queue);
        let owner = self.owner_of(slot);
        if owner == self.shard.id() {
            let messages = self.local_dead_letters(&queue, offset, limit);
            return DlqReadSubmitted {
                queue,
                offset,
                local: Some(messages),
                remote: None,
            };
        }
        let req = ShardMsg::Queue(QueueMsg::DlqRead {
            queue: queue.clone(),
            offset,
            limit,
        });
        DlqReadSubmitted {
            queue,
            offset,
            local: None,
            remote: Some(Box::pin(self.shard.request(owner, req, REMOTE_TIMEOUT_MS))),
        }
    }

    // --- stats --------------------------------------------------------------------------

    pub fn local_report(&self) -> ShardReport {
        let mut report = ShardReport::default();
        for cell in self.slots.borrow().values() {
            let st = cell.borrow();
            report.stats.merge(&st.broker.stats());
            report.counters.merge(&st.broker.counters());
        }
        if let Some(store) = &self.store {
            report.storage_bytes = store.size_bytes();
            report.journal_commit_rounds = store.journal().commit_rounds();
            report.journal_syncs = store.journal().syncs();
        }
        report.connections = self.conns.borrow().len() as u64;
        report.connection_list = self
            .conns
            .borrow()
            .values()
            .take(super::mesh::CONNECTION_LIST_MAX)
            .map(|o| (self.shard.id(), o.peer.borrow().clone(), o.since_ms.get()))
            .collect();
        report.metrics = self.shard.metrics().snapshot();
        report
    }

    /// Asks every other shard for its stats now; await [`StatsGather::merged`].
    pub fn gather_stats(&self) -> StatsGather {
        let remote = self.ask_other_shards(|| QueueMsg::Stats);
        StatsGather {
            local: self.local_report(),
            remote,
        }
    }

    // --- timers -------------------------------------------------------------------------

    /// Applies `Tick` to every slot whose next deadline has passed, sleeping in between.
    /// Sleeps without any wake-up while no slot has a deadline (an idle server stays idle).
    async fn timer_loop(self: Rc<Self>) {
        loop {
            let ticket = self.timers_changed.ticket();
            let next = self.next_deadline_ns();
            let Some(deadline) = next else {
                self.timers_changed.wait(ticket).await;
                continue;
            };
            let now = now_ns();
            if deadline > now {
                let wait_ns = (deadline - now + TICK_NS - 1) / TICK_NS * TICK_NS;
                let sleep = boltq_shards::sleep(Duration::from_nanos(wait_ns as u64));
                futures_lite::future::or(sleep, self.timers_changed.wait(ticket)).await;
                continue;
            }
            self.tick_due(now);
        }
    }

    fn next_deadline_ns(&self) -> Option<i64> {
        let brokers = self
            .slots
            .borrow()
            .values()
            .filter_map(|c| c.borrow().broker.next_deadline_ns())
            .min();
        let waiters = self.waiters.borrow().next_deadline_ns();
        brokers.into_iter().chain(waiters).min()
    }

    fn tick_due(&self, now: i64) {
        self.expire_waiters(now);
        let due: Vec<u16> = self
            .slots
            .borrow()
            .iter()
            .filter(|(_, c)| {
                c.borrow()
                    .broker
                    .next_deadline_ns()
                    .is_some_and(|d| d <= now)
            })
            .map(|(s, _)| *s)
            .collect();
        for slot in due {
            // Tick outcomes are not replies: nobody waits for their durability. A crash
            // before the tick is durable replays to the state before it, and the next tick
            // redoes the same work.
            let _ = self.apply_local(slot, Command::Tick { now_ns: now });
        }
    }

    /// Closes every slot: nothing to flush beyond the store, which the shard closes.
    pub fn connection_count(&self) -> usize {
        self.conns.borrow().len()
    }
}
