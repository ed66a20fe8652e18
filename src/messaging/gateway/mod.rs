//! The WebSocket gateway (spec/messaging-edge.md §2): end-user devices connect here.
//!
//! - `upgrade`: authentication and origin checks, then the RFC 6455 handshake.
//! - `connection`: one socket's request loop, writer, liveness and token expiry.
//! - `ops`: one function per client operation.
//! - `subscription`: streaming a partition to a socket.
//! - `session`, `outbound`: state kept across sockets; the bounded outbound queue.
//! - `frame`: the JSON frame codec.

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
use outbound::Outbound;
use session::SessionStore;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
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
    pub records_out: u64,
    pub slow_client_drops: u64,
    pub sends: u64,
    /// Sessions tracked, attached or in their resume window (filled by [`GatewayCtx::report`]).
    pub sessions: u64,
    /// Sessions holding a socket (filled by [`GatewayCtx::report`]).
    pub attached: u64,
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
        self.records_out += o.records_out;
        self.slow_client_drops += o.slow_client_drops;
        self.sends += o.sends;
        self.sessions += o.sessions;
        self.attached += o.attached;
    }
}

/// The gateway on one shard.
pub struct GatewayCtx {
    pub engine: Rc<Engine>,
    pub settings: GatewaySettings,
    pub verifier: Verifier,
    pub policy: Policy,
    pub membership: MembershipClient,
    pub sessions: RefCell<SessionStore>,
    /// Live connections' outbound queues (takeover and shutdown close them).
    pub conns: RefCell<HashMap<u64, Rc<Outbound>>>,
    pub stats: RefCell<GatewayStats>,
    pub closing: Cell<bool>,
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
        settings: GatewaySettings,
        verifier: Verifier,
        policy: Policy,
        membership: MembershipClient,
    ) -> Rc<GatewayCtx> {
        let shard = engine.shard().id() as u64;
        let gw = Rc::new(GatewayCtx {
            engine,
            settings,
            verifier,
            policy,
            membership,
            sessions: RefCell::new(SessionStore::default()),
            conns: RefCell::new(HashMap::new()),
            stats: RefCell::new(GatewayStats::default()),
            closing: Cell::new(false),
            next_conn: Cell::new(shard << 48),
            rng: ring::rand::SystemRandom::new(),
        });
        boltq_shards::spawn(Rc::clone(&gw).reap_loop()).detach();
        gw
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
        use crate::server::shard_main::ShardMsg;
        let shard = self.engine.shard();
        let mut out = Vec::with_capacity(shard.count());
        for dest in 0..shard.count() {
            if dest == shard.id() {
                out.push(Some(self.report()));
                continue;
            }
            let msg = ShardMsg::Gateway(GatewayMsg::Stats);
            out.push(match shard.request(dest, msg, timeout_ms).await {
                Ok(ShardMsg::Gateway(GatewayMsg::StatsOf(s))) => Some(*s),
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
}

impl GatewayCtx {
    /// Asks the other shards for a session this shard does not hold.
    pub async fn engine_take_remote(
        &self,
        sid: &str,
        secret: &str,
        user: &str,
    ) -> Option<session::SessionState> {
        let shard = self.engine.shard();
        for dest in (0..shard.count()).filter(|d| *d != shard.id()) {
            let msg = crate::server::shard_main::ShardMsg::Gateway(GatewayMsg::Take {
                session: sid.to_string(),
                secret: secret.to_string(),
                user: user.to_string(),
            });
            if let Ok(crate::server::shard_main::ShardMsg::Gateway(GatewayMsg::Taken(Some(s)))) =
                shard.request(dest, msg, 2_000).await
            {
                return Some(s);
            }
        }
        None
    }

    pub fn on_mesh(&self, incoming: boltq_shards::Incoming<crate::server::shard_main::ShardMsg>) {
        use crate::server::shard_main::ShardMsg;
        if let boltq_shards::Incoming::Request {
            msg: ShardMsg::Gateway(GatewayMsg::Stats),
            token,
        } = incoming
        {
            let s = Box::new(self.report());
            self.engine
                .shard()
                .reply(token, ShardMsg::Gateway(GatewayMsg::StatsOf(s)));
            return;
        }
        if let boltq_shards::Incoming::Request {
            msg:
                ShardMsg::Gateway(GatewayMsg::Take {
                    session,
                    secret,
                    user,
                }),
            token,
        } = incoming
        {
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
            self.engine
                .shard()
                .reply(token, ShardMsg::Gateway(GatewayMsg::Taken(state)));
        }
    }
}
