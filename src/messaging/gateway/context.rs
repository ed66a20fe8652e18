//! The gateway on one shard: what every connection and op shares (engine, settings,
//! identity, sessions, live connections, counters, the ephemeral state), its start and its
//! shutdown.

use super::census::PresenceCensus;
use super::ephemeral::Ephemeral;
use super::frame;
use super::outbound::Outbound;
use super::session::SessionStore;
use super::settings::{EphemeralSettings, GatewaySettings};
use super::stats::GatewayStats;
use super::GatewayMsg;
use crate::messaging::engine::Engine;
use crate::messaging::identity::acl::Policy;
use crate::messaging::identity::token::Verifier;
use crate::messaging::membership::MembershipClient;
use crate::messaging::presence::PresenceDirectory;
use crate::messaging::signals::RateLimiter;
use async_tungstenite::tungstenite::Message;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

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
    pub(super) pusher: RefCell<Option<Rc<crate::messaging::push::Pusher>>>,
    next_conn: Cell<u64>,
    rng: ring::rand::SystemRandom,
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
        *e.delivery_limiter.borrow_mut() =
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

    /// Queues a frame to a local connection unless its outbound queue is full (then the
    /// frame is dropped: ephemeral frames never make a producer wait). False when dropped.
    pub(super) fn push_lossy(&self, conn: u64, frame: &str) -> bool {
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

    pub(super) async fn reap_loop(self: Rc<Self>) {
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
