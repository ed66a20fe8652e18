//! One shard's part of the queue plane: the brokers of the slots it owns, their command
//! logs, the shard's timer loop, and the connections it serves.
//!
//! A command for a slot is applied on the slot's owner, synchronously, in arrival order; if
//! it changed state it is appended to the slot's command log (`queue/slot-NNN/wal`) and the
//! reply waits for that append to be durable. Commands from other shards arrive over the
//! mesh and their replies go back the same way once durable.
//!
//! This file holds the plane's state, its start and its connections. The rest of the
//! plane lives next to it, one concept per file: `slot.rs` (a slot's broker and logs:
//! open, recover, snapshot), `apply.rs` (apply a command, log it, wait for durability),
//! `long_poll.rs` (consumers parked until a message arrives), `gather.rs` (stats and dead
//! letters across shards), `exchanges.rs` (the exchange table), `timer.rs` (ticks) and
//! `mesh.rs` (what the shards send each other, and the handler).

use super::affinity::HandedOver;
use super::delivery::Tracked;
use super::exchanges::{self, META_SHARD};
use super::mesh::{QueueMsg, QueuePort};
use super::outbound::Outbound;
use super::replicated::{ClusterView, Replicated};
use super::room::Turn;
use super::slot::SlotState;
use super::unsynced::Unsynced;
use super::waiters::Waiters;
use crate::queue::broker::exchange::Exchanges;
use crate::queue::broker::{BrokerConfig, Command, ConsumerRef, Effect, Outcome};
use crate::queue::message::IdGenerator;
use crate::queue::protocol::reply;
use boltq_io::event::Event;
use boltq_io::{LogRef, Store};
use boltq_shards::{OutboxFull, ShardId};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

pub use super::apply::Submitted;
pub use super::exchanges::ExchangeSubmitted;
pub use super::gather::{DlqListGather, DlqReadSubmitted, StatsGather};

/// How long a shard waits for another shard to answer a queue command before the client
/// gets an error. Generous: the answer waits for the owner's fdatasync.
pub const REMOTE_TIMEOUT_MS: u64 = 30_000;
/// [`REMOTE_TIMEOUT_MS`] in a process started with the fault `short-remote-timeout`.
const REMOTE_TIMEOUT_SHORT_MS: u64 = 50;

/// How long a slot command sent to its owner shard may take: [`REMOTE_TIMEOUT_MS`], or
/// [`REMOTE_TIMEOUT_SHORT_MS`] under the fault `short-remote-timeout` (`faults.rs`), which
/// lets a test see what a client is told while the owner holds its command in the line for
/// the journal, and what follows.
pub(super) fn slot_command_timeout_ms() -> u64 {
    static MS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MS.get_or_init(|| {
        if crate::faults::is_named("short-remote-timeout", None) {
            REMOTE_TIMEOUT_SHORT_MS
        } else {
            REMOTE_TIMEOUT_MS
        }
    })
}

