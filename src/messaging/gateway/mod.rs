//! The WebSocket gateway (spec/messaging-edge.md §2): end-user devices connect here.
//!
//! - `upgrade`: authentication and origin checks, then the RFC 6455 handshake.
//! - `connection`: one socket's request loop, writer, liveness and token expiry.
//! - `ops`: one function per client operation.
//! - `subscription`: streaming a partition to a socket.
//! - `session`, `outbound`: state kept across sockets; the bounded outbound queue.
//! - `frame`: the JSON frame codec.
//!
//! The ephemeral path (presence and typing, docs/presence-and-typing.md) is wired here: the
//! sans-IO cores `messaging::presence` and `messaging::signals` live in each shard's
//! [`Ephemeral`], and their messages travel between shards as `GatewayMsg::Presence` and
//! `GatewayMsg::Signal`.

pub mod connection;
pub mod frame;
pub mod listener;
pub mod ops;
pub mod outbound;
pub mod session;
pub mod subscription;
pub mod upgrade;

use crate::messaging::engine::Engine;
use crate::messaging::identity::acl::Policy;
use crate::messaging::identity::token::Verifier;
use crate::messaging::membership::MembershipClient;
use crate::messaging::presence::{
    self, Delivery, EventKind, PresenceDirectory, PresenceMsg, PresenceState,
};
use crate::messaging::signals::{self, RateLimiter, SignalHub, SignalMsg};
use async_tungstenite::tungstenite::Message;
use outbound::Outbound;
use session::SessionStore;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Duration;

/// Gateway settings resolved from the configuration.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    pub path: String,
    pub allowed_origins: Vec<String>,
    /// The shared API key accepted as the anonymous principal, if allowed on this listener.
    pub shared_key: Option<String>,
    pub allow_anonymous: bool,
    pub resume_window: Duration,
    pub pong_timeout: Duration,
    pub max_subscriptions: usize,
    pub send_buffer_frames: usize,
    pub send_buffer_bytes: usize,
    pub read_limit_bytes: usize,
    pub history_limit: u32,
    pub leeway_s: i64,
    pub fanout_on_write_limit: usize,
    /// How often a live subscription re-runs its read check while delivering: the
    /// membership cache's TTL (1 s when the cache is off).
    pub acl_recheck: Duration,
}

/// Counters of `/gateway/stats` (one shard's).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct GatewayStats {
    pub connections: u64,
    pub resumed: u64,
    pub auth_failures: u64,
    pub forbidden: u64,
    pub frames_in: u64,
    pub frames_out: u64,
    /// Socket writes of outbound frames: each carries one batch (`frames_out` / `writes_out`
    /// is the frames per write).
    pub writes_out: u64,
    pub records_out: u64,
    pub slow_client_drops: u64,
    pub sends: u64,
    /// Sessions tracked, attached or in their resume window (filled by [`GatewayCtx::report`]).
    pub sessions: u64,
    /// Sessions holding a socket (filled by [`GatewayCtx::report`]).
    pub attached: u64,
    /// `presence_event` frames queued to watchers on this shard.
    pub presence_events: u64,
    /// Presence events dropped because the watcher's outbound queue was full.
    pub presence_drops: u64,
    /// `signal` frames queued to listeners on this shard.
    pub signals_out: u64,
    /// Signals dropped because the listener's outbound queue was full.
    pub signal_drops: u64,
    /// `typing` requests refused by the per-user rate limit.
    pub signals_limited: u64,
    /// Signals routed by this shard as the owner of their topic (each is fanned out to
    /// its listeners once).
    pub signals_published: u64,
    /// Ephemeral messages dropped because the outbox to another shard was full.
    pub ephemeral_mesh_drops: u64,
}

impl GatewayStats {
    /// Adds another shard's numbers (every field is a count or a per-shard share).
    pub fn add(&mut self, o: &GatewayStats) {
        self.connections += o.connections;
        self.resumed += o.resumed;
        self.auth_failures += o.auth_failures;
        self.forbidden += o.forbidden;
        self.frames_in += o.frames_in;
        self.frames_out += o.frames_out;
        self.writes_out += o.writes_out;
        self.records_out += o.records_out;
        self.slow_client_drops += o.slow_client_drops;
        self.sends += o.sends;
        self.sessions += o.sessions;
        self.attached += o.attached;
        self.presence_events += o.presence_events;
        self.presence_drops += o.presence_drops;
        self.signals_out += o.signals_out;
        self.signal_drops += o.signal_drops;
        self.signals_limited += o.signals_limited;
        self.signals_published += o.signals_published;
        self.ephemeral_mesh_drops += o.ephemeral_mesh_drops;
    }
}

