//! The gateway's settings, resolved from the configuration once at start.

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
    /// A socket that accepts no bytes this long while outbound data waits is closed as a
    /// slow consumer (`messaging.gateway.slow_consumer_timeout`).
    pub slow_consumer_timeout: Duration,
    pub read_limit_bytes: usize,
    pub history_limit: u32,
    pub leeway_s: i64,
    pub fanout_on_write_limit: usize,
    /// How often a live subscription re-runs its read check while delivering: the
    /// membership cache's TTL (1 s when the cache is off).
    pub acl_recheck: Duration,
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