pub struct Plane {
    pub shard: QueuePort,
    pub(super) store: Option<Rc<Store>>,
    pub(super) slots: RefCell<BTreeMap<u16, Rc<RefCell<SlotState>>>>,
    pub(super) ids: RefCell<IdGenerator>,
    pub(super) conns: RefCell<HashMap<u64, Rc<Outbound>>>,
    pub(super) conn_ids: Cell<u64>,
    /// High bits of connection ids: random per process, so a consumer recorded in the log by
    /// an earlier process never names a connection of this one.
    pub(super) boot_id: u64,
    pub(super) timers_changed: Event,
    pub(super) cfg: BrokerConfig,
    pub(super) api_key: Option<String>,
    /// This shard's replica of the exchange table (the writer's own table on shard 0).
    pub(super) exchanges: RefCell<Rc<Exchanges>>,
    /// Version of that table: counted up by the writer per change; a replica ignores a
    /// table older than the one it has (a broadcast that waited for room may arrive late).
    pub(super) exchanges_version: Cell<u64>,
    /// The metadata log; only on the metadata shard in disk mode.
    pub(super) meta_log: Option<LogRef>,
    /// Per-slot command bytes that make a snapshot due (0 = never compact).
    pub(super) compaction_threshold_bytes: u64,
    /// Paces this shard's slot snapshot writes (`pacer.rs`).
    pub(super) snapshot_pacer: Rc<super::pacer::Pacer>,
    /// `queue.report_unroutable`: refuse exchange publishes that match no binding.
    pub(super) report_unroutable: bool,
    pub(super) waiters: RefCell<Waiters>,
    /// True while parked consumers are being served (serving applies commands, which
    /// would otherwise try to serve again).
    pub(super) serving_waiters: Cell<bool>,
    /// Slots whose long-polls wait in the line to be served once there is room
    /// (`long_poll.rs`): one step per slot at a time.
    pub(super) waiters_served_in_turn: RefCell<std::collections::BTreeSet<u16>>,
    /// Publishes not yet durable: what a delivery has to wait for (see `unsynced.rs`).
    pub(super) unsynced: RefCell<Unsynced>,
    /// The last message pushed, encoded (see `reply::PushHead`).
    pub(super) push_head: RefCell<Option<reply::PushHead>>,
    /// Handles on the latency series every reply records into, looked up once: a lookup
    /// builds the series' key (allocating its name) and searches the registry.
    pub(super) publish_latency: boltq_shards::metrics::Histogram,
    pub(super) consume_wait: boltq_shards::metrics::Histogram,
    /// `cluster.enabled`: this shard's raft node, through which its slots' commands go
    /// (`replicated.rs`); then `slots` stays empty.
    pub(super) replication: std::cell::OnceCell<Rc<dyn Replicated>>,
    /// Replicated: the slots whose single-node logs hold data being carried into their
    /// groups, until `forget_carried_data` empties those logs (`slot.rs`).
    pub(super) carried: RefCell<BTreeMap<u16, super::slot::Carried>>,
    /// Replicated, on shard 0 of a node founding alone: the exchanges it declared as a
    /// single node, until the exchange slot's group is founded with them.
    pub(super) single_node_exchanges: RefCell<Option<Exchanges>>,
    /// Connections this shard accepted and handed to another shard (`affinity.rs`), by
    /// their id here: each one's task keeps its place under the connection cap until the
    /// serving shard reports the connection ended.
    handed_over: RefCell<HashMap<u64, Rc<Event>>>,
    /// Serves a connection another shard handed over; set by the server once its
    /// listener's settings are known.
    adopter: std::cell::OnceCell<Box<dyn Fn(Box<HandedOver>)>>,
    /// Commands waiting for room in the journal (`room.rs`).
    pub(super) room: super::room::Room,
    pub(super) waited_for_room: boltq_shards::metrics::Counter,
}

/// The high 32 bits of every connection id of this process (the low 32 count connections):
/// random per process, so a consumer recorded in the log by an earlier process, or by
/// another node, never names a connection of this one.
pub fn connection_boot_id(random: u64) -> u64 {
    (random >> 32) << 32
}

/// A clustered node's boot id: its node tag in the top 16 bits, 16 random bits below
/// (`random`'s bits 32..48), so any node can tell from a connection id which node the
/// connection was on, and sweep the registrations of a node that was removed for good
/// (`cluster::serve`). The caller keeps it apart from the node's earlier boots.
pub fn clustered_boot_id(node_id: u64, random: u64) -> u64 {
    (u64::from(node_tag(node_id)) << 48) | (((random >> 32) & 0xFFFF) << 32)
}

/// The tag of a node (by raft id) in its connections' ids (see [`clustered_boot_id`]).
pub fn node_tag(node_id: u64) -> u16 {
    node_id as u16
}

/// The node tag a clustered connection id carries.
pub fn conn_node_tag(conn: u64) -> u16 {
    (conn >> 48) as u16
}

pub fn now_ns() -> i64 {
    boltq_io::store::now_ns()
}