/// Settings of the ephemeral path (`[messaging.presence]`, `[messaging.signals]`).
#[derive(Debug, Clone)]
pub struct EphemeralSettings {
    pub presence_ttl: Duration,
    pub sweep_interval: Duration,
    pub signals: crate::config::SignalsConfig,
}

impl EphemeralSettings {
    pub fn from_config(
        p: &crate::config::PresenceConfig,
        s: &crate::config::SignalsConfig,
    ) -> EphemeralSettings {
        EphemeralSettings {
            presence_ttl: p.ttl.max(Duration::from_millis(1)),
            sweep_interval: p.sweep_interval.max(Duration::from_millis(1)),
            signals: s.clone(),
        }
    }
}

/// One shard's share of presence and typing: the directory of the users it owns, the
/// listener lists of the typing topics it owns, the rate limits of the senders it owns,
/// and which users each local connection watches (late events for a user no longer
/// watched are filtered out here).
pub struct Ephemeral {
    pub settings: RefCell<EphemeralSettings>,
    pub presence: RefCell<PresenceDirectory>,
    pub hub: RefCell<SignalHub>,
    pub limiter: RefCell<RateLimiter>,
    pub watching: RefCell<HashMap<u64, BTreeSet<String>>>,
    /// Device states of the users this shard owns, for `/presence` and metrics.
    pub census: RefCell<PresenceCensus>,
}

impl Ephemeral {
    fn new(settings: EphemeralSettings) -> Ephemeral {
        Ephemeral {
            presence: RefCell::new(PresenceDirectory::new(
                settings.presence_ttl.as_nanos() as i64
            )),
            hub: RefCell::new(SignalHub::default()),
            limiter: RefCell::new(RateLimiter::new(
                settings.signals.rate_per_second,
                settings.signals.burst,
            )),
            watching: RefCell::new(HashMap::new()),
            census: RefCell::new(PresenceCensus::default()),
            settings: RefCell::new(settings),
        }
    }
}

/// The gateway's view of its shard: requests and answers are both [`GatewayMsg`]s.
pub type GatewayPort = boltq_shards::Port<GatewayMsg, GatewayMsg>;

/// The gateway on one shard.
pub struct GatewayCtx {
    pub engine: Rc<Engine>,
    /// Session hand-overs, presence, signals and census between the shards' gateways.
    pub port: GatewayPort,
    pub settings: GatewaySettings,
    pub verifier: Verifier,
    pub policy: Policy,
    pub membership: MembershipClient,
    pub sessions: RefCell<SessionStore>,
    /// Live connections' outbound queues (takeover and shutdown close them).
    pub conns: RefCell<HashMap<u64, Rc<Outbound>>>,
    pub stats: RefCell<GatewayStats>,
    pub closing: Cell<bool>,
    pub ephemeral: Ephemeral,
    /// This shard's push dispatcher, when push is on: its numbers travel with the census.
    pusher: RefCell<Option<Rc<crate::messaging::push::Pusher>>>,
    next_conn: Cell<u64>,
    rng: ring::rand::SystemRandom,
}

pub fn now_s() -> i64 {
    boltq_io::store::now_ns() / 1_000_000_000
}

/// Runs an encoder of `frame` into a fresh string.
pub fn text(encode: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut out = Vec::new();
    encode(&mut out);
    String::from_utf8(out).expect("the frame encoder writes UTF-8 JSON")
}

impl GatewayCtx {
    pub fn new(
        engine: Rc<Engine>,
        port: GatewayPort,
        settings: GatewaySettings,
        verifier: Verifier,
        policy: Policy,
        membership: MembershipClient,
    ) -> Rc<GatewayCtx> {
        let shard = engine.shard().id() as u64;
        let gw = Rc::new(GatewayCtx {
            engine,
            port,
            settings,
            verifier,
            policy,
            membership,
            sessions: RefCell::new(SessionStore::default()),
            conns: RefCell::new(HashMap::new()),
            stats: RefCell::new(GatewayStats::default()),
            closing: Cell::new(false),
            ephemeral: Ephemeral::new(EphemeralSettings::from_config(
                &Default::default(),
                &Default::default(),
            )),
            pusher: RefCell::new(None),
            next_conn: Cell::new(shard << 48),
            rng: ring::rand::SystemRandom::new(),
        });
        boltq_shards::spawn(Rc::clone(&gw).reap_loop()).detach();
        boltq_shards::spawn(Rc::clone(&gw).sweep_loop()).detach();
        gw
    }

