//! One shard's share of presence and typing, and its upkeep: the TTL sweep of silent
//! presence sessions and idle rate-limit buckets.

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
    pub watching: RefCell<HashMap<u64, BTreeSet<String>>>,
    /// Device states of the users this shard owns, for `/presence` and metrics.
    pub census: RefCell<PresenceCensus>,
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
            watching: RefCell::new(HashMap::new()),
            census: RefCell::new(PresenceCensus::default()),
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
            self.send_deliveries(expired);
            self.ephemeral.limiter.borrow_mut().collect_idle(now);
        }
    }
}
