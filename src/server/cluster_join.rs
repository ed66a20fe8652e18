//! Joining through seeds and leaving on SIGTERM (v1's behaviour, queue-plane spec §6.4).
//!
//! A node with `cluster.seeds` that does not bootstrap asks a seed to add it: after
//! `JOIN_DELAY_MS`, it POSTs `/cluster/join` to each seed in turn until one answers 200,
//! for up to `JOIN_ROUNDS_MAX` rounds with a backoff doubling from `JOIN_BACKOFF_MS_MIN` to
//! `JOIN_BACKOFF_MS_MAX`; then it runs unjoined with a warning. Asking again is harmless (a
//! member's join changes nothing), so a restarted member asks too. On SIGTERM such a node
//! POSTs `/cluster/leave` to its seeds until one answers 200, before it closes its
//! storage: its groups keep running meanwhile, since removing it may need its vote (of two
//! voters, both must agree) or its hand-over of the slots it leads.

use crate::admin::member_call::MemberCall;
use crate::config::Config;
use crate::queue::server::replicated::MEMBERS_SETTLE_MS;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const JOIN_DELAY_MS: u64 = 2_000;
pub const JOIN_ROUNDS_MAX: u32 = 15;
pub const JOIN_BACKOFF_MS_MIN: u64 = 2_000;
pub const JOIN_BACKOFF_MS_MAX: u64 = 30_000;
/// One call's limit: a seed answers once its groups show the change
/// (`MEMBERS_SETTLE_MS`), plus time to connect and answer.
pub const CALL_TIMEOUT_MS: u64 = MEMBERS_SETTLE_MS + 5_000;
/// How long a leave on SIGTERM may hold the shutdown up, all seeds together.
pub const LEAVE_TIMEOUT_MS: u64 = 60_000;
/// Most bytes of a seed's answer read.
const ANSWER_BYTES_MAX: usize = 64 * 1024;

/// Whether this node joins through seeds at start and leaves through them on SIGTERM.
pub fn uses_seeds(config: &Config, name: &str) -> bool {
    config.cluster.enabled && !config.cluster.seeds.is_empty() && !config.is_bootstrap_node(name)
}

/// Asks the seeds to add this node until one does, or gives up with a warning.
pub async fn join(config: &Config, name: &str, shards: usize, admitted: Arc<AtomicBool>) {
    let fresh = !admitted.load(Ordering::Acquire);
    let (tcp_addr, http_addr) = super::cluster::client_addrs(config);
    boltq_shards::sleep(Duration::from_millis(JOIN_DELAY_MS)).await;
    let body = json!({
        "node_id": name,
        "addr": config.cluster.raft_addr,
        "non_voter": config.cluster.non_voter,
        "shards": shards,
        "fresh": fresh,
        "tcp_addr": tcp_addr,
        "http_addr": http_addr,
    });
    let mut backoff_ms = JOIN_BACKOFF_MS_MIN;
    for round in 1..=JOIN_ROUNDS_MAX {
        for seed in &config.cluster.seeds {
            match call(config, seed, "/cluster/join", &body, CALL_TIMEOUT_MS).await {
                Ok(()) => {
                    log::info!("joined the cluster through seed {seed}");
                    admitted.store(true, Ordering::Release);
                    return;
                }
                Err(e) => log::warn!("join through seed {seed} (round {round}): {e}"),
            }
        }
        boltq_shards::sleep(Duration::from_millis(backoff_ms)).await;
        backoff_ms = (backoff_ms * 2).min(JOIN_BACKOFF_MS_MAX);
    }
    log::warn!(
        "no seed accepted this node after {JOIN_ROUNDS_MAX} rounds; it runs unjoined (ask a member: POST /cluster/join)"
    );
}

/// Asks the seeds to remove this node until one does or `LEAVE_TIMEOUT_MS` passes.
pub async fn leave(config: &Config, name: &str) {
    let deadline = Instant::now() + Duration::from_millis(LEAVE_TIMEOUT_MS);
    let body = json!({ "node_id": name });
    while Instant::now() < deadline {
        for seed in &config.cluster.seeds {
            let left = deadline.saturating_duration_since(Instant::now());
            let timeout_ms = (left.as_millis() as u64).min(CALL_TIMEOUT_MS);
            if timeout_ms == 0 {
                break;
            }
            match call(config, seed, "/cluster/leave", &body, timeout_ms).await {
                Ok(()) => {
                    log::info!("left the cluster through seed {seed}");
                    return;
                }
                Err(e) => log::warn!("leave through seed {seed}: {e}"),
            }
        }
        boltq_shards::sleep(Duration::from_millis(JOIN_BACKOFF_MS_MIN)).await;
    }
    log::warn!("no seed confirmed this node's leave within {LEAVE_TIMEOUT_MS} ms; stopping anyway");
}

/// POSTs `body` to `path` on `seed` (its admin API, as [`MemberCall`] reaches it).
async fn call(
    config: &Config,
    seed: &str,
    path: &str,
    body: &serde_json::Value,
    timeout_ms: u64,
) -> Result<(), String> {
    MemberCall::from_config(config)
        .post(seed, path, body, timeout_ms, ANSWER_BYTES_MAX)
        .await
        .map(|_| ())
}