    /// Applies `[messaging.presence]` and `[messaging.signals]`; called once at start,
    /// before any connection is accepted.
    pub fn configure_ephemeral(
        &self,
        p: &crate::config::PresenceConfig,
        s: &crate::config::SignalsConfig,
    ) {
        let settings = EphemeralSettings::from_config(p, s);
        let e = &self.ephemeral;
        assert_eq!(e.presence.borrow().sessions(), 0, "configured before use");
        *e.presence.borrow_mut() = PresenceDirectory::new(settings.presence_ttl.as_nanos() as i64);
        *e.census.borrow_mut() = PresenceCensus::default();
        *e.limiter.borrow_mut() =
            RateLimiter::new(settings.signals.rate_per_second, settings.signals.burst);
        *e.settings.borrow_mut() = settings;
    }

    /// Hands this shard's push dispatcher to the gateway, whose census reports its numbers.
    pub fn set_pusher(&self, pusher: Rc<crate::messaging::push::Pusher>) {
        *self.pusher.borrow_mut() = Some(pusher);
    }

    pub fn next_conn_id(&self) -> u64 {
        let id = self.next_conn.get() + 1;
        self.next_conn.set(id);
        id
    }

    pub fn random_bytes<const N: usize>(&self) -> [u8; N] {
        let mut b = [0u8; N];
        ring::rand::SecureRandom::fill(&self.rng, &mut b).expect("the system RNG works");
        b
    }

    /// Closes every connection with 1001 (shutdown); they drain for ≤ 2 s.
    pub fn shutdown(&self) {
        self.closing.set(true);
        for out in self.conns.borrow().values() {
            out.close(
                frame::close::GOING_AWAY,
                frame::close::GOING_AWAY_REASON,
                true,
            );
        }
    }

    pub fn live_connections(&self) -> usize {
        self.conns.borrow().len()
    }

    /// This shard's counters with its session gauges filled in.
    pub fn report(&self) -> GatewayStats {
        let mut s = self.stats.borrow().clone();
        let sessions = self.sessions.borrow();
        s.sessions = sessions.len() as u64;
        s.attached = sessions.attached() as u64;
        s
    }

    /// Every shard's [`GatewayCtx::report`], by shard id (`None`: the shard did not answer
    /// within `timeout_ms`).
    pub async fn reports(&self, timeout_ms: u64) -> Vec<Option<GatewayStats>> {
        let shard = &self.port;
        let mut out = Vec::with_capacity(shard.count());
        for dest in 0..shard.count() {
            if dest == shard.id() {
                out.push(Some(self.report()));
                continue;
            }
            let msg = GatewayMsg::Stats;
            out.push(match shard.request(dest, msg, timeout_ms).await {
                Ok(GatewayMsg::StatsOf(s)) => Some(*s),
                _ => None,
            });
        }
        out
    }

    async fn reap_loop(self: Rc<Self>) {
        let window_ns = self.settings.resume_window.as_nanos() as i64;
        loop {
            boltq_shards::sleep(Duration::from_secs(30)).await;
            if self.closing.get() {
                return;
            }
            self.sessions
                .borrow_mut()
                .reap(boltq_io::store::now_ns(), window_ns);
        }
    }
}

/// Gateway messages between shards: a resume that landed on another shard than its session.
#[derive(Debug)]
pub enum GatewayMsg {
    /// Hand the session over if the secret and user match; answered with `Taken`.
    Take {
        session: String,
        secret: String,
        user: String,
    },
    Taken(Option<session::SessionState>),
    /// Answered with `StatsOf` (admin `/gateway/stats`, `/metrics`).
    Stats,
    StatsOf(Box<GatewayStats>),
    /// Presence between a connection's shard and the user's owner shard.
    Presence(PresenceMsg),
    /// Typing signals between a connection's shard and the topic's owner shard.
    Signal(SignalMsg),
    /// To the owner of `user`: has the user any bound session (whatever its state)?
    /// Answered with `OnlineIs`; the push dispatcher's suppression (docs/offline-push.md).
    Online {
        user: String,
    },
    OnlineIs(bool),
    /// Answered with `CensusOf` (admin `/presence`, the overview, `/metrics`).
    Census,
    CensusOf(Box<ShardCensus>),
    /// To the owner of `user`: the user's aggregate and devices (`/presence?user=`).
    UserPresence {
        user: String,
    },
    UserPresenceIs(Box<UserPresence>),
}

