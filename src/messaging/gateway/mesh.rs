//! The gateway's messages between shards and their handler: session hand-overs on resume,
//! presence and typing routed to their owner shards, and the admin numbers asked of every
//! shard.

use super::census::{ShardCensus, UserPresence};
use super::session;
use super::stats::GatewayStats;
use super::{ops, GatewayCtx};
use crate::messaging::presence::{self, PresenceMsg};
use crate::messaging::signals::SignalMsg;

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
    /// Hands session `sid` over if this shard holds it and `secret` and `user` match,
    /// closing the socket that held it (4009).
    pub(super) fn take_here(
        &self,
        sid: &str,
        secret: &str,
        user: &str,
    ) -> Option<session::SessionState> {
        let window_ns = self.settings.resume_window.as_nanos() as i64;
        let now_ns = boltq_io::store::now_ns();
        let taken =
            self.sessions
                .borrow_mut()
                .take(sid, secret.as_bytes(), user, now_ns, window_ns);
        taken.map(|(state, conn)| {
            if let Some(conn) = conn {
                ops::close_taken_over(self, conn);
            }
            state
        })
    }

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
                let state = self.take_here(&session, &secret, &user);
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

    pub(super) fn shard_id(&self) -> usize {
        self.engine.shard().id()
    }

    /// Sends a one-way gateway message; at the outbox cap it is dropped and counted
    /// (ephemeral traffic is lossy by design; the TTL sweep repairs a lost unbind).
    pub(super) fn to_shard(&self, dest: usize, msg: GatewayMsg) {
        if self.port.send(dest, msg).is_err() {
            self.stats.borrow_mut().ephemeral_mesh_drops += 1;
            log::warn!("[gateway] outbox to shard {dest} full: ephemeral message dropped");
        }
    }
}
