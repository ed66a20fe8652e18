//! What a node counts about its groups, in its shard's metrics registry (exported by
//! `/metrics` with the rest of the registry; the names live with the plane's side of the
//! seam, `queue::server::replicated`, where the admin layer can read them).

use super::node::ProposeError;
use super::replica::NotApplied;
use super::transport::LinkCounters;
use crate::queue::server::replicated::{
    ANSWERED_WITHOUT_ENTRY_METRIC, APPLIED_METRIC, COMMANDS_REFUSED_METRIC, FOLLOWER_LAG_METRIC,
    GROUPS_QUIESCENT_METRIC, LEADER_CHANGES_METRIC, LINK_BATCHES_DROPPED_METRIC,
    LINK_CONNECTS_METRIC, MESSAGES_SENT_METRIC, SLOTS_LED_METRIC, SLOTS_WITHOUT_LEADER_METRIC,
    SNAPSHOTS_INSTALLED_METRIC, SNAPSHOTS_SENT_METRIC, TRANSFERS_METRIC,
};
use boltq_shards::metrics::{Counter, Gauge, Registry};

/// Handles on a registry's series; detached (counted nowhere) until `register`.
#[derive(Default)]
pub struct NodeMetrics {
    pub applied: Counter,
    pub leader_changes: Counter,
    pub snapshots_installed: Counter,
    pub snapshots_sent: Counter,
    pub transfers: Counter,
    pub messages_sent: Counter,
    pub answered_without_entry: Counter,
    pub slots_led: Gauge,
    pub slots_without_leader: Gauge,
    pub groups_quiescent: Gauge,
    pub follower_lag: Gauge,
    pub links: LinkCounters,
    /// `COMMANDS_REFUSED_METRIC`, one series per reason, in `REFUSAL_REASONS` order.
    pub refused: Vec<Counter>,
}

/// The `reason` labels of `COMMANDS_REFUSED_METRIC`.
const REFUSAL_REASONS: [&str; 7] = [
    "not_leader",
    "not_applied",
    "outcome_unknown",
    "timed_out",
    "too_many",
    "stopped",
    "other",
];

/// The `reason` a refusal is counted under.
fn refusal_reason(e: &ProposeError) -> &'static str {
    match e {
        ProposeError::NotLeader { .. } => "not_leader",
        ProposeError::NotApplied(NotApplied::Superseded) => "not_applied",
        ProposeError::NotApplied(NotApplied::Unknown) => "outcome_unknown",
        ProposeError::TimedOut => "timed_out",
        ProposeError::TooMany => "too_many",
        ProposeError::Stopped(_) => "stopped",
        ProposeError::UnknownSlot(_)
        | ProposeError::MembershipPending
        | ProposeError::Malformed
        | ProposeError::MembershipRefused(_) => "other",
    }
}

impl NodeMetrics {
    pub fn register(registry: &Registry) -> NodeMetrics {
        NodeMetrics {
            applied: registry.counter(APPLIED_METRIC, &[]),
            leader_changes: registry.counter(LEADER_CHANGES_METRIC, &[]),
            snapshots_installed: registry.counter(SNAPSHOTS_INSTALLED_METRIC, &[]),
            snapshots_sent: registry.counter(SNAPSHOTS_SENT_METRIC, &[]),
            transfers: registry.counter(TRANSFERS_METRIC, &[]),
            messages_sent: registry.counter(MESSAGES_SENT_METRIC, &[]),
            answered_without_entry: registry.counter(ANSWERED_WITHOUT_ENTRY_METRIC, &[]),
            slots_led: registry.gauge(SLOTS_LED_METRIC, &[]),
            slots_without_leader: registry.gauge(SLOTS_WITHOUT_LEADER_METRIC, &[]),
            groups_quiescent: registry.gauge(GROUPS_QUIESCENT_METRIC, &[]),
            follower_lag: registry.gauge(FOLLOWER_LAG_METRIC, &[]),
            refused: REFUSAL_REASONS
                .iter()
                .map(|reason| registry.counter(COMMANDS_REFUSED_METRIC, &[("reason", reason)]))
                .collect(),
            links: LinkCounters {
                connects: registry.counter(LINK_CONNECTS_METRIC, &[]),
                batches_dropped: registry.counter(LINK_BATCHES_DROPPED_METRIC, &[]),
            },
        }
    }

    /// Counts a command that got no outcome under its reason (nowhere while detached).
    pub fn count_refusal(&self, e: &ProposeError) {
        let reason = refusal_reason(e);
        let at = REFUSAL_REASONS
            .iter()
            .position(|r| *r == reason)
            .expect("every reason is listed");
        if let Some(counter) = self.refused.get(at) {
            counter.add(1);
        }
    }
}
