//! Starting the messaging plane: what every shard needs, built once from the configuration,
//! then the engine and (when enabled) the gateway on each shard.

use crate::config::{Config, FsyncMode};
use crate::http::client::{TlsOptions, TLS_ERRORS_METRIC};
use crate::messaging::engine::{Engine, EngineConfig, StreamPort};
use crate::messaging::gateway::{GatewayCtx, GatewayPort, GatewaySettings};
use crate::messaging::identity::acl::Policy;
use crate::messaging::identity::token::Verifier;
use crate::messaging::membership::MembershipClient;
use crate::messaging::push::Pusher;
use crate::messaging::topic::PartitionCounts;
use boltq_io::log::LogConfig;
use boltq_io::Store;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

/// Bytes a connection's outbound queue may hold before its producers wait (spec §19
/// decision 6).
pub const SEND_BUFFER_BYTES: usize = 4 * 1024 * 1024;

/// The messaging plane's start-up facts, shared by all shards.
pub struct MessagingPlan {
    pub topics: HashMap<String, u32>,
    pub engine: EngineConfig,
    pub gateway: Option<GatewaySettings>,
    pub config: crate::config::MessagingConfig,
    /// `cluster.enabled`: the partitions will be replicated through slot groups (set up
    /// after the engine starts).
    pub replicated: bool,
}

impl MessagingPlan {
    /// Reads the topic catalog and resolves settings; an error stops the start.
    pub fn build(config: &Config, data_dir: &Path) -> Result<MessagingPlan, String> {
        let m = &config.messaging;
        let env = |k: &str| std::env::var(k).ok();
        if m.identity.enabled {
            Verifier::from_config(&m.identity, &env)?; // fail at start, not per shard
        }
        Policy::from_config(&m.identity.policy)?;
        let topics = crate::messaging::engine::catalog::load(data_dir)?;
        let st = &m.stream;
        let engine = EngineConfig {
            data_dir: data_dir.to_path_buf(),
            counts: PartitionCounts {
                conversation: m.chat.conversation_partitions,
                inbox: m.chat.inbox_partitions,
                default: st.default_partitions,
            },
            log: LogConfig {
                segment_bytes: st.segment_bytes,
                index_interval_bytes: st.index_interval,
                retention_bytes: st.retention_bytes,
                retention_ms: st.retention_age.as_millis() as u64,
                ..LogConfig::default()
            },
            fanout_on_write_limit: m.chat.effective_fanout_on_write_limit() as usize,
            dedup_ttl_ns: m.dedup.ttl.as_nanos() as i64,
            dedup_entries_max: m.dedup.max_entries as usize,
            sync_always: m.fsync == FsyncMode::Always || st.sync_on_append,
        };
        let g = &m.gateway;
        let gateway = g.enabled.then(|| GatewaySettings {
            path: g.path.clone(),
            allowed_origins: g.allowed_origins.clone(),
            shared_key: Some(config.security.api_key.clone())
                .filter(|k| !k.is_empty() && g.allow_shared_key),
            allow_anonymous: m.identity.allow_anonymous,
            resume_window: g.resume_window,
            pong_timeout: g.pong_timeout,
            max_subscriptions: g.max_subscriptions as usize,
            send_buffer_frames: g.send_buffer as usize,
            send_buffer_bytes: g.send_buffer_bytes as usize,
            slow_consumer_timeout: g.slow_consumer_timeout,
            read_limit_bytes: g.read_limit as usize,
            history_limit: g.history_limit,
            leeway_s: m.identity.leeway.as_secs() as i64,
            fanout_on_write_limit: m.chat.effective_fanout_on_write_limit() as usize,
            acl_recheck: m
                .identity
                .membership_cache_ttl
                .filter(|d| !d.is_zero())
                .unwrap_or(std::time::Duration::from_secs(1)),
        });
        Ok(MessagingPlan {
            topics,
            engine,
            gateway,
            config: m.clone(),
            replicated: config.cluster.enabled,
        })
    }

    /// Starts the engine, the push dispatcher (when enabled) and the gateway on one shard,
    /// each on its own port of that shard.
    pub async fn start(
        &self,
        stream_port: StreamPort,
        gateway_port: GatewayPort,
        store: Rc<Store>,
    ) -> Result<(Rc<Engine>, Option<Rc<GatewayCtx>>), String> {
        let engine =
            Engine::start(stream_port, store, self.engine.clone(), self.topics.clone()).await?;
        // The pusher lives as long as its loop (which holds it) and the engine's hook.
        let pusher = match self.config.push.enabled {
            true => Some(Pusher::start(
                Rc::clone(&engine),
                self.replicated,
                &self.config.push,
                self.outbound_tls(&engine, "push"),
            )?),
            false => None,
        };
        let Some(settings) = &self.gateway else {
            return Ok((engine, None));
        };
        let env = |k: &str| std::env::var(k).ok();
        let verifier = Verifier::from_config(&self.config.identity, &env)?;
        let policy = Policy::from_config(&self.config.identity.policy)?;
        let membership = MembershipClient::from_config(&self.config.chat, &self.config.identity)
            .map_err(|e| format!("messaging.chat.membership_url: {e}"))?
            .with_tls(self.outbound_tls(&engine, "membership"));
        let gw = GatewayCtx::new(
            Rc::clone(&engine),
            gateway_port,
            settings.clone(),
            verifier,
            policy,
            membership,
        );
        if let Some(p) = pusher {
            // Suppression: users with a live session get no push (spec §10.4).
            let g = Rc::clone(&gw);
            p.set_online_probe(Rc::new(move |user: String| {
                let g = Rc::clone(&g);
                Box::pin(async move { g.user_online(&user).await })
            }));
            gw.set_pusher(p);
        }
        Ok((engine, Some(gw)))
    }

    /// Whom an outbound client's `https://` calls trust, its failed handshakes counted in
    /// the shard's registry under `client`.
    fn outbound_tls(&self, engine: &Engine, client: &str) -> TlsOptions {
        TlsOptions {
            ca_file: self.config.http_client.ca_file.clone(),
            errors: Some(
                engine
                    .shard()
                    .metrics()
                    .counter(TLS_ERRORS_METRIC, &[("client", client)]),
            ),
        }
    }
}