/// How long the push dispatcher waits for a presence answer before treating the user as
/// offline (spec §18.5 G45: a false "online" silently loses a notification, a false
/// "offline" costs one redundant push).
pub const ONLINE_QUERY_TIMEOUT_MS: u64 = 1_000;

impl GatewayCtx {
    /// Asks the other shards for a session this shard does not hold.
    pub async fn engine_take_remote(
        &self,
        sid: &str,
        secret: &str,
        user: &str,
    ) -> Option<session::SessionState> {
        let shard = &self.port;
        for dest in (0..shard.count()).filter(|d| *d != shard.id()) {
            let msg = GatewayMsg::Take {
                session: sid.to_string(),
                secret: secret.to_string(),
                user: user.to_string(),
            };
            if let Ok(GatewayMsg::Taken(Some(s))) = shard.request(dest, msg, 2_000).await {
                return Some(s);
            }
        }
        None
    }

    /// Whether `user` has a bound presence session on any shard, asked of the user's
    /// owner shard. No answer in [`ONLINE_QUERY_TIMEOUT_MS`] counts as offline (G45).
    pub async fn user_online(&self, user: &str) -> bool {
        let shard = &self.port;
        let dest = presence::owner_of_user(user, shard.count());
        if dest == shard.id() {
            return self.ephemeral.presence.borrow().online(user);
        }
        let msg = GatewayMsg::Online {
            user: user.to_string(),
        };
        matches!(
            shard.request(dest, msg, ONLINE_QUERY_TIMEOUT_MS).await,
            Ok(GatewayMsg::OnlineIs(true))
        )
    }

    pub fn on_mesh(&self, incoming: boltq_shards::Incoming<GatewayMsg>) {
        match incoming {
            boltq_shards::Incoming::Request {
                msg:
                    GatewayMsg::Take {
                        session,
                        secret,
                        user,
                    },
                token,
            } => {
                let window_ns = self.settings.resume_window.as_nanos() as i64;
                let taken = self.sessions.borrow_mut().take(
                    &session,
                    secret.as_bytes(),
                    &user,
                    boltq_io::store::now_ns(),
                    window_ns,
                );
                let state = taken.map(|(state, conn)| {
                    if let Some(conn) = conn {
                        ops::close_taken_over(self, conn);
                    }
                    state
                });
                self.port.reply(token, GatewayMsg::Taken(state));
            }
            boltq_shards::Incoming::Request {
                msg: GatewayMsg::Signal(SignalMsg::Take { key }),
                token,
            } => {
                let ok = self.take_signal_token(&key);
                self.port
                    .reply(token, GatewayMsg::Signal(SignalMsg::Taken(ok)));
            }
            boltq_shards::Incoming::Request {
                msg: GatewayMsg::Online { user },
                token,
            } => {
                let on = self.ephemeral.presence.borrow().online(&user);
                self.port.reply(token, GatewayMsg::OnlineIs(on));
            }
            boltq_shards::Incoming::Request {
                msg: GatewayMsg::Census,
                token,
            } => self
                .port
                .reply(token, GatewayMsg::CensusOf(Box::new(self.census()))),
            boltq_shards::Incoming::Request {
                msg: GatewayMsg::UserPresence { user },
                token,
            } => {
                let p = self.user_presence_here(&user);
                self.port
                    .reply(token, GatewayMsg::UserPresenceIs(Box::new(p)));
            }
            boltq_shards::Incoming::Request {
                msg: GatewayMsg::Stats,
                token,
            } => self
                .port
                .reply(token, GatewayMsg::StatsOf(Box::new(self.report()))),
            boltq_shards::Incoming::Message(GatewayMsg::Presence(m)) => self.on_presence(m),
            boltq_shards::Incoming::Message(GatewayMsg::Signal(m)) => self.on_signal(m),
            _ => log::warn!("[gateway] unexpected mesh message"),
        }
    }
}

