//! The gateway's counters (`/gateway/stats`, `/metrics`): one shard's, and every shard's
//! asked over the mesh.

use super::{GatewayCtx, GatewayMsg};

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
    /// Signals the topic's owner did not deliver because their sender passed its rate on
    /// that topic there: a sender typing through devices on several nodes, each of which
    /// admitted its share (`Ephemeral::delivery_limiter`).
    pub signals_held_back: u64,
    /// Signals routed by this shard as the owner of their topic (each is fanned out to
    /// its listeners once).
    pub signals_published: u64,
    /// Ephemeral messages dropped because the outbox to another shard was full.
    pub ephemeral_mesh_drops: u64,
    /// Presence and typing frames sent to and taken from the other nodes of a cluster,
    /// and those refused as unreadable (`relay.rs`).
    pub relay_frames_out: u64,
    pub relay_frames_in: u64,
    pub relay_refused: u64,
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
        self.signals_held_back += o.signals_held_back;
        self.signals_published += o.signals_published;
        self.ephemeral_mesh_drops += o.ephemeral_mesh_drops;
        self.relay_frames_out += o.relay_frames_out;
        self.relay_frames_in += o.relay_frames_in;
        self.relay_refused += o.relay_refused;
    }
}

impl GatewayCtx {
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
}
