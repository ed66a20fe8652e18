//! One shard's share of presence and typing, and its upkeep: the TTL sweep of silent
//! presence sessions (this node's, and those other nodes reported) and idle rate-limit
//! buckets.

use super::census::PresenceCensus;
use super::settings::EphemeralSettings;
use super::GatewayCtx;
use crate::messaging::presence::PresenceDirectory;
use crate::messaging::signals::{RateLimiter, SignalHub};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

/// One shard's share of presence and typing: the directory of the users it owns, the
/// listener lists of the typing topics it owns, the rate limits of the senders it owns,
/// and which users each local connection watches (late events for a user no longer
/// watched are filtered out here).
pub struct Ephemeral {
    pub settings: RefCell<EphemeralSettings>,
    pub presence: RefCell<PresenceDirectory>,
    pub hub: RefCell<SignalHub>,
    pub limiter: RefCell<RateLimiter>,
    /// The same budget again, per (topic, sender), applied by the topic's owner to every
    /// signal it routes, whichever node admitted it: each node's `limiter` only sees the
    /// sender's devices connected there, so without it a sender on three nodes reached
    /// listeners at three times the rate.
    pub delivery_limiter: RefCell<RateLimiter>,
    pub watching: RefCell<HashMap<u64, BTreeSet<String>>>,
    /// Device states of the users this shard owns, for `/presence` and metrics (this
    /// node's devices only).
    pub census: RefCell<PresenceCensus>,
    /// The relay to the other nodes of a cluster, once their links are up.
    pub relay: RefCell<Option<super::relay_routing::Relay>>,
}

impl Ephemeral {
    pub(super) fn new(settings: EphemeralSettings) -> Ephemeral {
        Ephemeral {
            presence: RefCell::new(PresenceDirectory::new(
                settings.presence_ttl.as_nanos() as i64
            )),
            hub: RefCell::new(SignalHub::default()),
            limiter: RefCell::new(RateLimiter::new(
                settings.signals.rate_per_second,
                settings.signals.burst,
            )),
            delivery_limiter: RefCell::new(RateLimiter::new(
                settings.signals.rate_per_second,
                settings.signals.burst,
            )),
            watching: RefCell::new(HashMap::new()),
            census: RefCell::new(PresenceCensus::default()),
            relay: RefCell::new(None),
            settings: RefCell::new(settings),
        }
    }
}

impl GatewayCtx {
    /// Expires silent presence sessions and forgets idle rate-limit buckets, every
    /// `presence.sweep_interval`.
    pub(super) async fn sweep_loop(self: Rc<Self>) {
        loop {
            let every = self.ephemeral.settings.borrow().sweep_interval;
            boltq_shards::sleep(every).await;
            if self.closing.get() {
                return;
            }
            let now = boltq_io::store::now_ns();
            let expired = self.ephemeral.presence.borrow_mut().sweep(now);
            self.ephemeral.census.borrow_mut().apply_all(&expired);
            self.relay_changes(&expired);
            self.send_deliveries(expired);
            let reported = self.ephemeral.presence.borrow_mut().sweep_remote(now);
            self.send_deliveries(reported);
            self.ephemeral.limiter.borrow_mut().collect_idle(now);
            self.ephemeral
                .delivery_limiter
                .borrow_mut()
                .collect_idle(now);
        }
    }
}