// ---- the ephemeral path: presence and typing ------------------------------------------

impl GatewayCtx {
    fn shard_id(&self) -> usize {
        self.engine.shard().id()
    }

    /// Sends a one-way gateway message; at the outbox cap it is dropped and counted
    /// (ephemeral traffic is lossy by design; the TTL sweep repairs a lost unbind).
    fn to_shard(&self, dest: usize, msg: GatewayMsg) {
        if self.port.send(dest, msg).is_err() {
            self.stats.borrow_mut().ephemeral_mesh_drops += 1;
            log::warn!("[gateway] outbox to shard {dest} full: ephemeral message dropped");
        }
    }

    /// Sends a presence message to the shard owning `user`.
    pub fn presence_to_owner(&self, user: &str, msg: PresenceMsg) {
        let dest = presence::owner_of_user(user, self.engine.shard().count());
        self.to_shard(dest, GatewayMsg::Presence(msg));
    }

    /// Sends a signal message to the shard owning `topic`.
    pub fn signal_to_owner(&self, topic: &str, msg: SignalMsg) {
        let dest = signals::owner_of_topic(topic, self.engine.shard().count());
        self.to_shard(dest, GatewayMsg::Signal(msg));
    }

    fn on_presence(&self, m: PresenceMsg) {
        let now = boltq_io::store::now_ns();
        let mut dir = self.ephemeral.presence.borrow_mut();
        let out: Vec<Delivery> = match m {
            PresenceMsg::Bind { user, device, conn } => match dir.bind(&user, &device, conn, now) {
                Ok(d) => vec![d],
                Err(e) => {
                    log::warn!("[presence] bind {user}/{device}: {e}");
                    Vec::new()
                }
            },
            PresenceMsg::Unbind { user, device, conn } => {
                dir.unbind(&user, &device, conn, now).into_iter().collect()
            }
            PresenceMsg::Heartbeat { user, device, conn } => {
                dir.heartbeat(&user, &device, conn, now);
                Vec::new()
            }
            PresenceMsg::State {
                user,
                device,
                conn,
                state,
            } => dir
                .set_state(&user, &device, conn, state, now)
                .into_iter()
                .collect(),
            PresenceMsg::Watch { user, watcher } => match dir.watch(&user, watcher, now) {
                Ok(d) => vec![d],
                Err(e) => {
                    log::warn!("[presence] watch {user}: {e}");
                    Vec::new()
                }
            },
            PresenceMsg::Unwatch { user, watcher } => {
                dir.unwatch(&user, watcher);
                Vec::new()
            }
            PresenceMsg::Events(events) => {
                drop(dir);
                return self.presence_events_here(events);
            }
        };
        drop(dir);
        self.ephemeral.census.borrow_mut().apply_all(&out);
        self.send_deliveries(out);
    }

    /// Sends events to the shards of their watchers (this shard's directly).
    fn send_deliveries(&self, deliveries: Vec<Delivery>) {
        let me = self.shard_id();
        for (shard, events) in presence::by_shard(deliveries) {
            if shard == me {
                self.presence_events_here(events);
            } else {
                self.to_shard(shard, GatewayMsg::Presence(PresenceMsg::Events(events)));
            }
        }
    }

    /// Queues `presence_event` frames to this shard's watchers that still watch the user.
    fn presence_events_here(&self, events: Vec<(presence::PresenceEvent, Vec<u64>)>) {
        for (ev, conns) in events {
            let frame = text(|o| {
                frame::presence_event(
                    o,
                    &frame::PresenceOut {
                        user_id: &ev.user,
                        device_id: &ev.device,
                        state: ev.state,
                        online: ev.online,
                        at_ns: ev.at_ns,
                    },
                )
            });
            for conn in conns {
                let watching = self
                    .ephemeral
                    .watching
                    .borrow()
                    .get(&conn)
                    .is_some_and(|set| set.contains(&ev.user));
                if !watching {
                    continue;
                }
                if self.push_lossy(conn, &frame) {
                    self.stats.borrow_mut().presence_events += 1;
                } else {
                    self.stats.borrow_mut().presence_drops += 1;
                }
            }
        }
    }