/// The plane's settings, the same on every shard.
pub struct PlaneSettings {
    pub broker: BrokerConfig,
    pub api_key: Option<String>,
    /// Per-process randomness for message ids.
    pub random: u64,
    /// The high 32 bits of this process's connection ids ([`connection_boot_id`], or
    /// [`clustered_boot_id`]).
    pub boot_id: u64,
    pub compaction_threshold_bytes: u64,
    /// `storage.snapshot_write_bytes_per_sec` (0 = unpaced).
    pub snapshot_write_bytes_per_sec: u64,
    pub report_unroutable: bool,
    /// `cluster.enabled`: the slots live in raft groups (`set_replication` follows the
    /// start), not in this shard's slot logs.
    pub replicated: bool,
    /// Replicated, and this node founds its cluster alone: what its slot logs hold from
    /// running as a single node is carried into the groups (`take_single_node_data`)
    /// rather than refused.
    pub carries_single_node_data: bool,
}

impl Plane {
    /// Opens (and replays) every slot this shard owns, or with `cluster` starts the raft
    /// node that hosts them, then starts the timer loop.
    pub async fn start(
        shard: QueuePort,
        store: Option<Rc<Store>>,
        settings: PlaneSettings,
    ) -> Result<Rc<Plane>, String> {
        let PlaneSettings {
            broker: cfg,
            api_key,
            random,
            boot_id,
            compaction_threshold_bytes,
            snapshot_write_bytes_per_sec,
            report_unroutable,
            replicated,
            carries_single_node_data,
        } = settings;
        let mut prefix = [0u8; 7];
        prefix.copy_from_slice(&(random ^ ((shard.id() as u64) << 8)).to_be_bytes()[1..]);
        // Clustered, the table is the exchange slot's replica's (`exchanges::exchange_slot`).
        let meta_shard = shard.id() == META_SHARD && !replicated;
        let (exchanges, meta_log) = match (&store, meta_shard) {
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
            boot_id,
            timers_changed: Event::default(),
            cfg,
            api_key,
            exchanges: RefCell::new(Rc::new(exchanges)),
            exchanges_version: Cell::new(0),
            meta_log,
            compaction_threshold_bytes,
            snapshot_pacer: Rc::new(super::pacer::Pacer::new(snapshot_write_bytes_per_sec)),
            report_unroutable,
            waiters: RefCell::new(Waiters::default()),
            serving_waiters: Cell::new(false),
            waiters_served_in_turn: RefCell::new(std::collections::BTreeSet::new()),
            unsynced: RefCell::new(Unsynced::default()),
            push_head: RefCell::new(None),
            publish_latency: shard
                .metrics()
                .histogram(super::dispatch::PUBLISH_LATENCY_METRIC, &[]),
            consume_wait: shard
                .metrics()
                .histogram(super::dispatch::CONSUME_WAIT_METRIC, &[]),
            replication: std::cell::OnceCell::new(),
            carried: RefCell::new(BTreeMap::new()),
            single_node_exchanges: RefCell::new(None),
            handed_over: RefCell::new(HashMap::new()),
            adopter: std::cell::OnceCell::new(),
            room: super::room::Room::default(),
            waited_for_room: shard
                .metrics()
                .counter(super::room::WAITED_FOR_ROOM_METRIC, &[]),
        });
        if meta_shard {
            plane.broadcast_exchanges();
        }
        if replicated {
            plane
                .gather_single_node_data(carries_single_node_data)
                .await?;
        } else {
            for slot in plane.owned_slots() {
                plane.open_slot(slot).await?;
            }
        }
        boltq_shards::spawn(Rc::clone(&plane).timer_loop()).detach();
        boltq_shards::spawn(Rc::clone(&plane).room_loop()).detach();
        Ok(plane)
    }

    /// Calls `f` with the broker of every slot this shard owns: its own, or with
    /// `cluster.enabled` this node's replica of it (the state this node has applied).
    pub(super) fn each_broker(&self, mut f: impl FnMut(u16, &crate::queue::broker::Broker)) {
        if let Some(replication) = self.replication.get() {
            return replication.for_each_broker(&mut f);
        }
        for (&slot, cell) in self.slots.borrow().iter() {
            f(slot, &cell.borrow().broker);
        }
    }

    /// With `cluster.enabled`: hands the plane the slot groups this shard hosts. Once,
    /// right after the start, before any connection is served.
    pub fn set_replication(&self, replication: Rc<dyn Replicated>) {
        assert!(self.slots.borrow().is_empty(), "slots opened here as well");
        assert!(
            self.replication.set(replication).is_ok(),
            "replication set twice"
        );
    }

    /// The slots this shard owns.
    pub fn owned_slots(&self) -> Vec<u16> {
        (0..boltq_shards::SLOTS)
            .filter(|&slot| self.owner_of(slot) == self.shard.id())
            .collect()
    }

    /// Whether `cluster.enabled` (cheaper than `cluster_view`, which copies the members).
    pub fn clustered(&self) -> bool {
        self.replication.get().is_some()
    }

    /// With `cluster.enabled`: who this node and its peers are.
    pub fn cluster_view(&self) -> Option<ClusterView> {
        self.replication.get().map(|r| r.view())
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
        crate::config::secret::secret_matches(key, presented)
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.cfg
    }

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
            if dest == self.shard.id() {
                self.disconnect_local(consumer);
            } else {
                // A lost disconnect would leave its durable registrations "live" on a dead
                // connection, pushing into nothing instead of backlogging.
                self.send_without_loss(dest, QueueMsg::Disconnect { consumer });
            }
        }
    }

    /// Sets how this shard serves connections other shards hand over (once; later calls
    /// are ignored).
    pub fn set_adopter(&self, adopter: impl Fn(Box<HandedOver>) + 'static) {
        let _ = self.adopter.set(Box::new(adopter));
    }

    /// Sends a connection that has not used any slot to shard `dest` (`affinity.rs`) and
    /// forgets it here without a disconnect: no shard holds anything of it. Completes when
    /// `dest` reports the connection ended.
    pub async fn hand_over(&self, dest: ShardId, moved: HandedOver) {
        let (origin, conn) = moved.origin;
        assert_eq!(origin, self.shard.id(), "handed over from another shard");
        self.conns.borrow_mut().remove(&conn);
        let ended = Rc::new(Event::default());
        let ticket = ended.ticket();
        self.handed_over
            .borrow_mut()
            .insert(conn, Rc::clone(&ended));
        self.send_without_loss(dest, QueueMsg::HandOver(Box::new(moved)));
        ended.wait(ticket).await;
    }

    /// Serves a connection another shard handed over.
    pub(super) fn adopt(&self, moved: Box<HandedOver>) {
        match self.adopter.get() {
            Some(adopt) => adopt(moved),
            None => {
                log::warn!(
                    "a connection handed over to a shard that serves no TCP clients is closed"
                );
                self.handed_over_ended(moved.origin);
            }
        }
    }

    /// Tells the shard that accepted a handed-over connection that it ended.
    pub fn handed_over_ended(&self, (shard, conn): (ShardId, u64)) {
        if shard == self.shard.id() {
            self.release_handed_over(conn);
        } else {
            self.send_without_loss(shard, QueueMsg::HandedOverEnded { conn });
        }
    }

    pub(super) fn release_handed_over(&self, conn: u64) {
        let ended = self.handed_over.borrow_mut().remove(&conn);
        if let Some(ended) = ended {
            ended.notify();
        }
    }

    pub(super) fn disconnect_local(&self, consumer: ConsumerRef) {
        if let Some(replication) = self.replication.get() {
            return replication.disconnect(consumer);
        }
        let gone = self.waiters.borrow_mut().take_of(consumer);
        for w in gone {
            (w.answer)(Outcome::Empty, None);
        }
        let slots: Vec<u16> = self.slots.borrow().keys().copied().collect();
        let disconnect = move |plane: &Plane| {
            for slot in slots {
                let _ = plane.apply_local(slot, Command::Disconnect { consumer });
            }
        };
        match self.turn_of(&Command::Disconnect { consumer }) {
            Turn::Wait(place) => self.wait_turn(place, Box::new(move |plane| disconnect(plane))),
            // A disconnect needs no room, so it is never refused.
            Turn::Now | Turn::Refuse(_) => disconnect(self),
        }
    }

    pub(super) fn route_effect(&self, effect: Effect) {
        let to = match &effect {
            Effect::Push { to, .. } => *to,
            Effect::Released { consumer, .. } => *consumer,
        };
        let dest = to.shard as usize;
        if dest == self.shard.id() {
            self.deliver_effect(effect);
        } else if matches!(effect, Effect::Released { .. }) {
            // A lost release would hold the connection's prefetch window shut for good.
            self.send_without_loss(dest, QueueMsg::Effect(effect));
        } else if matches!(
            effect,
            Effect::Push {
                delivery: Some(_),
                ..
            }
        ) {
            // A durable push may be neither lost nor overtaken (its connection confirms by
            // number, in order). Bounded: its registration keeps every such copy anyway
            // (at most the queue capacity per registration) until confirmed.
            self.shard.send_uncapped(dest, QueueMsg::Effect(effect));
        } else if self.shard.send(dest, QueueMsg::Effect(effect)).is_err() {
            // Live pub/sub pushes are at-most-once (v1); see STATUS.md.
            log::warn!("shard {dest} outbox full: a push was dropped");
        }
    }

    /// Sends a message that must arrive (a disconnect, a prefetch release, an exchange
    /// table): at the outbox cap it waits for room in a task of its own instead of being
    /// dropped. What can wait is bounded by what produces it: one disconnect per closed
    /// connection, one release per consumed message, one table per exchange change.
    pub(super) fn send_without_loss(&self, dest: ShardId, msg: QueueMsg) {
        let Err(OutboxFull(msg)) = self.shard.send(dest, msg) else {
            return;
        };
        let port = self.shard.clone();
        boltq_shards::spawn(async move {
            let mut msg = msg;
            loop {
                port.outbox_ready(dest).await;
                match port.send(dest, msg) {
                    Ok(()) => return,
                    Err(OutboxFull(back)) => msg = back,
                }
            }
        })
        .detach();
    }

    /// Hands a push or a prefetch release to a connection of this shard.
    pub fn deliver_effect(&self, effect: Effect) {
        match effect {
            Effect::Push {
                to,
                sub_id,
                msg,
                delivery,
            } => {
                let conns = self.conns.borrow();
                let Some(out) = conns.get(&to.conn) else {
                    // Gone: a durable copy is handed out again by the disconnect.
                    return;
                };
                // The pushes of one publish come one after another: encode it once.
                let mut head = self.push_head.borrow_mut();
                if head.as_ref().is_none_or(|h| h.id() != msg.id) {
                    *head = Some(reply::PushHead::of(&msg));
                }
                let head = head.as_ref().expect("set above");
                let encode = |frame: &mut Vec<u8>| match reply::push_from_head(head, &sub_id, frame)
                {
                    Ok(()) => true,
                    // A message too large for one frame cannot be pushed at all: dropped
                    // for this subscriber, loudly.
                    Err(e) => {
                        log::warn!("push of {} dropped: {e:?}", msg.id);
                        false
                    }
                };
                match delivery {
                    None => {
                        out.push_encoded(encode);
                    }
                    Some(delivery) => {
                        let tracked = Tracked {
                            topic: msg.topic.to_string(),
                            sub_id: sub_id.clone(),
                            delivery,
                            id: msg.id,
                            sent: true,
                        };
                        out.push_durable(tracked, encode);
                    }
                }
            }
            Effect::Released { consumer, .. } => {
                if let Some(out) = self.conns.borrow().get(&consumer.conn) {
                    out.release_prefetch();
                }
            }
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

    /// Closes every slot: nothing to flush beyond the store, which the shard closes.
    pub fn connection_count(&self) -> usize {
        self.conns.borrow().len()
    }
}
