//! Which peers a node's raft listener takes: those whose shared settings match its own
//! (`shared_settings.rs`), and the ones it refused lately, with why, for the log,
//! `/readyz` and `/cluster/status`.
//!
//! A refused peer dials again every `transport::BACKOFF_MS_MAX`, so a refusal is warned
//! about at most once per `REFUSAL_LOG_MS` per peer, and reported for `REFUSAL_FORGET_MS`
//! after the peer's last attempt (one that then links is taken off at once).

use super::shared_settings::SharedSettings;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Least time between two warnings about the same refused peer.
pub const REFUSAL_LOG_MS: u64 = 60_000;
/// How long a refusal is reported after the peer's last attempt.
pub const REFUSAL_FORGET_MS: u64 = 10_000;
/// Peers whose last refusal is remembered (more: the memory starts over; the sender's id
/// is whatever its hello says, so a hostile one could name many).
const REFUSALS_REMEMBERED_MAX: usize = 1024;

pub struct Admission {
    pub(super) node_id: u64,
    settings: SharedSettings,
    refusals: RefCell<BTreeMap<u64, Refusal>>,
}

/// The last refusal of one peer.
struct Refusal {
    reason: String,
    at: Instant,
    warned_at: Instant,
}

impl Admission {
    pub fn new(node_id: u64, settings: SharedSettings) -> Admission {
        Admission {
            node_id,
            settings,
            refusals: RefCell::new(BTreeMap::new()),
        }
    }

    /// Takes node `from`, whose hello carried `theirs`, or says why not (each setting both
    /// name with different values). A refusal is recorded; a peer taken is refused no more.
    pub(super) fn admit(&self, from: u64, theirs: &SharedSettings) -> Result<(), String> {
        let differences = self.settings.differences(theirs);
        if differences.is_empty() {
            self.refusals.borrow_mut().remove(&from);
            return Ok(());
        }
        Err(differences.join("; "))
    }

    /// Records that `from` (at `peer`) was refused for `reason`, and warns unless it did
    /// for this peer within `REFUSAL_LOG_MS`.
    pub(super) fn refused(&self, from: u64, peer: &str, reason: &str) {
        let now = Instant::now();
        let quiet = Duration::from_millis(REFUSAL_LOG_MS);
        let warned_lately = {
            let mut refusals = self.refusals.borrow_mut();
            if refusals.len() >= REFUSALS_REMEMBERED_MAX && !refusals.contains_key(&from) {
                refusals.clear();
            }
            let warned_at = refusals
                .get(&from)
                .map(|r| r.warned_at)
                .filter(|at| now.duration_since(*at) < quiet);
            refusals.insert(
                from,
                Refusal {
                    reason: reason.to_string(),
                    at: now,
                    warned_at: warned_at.unwrap_or(now),
                },
            );
            warned_at.is_some()
        };
        if warned_lately {
            log::debug!("raft link from node {from} ({peer}) refused again: {reason}");
            return;
        }
        log::warn!(
            "refused the raft link from node {from} ({peer}) to node {}: its settings differ \
             from this node's, and members that differ apply the same log differently ({reason}). \
             Every member must run the same values: set them alike on every member and \
             restart the members that differ",
            self.node_id
        );
    }

    /// The peers refused within the last `REFUSAL_FORGET_MS`, with why.
    pub fn refused_peers(&self) -> Vec<(u64, String)> {
        let now = Instant::now();
        let recent = Duration::from_millis(REFUSAL_FORGET_MS);
        self.refusals
            .borrow()
            .iter()
            .filter(|(_, r)| now.duration_since(r.at) < recent)
            .map(|(&from, r)| (from, r.reason.clone()))
            .collect()
    }
}