    /// Queues a frame to a local connection unless its outbound queue is full (then the
    /// frame is dropped: ephemeral frames never make a producer wait). False when dropped.
    fn push_lossy(&self, conn: u64, frame: &str) -> bool {
        let conns = self.conns.borrow();
        let Some(out) = conns.get(&conn) else {
            return false;
        };
        if out.is_closing() || !out.has_room() {
            return false;
        }
        out.push(Message::Text(frame.to_string().into()), None);
        self.stats.borrow_mut().frames_out += 1;
        true
    }

    fn on_signal(&self, m: SignalMsg) {
        match m {
            SignalMsg::Listen { topic, listener } => {
                if let Err(e) = self.ephemeral.hub.borrow_mut().listen(&topic, listener) {
                    log::warn!("[signals] listen {topic}: {e}");
                }
            }
            SignalMsg::Unlisten { topic, shard, conn } => self
                .ephemeral
                .hub
                .borrow_mut()
                .unlisten(&topic, shard, conn),
            SignalMsg::Publish(signal) => {
                self.stats.borrow_mut().signals_published += 1;
                let routes = self.ephemeral.hub.borrow().route(&signal);
                let me = self.shard_id();
                for (shard, conns) in routes {
                    if shard == me {
                        self.signals_here(&conns, &signal);
                    } else {
                        let signal = signal.clone();
                        self.to_shard(
                            shard,
                            GatewayMsg::Signal(SignalMsg::Deliver { conns, signal }),
                        );
                    }
                }
            }
            SignalMsg::Deliver { conns, signal } => self.signals_here(&conns, &signal),
            SignalMsg::Take { .. } | SignalMsg::Taken(_) => {
                log::warn!("[signals] rate-limit question sent one-way")
            }
        }
    }

    /// Queues `signal` frames to this shard's listeners (dropped where the queue is full).
    fn signals_here(&self, conns: &[u64], s: &signals::Signal) {
        let frame = text(|o| {
            frame::signal(
                o,
                &frame::SignalOut {
                    topic: &s.topic,
                    sender: &s.sender,
                    kind: &s.kind,
                    headers: frame::HeadersOut::Text(&s.headers),
                    payload: &s.payload,
                    at_ns: s.at_ns,
                },
            )
        });
        for conn in conns {
            if self.push_lossy(*conn, &frame) {
                self.stats.borrow_mut().signals_out += 1;
            } else {
                self.stats.borrow_mut().signal_drops += 1;
            }
        }
    }

    /// One token of `key`'s budget, from this shard's limiter.
    pub fn take_signal_token(&self, key: &str) -> bool {
        self.ephemeral
            .limiter
            .borrow_mut()
            .take(key, boltq_io::store::now_ns())
    }

    /// Expires silent presence sessions and forgets idle rate-limit buckets, every
    /// `presence.sweep_interval`.
    async fn sweep_loop(self: Rc<Self>) {
        loop {
            let every = self.ephemeral.settings.borrow().sweep_interval;
            boltq_shards::sleep(every).await;
            if self.closing.get() {
                return;
            }
            let now = boltq_io::store::now_ns();
            let expired = self.ephemeral.presence.borrow_mut().sweep(now);
            self.ephemeral.census.borrow_mut().apply_all(&expired);
            self.send_deliveries(expired);
            self.ephemeral.limiter.borrow_mut().collect_idle(now);
        }
    }
}

// ---- numbers for the admin routes: presence census, signals, push -------------------------

/// Every presence state, in the order of [`PresenceCensus::by_state`].
pub const PRESENCE_STATES: [PresenceState; 3] = [
    PresenceState::Online,
    PresenceState::Away,
    PresenceState::Offline,
];

fn state_index(s: PresenceState) -> usize {
    match s {
        PresenceState::Online => 0,
        PresenceState::Away => 1,
        PresenceState::Offline => 2,
    }
}

/// One bound device as `/presence?user=` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePresence {
    pub device: String,
    pub state: PresenceState,
    /// When the device entered `state`.
    pub since_ns: i64,
}

/// A user's presence as its owner shard knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserPresence {
    pub user: String,
    /// Any device bound.
    pub online: bool,
    /// The most present state among the devices (online > away > offline).
    pub state: PresenceState,
    pub devices: Vec<DevicePresence>,
}

/// The device states of one shard's users, kept from the transitions its presence
/// directory reports (bound, state changed, unbound, expired).
///
/// Trade-off: a second, smaller copy of what the directory holds (no watchers, no
/// heartbeat times) rather than a scan of the directory on each admin request; it is
/// exactly as bounded as the directory, since it only ever holds devices the directory
/// accepted, and a per-state count is kept so a scrape is O(1).
#[derive(Debug, Default)]
pub struct PresenceCensus {
    users: HashMap<String, BTreeMap<String, (PresenceState, i64)>>,
    by_state: [u64; 3],
}

impl PresenceCensus {
    /// Applies one transition of the directory (snapshots change nothing).
    pub fn apply(&mut self, d: &Delivery) {
        let ev = &d.event;
        match ev.kind {
            EventKind::Snapshot => {}
            EventKind::Bound | EventKind::StateChanged => {
                let devices = self.users.entry(ev.user.clone()).or_default();
                if let Some((old, _)) = devices.insert(ev.device.clone(), (ev.state, ev.at_ns)) {
                    self.by_state[state_index(old)] -= 1;
                }
                self.by_state[state_index(ev.state)] += 1;
            }
            EventKind::Unbound | EventKind::Expired => {
                let Some(devices) = self.users.get_mut(&ev.user) else {
                    return;
                };
                if let Some((old, _)) = devices.remove(&ev.device) {
                    self.by_state[state_index(old)] -= 1;
                }
                if devices.is_empty() {
                    self.users.remove(&ev.user);
                }
            }
        }
    }

    pub fn apply_all(&mut self, ds: &[Delivery]) {
        for d in ds {
            self.apply(d);
        }
    }

    /// Bound devices.
    pub fn sessions(&self) -> u64 {
        self.by_state.iter().sum()
    }

    /// Users with at least one bound device.
    pub fn users_online(&self) -> u64 {
        self.users.len() as u64
    }

    /// Bound devices by state, in the order of [`PRESENCE_STATES`].
    pub fn by_state(&self) -> [u64; 3] {
        self.by_state
    }

    /// `user`'s devices in device order; an unknown user is offline with none.
    pub fn user(&self, user: &str) -> UserPresence {
        let devices: Vec<DevicePresence> = self
            .users
            .get(user)
            .into_iter()
            .flatten()
            .map(|(device, (state, since_ns))| DevicePresence {
                device: device.clone(),
                state: *state,
                since_ns: *since_ns,
            })
            .collect();
        let state = devices
            .iter()
            .map(|d| d.state)
            .min_by_key(|s| state_index(*s))
            .unwrap_or(PresenceState::Offline);
        UserPresence {
            user: user.to_string(),
            online: !devices.is_empty(),
            state,
            devices,
        }
    }
}

/// One shard's numbers for `/presence`, the overview and `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct ShardCensus {
    /// Bound devices of the users this shard owns.
    pub sessions: u64,
    pub users_online: u64,
    /// In the order of [`PRESENCE_STATES`].
    pub by_state: [u64; 3],
    /// (watched user, watching connection) pairs.
    pub watches: u64,
    /// Typing topics with listeners, and listeners, on this shard.
    pub signal_topics: u64,
    pub signal_listeners: u64,
    /// `None` when push is off.
    pub push: Option<crate::messaging::push::dispatcher::PushStats>,
}

impl GatewayCtx {
    /// This shard's [`ShardCensus`].
    pub fn census(&self) -> ShardCensus {
        let e = &self.ephemeral;
        let census = e.census.borrow();
        let dir = e.presence.borrow();
        debug_assert_eq!(census.sessions(), dir.sessions() as u64, "census drift");
        let hub = e.hub.borrow();
        ShardCensus {
            sessions: census.sessions(),
            users_online: census.users_online(),
            by_state: census.by_state(),
            watches: dir.watches() as u64,
            signal_topics: hub.topics() as u64,
            signal_listeners: hub.listens() as u64,
            push: self.pusher.borrow().as_ref().map(|p| p.stats()),
        }
    }

    /// Every shard's [`GatewayCtx::census`], by shard id (`None`: no answer in time).
    pub async fn censuses(&self, timeout_ms: u64) -> Vec<Option<ShardCensus>> {
        let shard = &self.port;
        let mut out = Vec::with_capacity(shard.count());
        for dest in 0..shard.count() {
            if dest == shard.id() {
                out.push(Some(self.census()));
                continue;
            }
            let msg = GatewayMsg::Census;
            out.push(match shard.request(dest, msg, timeout_ms).await {
                Ok(GatewayMsg::CensusOf(c)) => Some(*c),
                _ => None,
            });
        }
        out
    }

    fn user_presence_here(&self, user: &str) -> UserPresence {
        self.ephemeral.census.borrow().user(user)
    }

    /// `user`'s presence, asked of its owner shard; `None` when it did not answer.
    pub async fn user_presence(&self, user: &str, timeout_ms: u64) -> Option<UserPresence> {
        let shard = &self.port;
        let dest = presence::owner_of_user(user, shard.count());
        if dest == shard.id() {
            return Some(self.user_presence_here(user));
        }
        let msg = GatewayMsg::UserPresence {
            user: user.to_string(),
        };
        match shard.request(dest, msg, timeout_ms).await {
            Ok(GatewayMsg::UserPresenceIs(p)) => Some(*p),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messaging::presence::Watcher;
    use boltq_io::testutil::Rng;

    const TTL_NS: i64 = 1_000;

    #[test]
    fn census_follows_bind_state_and_unbind() {
        let mut dir = PresenceDirectory::new(TTL_NS);
        let mut c = PresenceCensus::default();
        c.apply(&dir.bind("alice", "phone", 1, 10).unwrap());
        c.apply(&dir.bind("alice", "laptop", 2, 11).unwrap());
        c.apply(&dir.bind("bob", "phone", 3, 12).unwrap());
        c.apply(
            &dir.set_state("alice", "phone", 1, PresenceState::Away, 20)
                .unwrap(),
        );
        // A watch snapshot changes nothing.
        c.apply(&dir.watch("bob", Watcher { shard: 0, conn: 9 }, 21).unwrap());
        assert_eq!(c.sessions(), 3);
        assert_eq!(c.users_online(), 2);
        assert_eq!(c.by_state(), [2, 1, 0]);
        let a = c.user("alice");
        assert!(a.online);
        assert_eq!(
            a.state,
            PresenceState::Online,
            "the most present device wins"
        );
        assert_eq!(a.devices.len(), 2);
        assert_eq!(a.devices[1].device, "phone");
        assert_eq!(a.devices[1].since_ns, 20);
        c.apply(&dir.unbind("alice", "laptop", 2, 30).unwrap());
        assert_eq!(c.user("alice").state, PresenceState::Away);
        c.apply(&dir.unbind("alice", "phone", 1, 31).unwrap());
        let gone = c.user("alice");
        assert!(!gone.online && gone.devices.is_empty());
        assert_eq!(gone.state, PresenceState::Offline);
        assert_eq!((c.sessions(), c.users_online()), (1, 1));
        c.apply_all(&dir.sweep(12 + TTL_NS + 1));
        assert_eq!(
            (c.sessions(), c.users_online(), c.by_state()),
            (0, 0, [0; 3])
        );
    }

    #[test]
    fn census_agrees_with_the_directory_under_random_traffic() {
        let users = ["a", "b", "c", "d"];
        let devices = ["p", "l", "t"];
        for seed in 0..20 {
            let mut rng = Rng::new(seed);
            let mut dir = PresenceDirectory::new(TTL_NS);
            let mut c = PresenceCensus::default();
            let mut now = 0i64;
            for _ in 0..400 {
                now += rng.below(100) as i64;
                let u = users[rng.below(users.len() as u64) as usize];
                let d = devices[rng.below(devices.len() as u64) as usize];
                let conn = rng.below(3);
                let out: Vec<Delivery> = match rng.below(5) {
                    0 => dir.bind(u, d, conn, now).into_iter().collect(),
                    1 => dir.unbind(u, d, conn, now).into_iter().collect(),
                    2 => {
                        let s = PRESENCE_STATES[rng.below(3) as usize];
                        dir.set_state(u, d, conn, s, now).into_iter().collect()
                    }
                    3 => {
                        dir.heartbeat(u, d, conn, now);
                        Vec::new()
                    }
                    _ => dir.sweep(now),
                };
                c.apply_all(&out);
                assert_eq!(c.sessions(), dir.sessions() as u64, "seed {seed}");
                for u in users {
                    let snap = dir.snapshot(u, now);
                    let mine = c.user(u);
                    assert_eq!(mine.online, snap.online, "seed {seed} user {u}");
                    assert_eq!(mine.state, snap.state, "seed {seed} user {u}");
                }
                let online = users.iter().filter(|u| dir.online(u)).count() as u64;
                assert_eq!(c.users_online(), online, "seed {seed}");
            }
        }
    }
}
