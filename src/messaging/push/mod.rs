//! Offline push (spec/messaging-edge.md §10, §18.5; spec/messaging-engine.md §11): the
//! driver around the sans-IO [`dispatcher::Dispatcher`]; docs/offline-push.md for receivers.
//!
//! Where it runs: one dispatcher per shard, for the inbox partitions that shard owns. The
//! pointers are appended there, the partition's `push-dispatcher` cursors live in that
//! shard's cursor store, and the engine calls this shard's hook for every pointer it
//! appends, in-process. So an inbox is watched from its first pointer (decision 14), reads
//! and commits never cross shards, the work spreads over shards like users do, and one
//! webhook call still carries the pointers of many users (all those on the shard).
//!
//! With `cluster.enabled` every node applies every pointer, but only the dispatcher of the
//! node leading the inbox's slot acts on it; the cursors go through the slot's group like
//! any other. A node that gains a slot watches its inboxes from their committed cursors,
//! and one that loses it lets them go ([`LEADERSHIP_CHECK_MS`]), so a leader change
//! repeats the pushes whose cursor move was not committed yet. An inbox's first pointer
//! anchors its cursor in the same replicated apply (`StreamSlotConfig::anchor_push_cursors`),
//! so a leader dying right after it leaves the next one a cursor to start from.
//!
//! Positions: an inbox partition with a committed cursor resumes there (also after a
//! restart). A partition with none is tracked from the first pointer appended after push
//! was enabled, and that position is committed at once ("anchored"; in a cluster the
//! slot does it with the pointer) so a crash before its first push does not lose it;
//! inboxes that existed before push was enabled are not notified of their history.
//!
//! Presence: "online" suppression asks the shard owning the user's presence
//! (`GatewayCtx::user_online`, installed with [`Pusher::set_online_probe`] when the gateway
//! is on). A user with any bound session, `away` included, gets no push; no answer within
//! a second counts as offline (spec §18.5 G45). Without a gateway nobody is online.

pub mod dispatcher;
pub mod settings;

use crate::config::PushConfig;
use crate::http::client::{parse_url, HttpClient, HttpRequest, Method, ParsedUrl, TlsOptions};
use crate::messaging::cursor::{self, CursorKey, PUSH_DISPATCHER_GROUP};
use crate::messaging::engine::mesh::AppendReq;
use crate::messaging::engine::mirror::PartitionKey;
use crate::messaging::engine::Engine;
use boltq_io::event::Event;
use boltq_io::store::now_ns;
use dispatcher::{
    Attempt, Candidate, Dispatcher, Outcome, PushStats, Settings, Verdict, DEAD_LETTER_TOPIC,
};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

/// Answer bytes read from the webhook; a longer 2xx answer counts as a failure.
pub const RESPONSE_BODY_BYTES_MAX: usize = 64 * 1024;
/// Idle keep-alive connections to the webhook (spec §10.3).
pub const IDLE_CONNECTIONS_MAX: usize = 32;
/// Connect timeout of a webhook call.
pub const CONNECT_TIMEOUT_MS: u64 = 3_000;
/// Partitions read per loop turn, so appends and answers are looked at between reads.
pub const READS_PER_TURN_MAX: usize = 32;
/// Appended-but-unseen partitions remembered between turns; beyond it the dispatcher
/// re-scans the catalog for tracked inboxes instead.
pub const APPENDED_PARTITIONS_MAX: usize = 100_000;
/// Wait after a failed read or cursor lookup before trying again.
pub const ERROR_PAUSE_MS: u64 = 1_000;
/// With `cluster.enabled`: how often the loop looks at which slots this node leads, so a
/// new leader takes its inboxes over (and a deposed one lets go) within about this long.
pub const LEADERSHIP_CHECK_MS: u64 = 500;
/// Who creates the dead-letter topic, for the engine's per-user topic-creation quota.
const DEAD_LETTER_WRITER: &str = "boltq-push";

/// Whether a user has a live session anywhere (spec §10.4).
pub type OnlineProbe = Rc<dyn Fn(String) -> Pin<Box<dyn Future<Output = bool>>>>;

/// What the engine's hook and the loop share.
#[derive(Default)]
struct Inbox {
    /// Partition → (lowest, highest) pointer seq appended since the loop last looked. The
    /// lowest is where an inbox new to the dispatcher starts: every pointer appended since
    /// the hook was installed passed through here.
    appended: RefCell<HashMap<PartitionKey, (u64, u64)>>,
    overflowed: Cell<bool>,
    wake: Event,
}

/// One shard's push dispatcher.
pub struct Pusher {
    engine: Rc<Engine>,
    inbox: Rc<Inbox>,
    http: HttpClient,
    url: ParsedUrl,
    auth_header: String,
    timeout: Duration,
    scan_interval: Duration,
    online: RefCell<Option<OnlineProbe>>,
    stats: RefCell<PushStats>,
    closing: Cell<bool>,
}

impl Pusher {
    /// Hooks the engine and starts this shard's dispatcher loop.
    /// `replicated`: `cluster.enabled` (the engine's replication is set after this starts).
    pub fn start(
        engine: Rc<Engine>,
        replicated: bool,
        cfg: &PushConfig,
        tls: TlsOptions,
    ) -> Result<Rc<Pusher>, String> {
        let url =
            parse_url(&cfg.webhook_url).map_err(|e| format!("messaging.push.webhook_url: {e}"))?;
        let settings = Settings {
            grace_ns: cfg.grace_delay.as_nanos().min(i64::MAX as u128) as i64,
            max_attempts: cfg.max_attempts,
            signing_secret: cfg.signing_secret.as_bytes().to_vec(),
            delivery_prefix: format!("{:x}-{}", now_ns(), engine.shard().id()),
        };
        let core = Dispatcher::new(settings).map_err(|e| format!("messaging.push: {e}"))?;
        let inbox = Rc::new(Inbox::default());
        let hook_inbox = Rc::clone(&inbox);
        engine.set_pointer_hook(Rc::new(move |topic: &str, partition: u32, seq: u64| {
            let mut a = hook_inbox.appended.borrow_mut();
            let key = (topic.to_string(), partition);
            if a.len() >= APPENDED_PARTITIONS_MAX && !a.contains_key(&key) {
                hook_inbox.overflowed.set(true);
            } else {
                let e = a.entry(key).or_insert((seq, seq));
                *e = (e.0.min(seq), e.1.max(seq));
            }
            drop(a);
            hook_inbox.wake.notify();
        }));
        let pusher = Rc::new(Pusher {
            engine,
            inbox,
            http: HttpClient::new(IDLE_CONNECTIONS_MAX)
                .with_connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
                .with_tls(tls),
            url,
            auth_header: cfg.auth_header.clone(),
            timeout: cfg.timeout,
            scan_interval: cfg.scan_interval,
            online: RefCell::new(None),
            stats: RefCell::new(PushStats::default()),
            closing: Cell::new(false),
        });
        boltq_shards::spawn(Rc::clone(&pusher).run(core, replicated)).detach();
        Ok(pusher)
    }

    /// Installs the presence check used for suppression.
    pub fn set_online_probe(&self, probe: OnlineProbe) {
        *self.online.borrow_mut() = Some(probe);
    }

    pub fn stats(&self) -> PushStats {
        self.stats.borrow().clone()
    }

    /// Stops the loop at its next turn (what is unsettled is re-read after a restart).
    pub fn close(&self) {
        self.closing.set(true);
        self.inbox.wake.notify();
    }

    fn push_key(key: &PartitionKey) -> Option<CursorKey> {
        CursorKey::new(&key.0, key.1, PUSH_DISPATCHER_GROUP, "").ok()
    }

    async fn run(self: Rc<Self>, mut core: Dispatcher, replicated: bool) {
        // With replication: the slots led at the last look (none yet).
        let mut led: Option<BTreeSet<u16>> = None;
        if !replicated {
            self.scan(&mut core, None).await;
        }
        while !self.closing.get() {
            let ticket = self.inbox.wake.ticket();
            self.follow_leadership(&mut core, &mut led).await;
            if self.inbox.overflowed.replace(false) {
                log::warn!("[push] append notices overflowed; re-scanning tracked inboxes");
                self.scan(&mut core, led.as_ref()).await;
            }
            let ok = self.take_appended(&mut core).await && self.read(&mut core).await;
            self.check_due(&mut core).await;
            let called = self.attempt(&mut core).await;
            let ok = self.dead_letter(&mut core).await && ok;
            self.commit(&mut core).await;
            *self.stats.borrow_mut() = core.stats();
            if called || !core.to_read(1).is_empty() && ok {
                continue;
            }
            let now = now_ns();
            let mut wait = self.scan_interval;
            if replicated {
                wait = wait.min(Duration::from_millis(LEADERSHIP_CHECK_MS));
            }
            if !ok {
                wait = wait.min(Duration::from_millis(ERROR_PAUSE_MS));
            }
            if let Some(at) = core.next_wake_ns() {
                wait = wait.min(Duration::from_nanos(at.saturating_sub(now).max(0) as u64));
            }
            if !wait.is_zero() {
                let _ = boltq_shards::timeout(wait, self.inbox.wake.wait(ticket)).await;
            }
        }
    }

    /// Tracks every inbox partition this shard owns that has a push cursor (start-up and
    /// after an overflow of append notices).
    /// With `cluster.enabled`, a partition's pointers are acted on by the dispatcher of its
    /// slot's leader only. When this node gains slots, their inboxes are watched from their
    /// committed `push-dispatcher` cursors: a pointer the old leader had not settled when it
    /// died or was deposed is read again and sent (at least once: one it had sent but not
    /// committed is sent again). When it loses slots, their inboxes are let go at once.
    async fn follow_leadership(&self, core: &mut Dispatcher, led: &mut Option<BTreeSet<u16>>) {
        let Some(now) = self.engine.led_slots() else {
            return;
        };
        if led.as_ref() == Some(&now) {
            return;
        }
        let lost: Vec<PartitionKey> = core
            .tracked()
            .filter(|(topic, p)| !now.contains(&boltq_shards::partition_slot(topic, *p)))
            .cloned()
            .collect();
        for key in &lost {
            core.untrack(key);
        }
        let gained: BTreeSet<u16> = match led.as_ref() {
            Some(before) => now.difference(before).copied().collect(),
            None => now.clone(),
        };
        if !lost.is_empty() || !gained.is_empty() {
            log::info!(
                "[push] leading {} slots: {} gained, {} inboxes let go",
                now.len(),
                gained.len(),
                lost.len()
            );
        }
        *led = Some(now);
        if !gained.is_empty() {
            self.scan(core, Some(&gained)).await;
        }
    }

    /// Watches the inbox partitions this shard owns (of `slots` only, when given) that have
    /// a committed cursor and are not watched yet.
    async fn scan(&self, core: &mut Dispatcher, slots: Option<&BTreeSet<u16>>) {
        let me = self.engine.shard().id();
        let count = self.engine.shard().count();
        for (topic, partitions) in self.engine.topics() {
            if !topic.starts_with("chat.inbox.") {
                continue;
            }
            for p in 0..partitions {
                let key = (topic.clone(), p);
                let in_slots =
                    slots.is_none_or(|s| s.contains(&boltq_shards::partition_slot(&topic, p)));
                if !in_slots
                    || boltq_shards::owner_of_partition(&topic, p, count) != me
                    || core.is_tracked(&key)
                {
                    continue;
                }
                let Some(ck) = Self::push_key(&key) else {
                    continue;
                };
                if let Ok(Some(c)) = self.engine.cursor(ck).await {
                    core.track(key, c);
                }
            }
        }
    }

    /// Marks appended partitions for reading; an untracked one starts at its cursor, or,
    /// with none, at this pointer, anchored by a commit.
    async fn take_appended(&self, core: &mut Dispatcher) -> bool {
        let appended = std::mem::take(&mut *self.inbox.appended.borrow_mut());
        let mut ok = true;
        for (key, (low, seq)) in appended {
            if core.appended(&key, seq) || !self.engine.leads_partition(&key.0, key.1) {
                continue; // watched already, or led elsewhere since the pointer was applied
            }
            let Some(ck) = Self::push_key(&key) else {
                continue;
            };
            match self.engine.cursor(ck.clone()).await {
                Ok(Some(c)) => core.track(key.clone(), c),
                Ok(None) => {
                    // The first pointers of this inbox since push was enabled: anchor them
                    // (tests skip it, as a crash before the commit would).
                    let skip = crate::faults::is_named("skip-push-anchor", Some(&key.0));
                    if skip {
                        log::warn!("[push] {}: not anchored (BOLTQ_FAULTS)", key.0);
                    } else if let Err(e) = self.engine.commit(ck, low).await {
                        log::warn!("[push] anchoring {}/{}: {e}", key.0, key.1);
                    }
                    core.track(key.clone(), low);
                }
                Err(e) => {
                    log::warn!("[push] cursor of {}/{}: {e}", key.0, key.1);
                    self.inbox
                        .appended
                        .borrow_mut()
                        .insert(key.clone(), (low, seq));
                    ok = false;
                    continue;
                }
            }
            core.appended(&key, seq);
        }
        ok
    }

    async fn read(&self, core: &mut Dispatcher) -> bool {
        for (key, from) in core.to_read(READS_PER_TURN_MAX) {
            match self
                .engine
                .read(&key.0, key.1, from, dispatcher::READ_RECORDS_MAX, false)
                .await
            {
                Ok(r) => core.offer(&key, &r.records, r.first_seq, r.next_seq),
                Err(e) => {
                    log::warn!("[push] reading {}/{}: {e}", key.0, key.1);
                    return false;
                }
            }
        }
        true
    }

    async fn check_due(&self, core: &mut Dispatcher) {
        for c in core.take_due(now_ns()) {
            let v = self.verdict(&c).await;
            core.settle(c, v, now_ns());
        }
    }

    /// Read on a device (inbox or conversation cursor past the pointer), online, or push.
    async fn verdict(&self, c: &Candidate) -> Verdict {
        let n = &c.notification;
        let group = cursor::user_group(&n.user_id);
        let passed = |members: &[(String, u64)], seq: u64| members.iter().any(|(_, s)| *s > seq);
        if let Ok(g) = self
            .engine
            .group_cursors(&c.inbox.0, c.inbox.1, &group)
            .await
        {
            if passed(&g.members, c.seq) {
                return Verdict::Read;
            }
        }
        if let Some(topic) = &n.conv_topic {
            if let Ok(g) = self
                .engine
                .group_cursors(topic, n.conv_partition, &group)
                .await
            {
                if passed(&g.members, n.conv_seq) {
                    return Verdict::Read;
                }
            }
        }
        let probe = self.online.borrow().clone();
        match probe {
            Some(p) if p(n.user_id.clone()).await => Verdict::Online,
            _ => Verdict::Push,
        }
    }

    /// Makes the call the dispatcher asks for, if any; true when one was made.
    async fn attempt(&self, core: &mut Dispatcher) -> bool {
        let Some(a) = core.next_attempt(now_ns()) else {
            return false;
        };
        let answer = match self.post(&a).await {
            Ok(body) => Some(body),
            Err(e) => {
                log::warn!(
                    "[push] delivery {} attempt {} failed: {e}",
                    a.delivery_id,
                    a.attempt
                );
                None
            }
        };
        let ok = answer.is_some();
        match core.outcome(ok, answer.as_deref().unwrap_or_default(), now_ns()) {
            Outcome::Dropped {
                count, attempts, ..
            } => log::warn!(
                "[push] giving up on {count} notifications of delivery {} after {attempts} \
                 attempts; they go to {DEAD_LETTER_TOPIC}",
                a.delivery_id
            ),
            Outcome::RetryAt { sent, .. } if ok => log::info!(
                "[push] delivery {}: the receiver accepted {sent} of {} and named the rest \
                 as failed; retrying those",
                a.delivery_id,
                a.count
            ),
            Outcome::Sent(_) | Outcome::RetryAt { .. } => {}
        }
        true
    }

    /// Appends the notifications given up on to [`DEAD_LETTER_TOPIC`] (partition 0, keyed
    /// by user), each durably, before their cursors may move past them; on a failure they
    /// stay held and are tried again after a pause. False when an append failed.
    async fn dead_letter(&self, core: &mut Dispatcher) -> bool {
        let dead = core.take_dead();
        if dead.is_empty() {
            return true;
        }
        for (i, d) in dead.iter().enumerate() {
            let req = AppendReq {
                topic: DEAD_LETTER_TOPIC.to_string(),
                partition: 0,
                key: d.candidate.notification.user_id.clone().into_bytes().into(),
                headers: Vec::new(),
                payload: d.payload().into(),
                user: DEAD_LETTER_WRITER.to_string(),
                dedup: None,
                pointer_members: Vec::new(),
            };
            if let Err(e) = self.engine.append(req).await {
                log::warn!("[push] appending to {DEAD_LETTER_TOPIC}: {e}; trying again");
                core.dead_lettered(&dead[..i]);
                core.dead_letters_failed(dead[i..].to_vec());
                return false;
            }
        }
        core.dead_lettered(&dead);
        true
    }

    /// The body of a 2xx answer, or why the attempt failed.
    async fn post(&self, a: &Attempt) -> Result<Vec<u8>, String> {
        let req = request(&self.url, &self.auth_header, a);
        self.http
            .request(&req, self.timeout, RESPONSE_BODY_BYTES_MAX)
            .await
            .map(|r| r.body)
            .map_err(|e| e.to_string())
    }

    async fn commit(&self, core: &mut Dispatcher) {
        for (key, seq) in core.take_commits() {
            let Some(ck) = Self::push_key(&key) else {
                continue;
            };
            if let Err(e) = self.engine.commit(ck, seq).await {
                // The position stays behind: a restart re-sends from there (at-least-once).
                log::warn!("[push] committing {}/{} at {seq}: {e}", key.0, key.1);
            }
        }
    }
}

/// Pointers read but not settled yet (`boltq_push_lag_records`): neither acknowledged by a
/// 2xx, given up on, nor skipped (online, read, no key or the sender's own). Pointers
/// appended but not read yet are not counted: the read loop reaches them within a turn,
/// and a stuck webhook shows here as soon as they are read.
pub fn unsettled(s: &PushStats) -> u64 {
    let settled = s.sent + s.dropped + s.suppressed + s.read + s.skipped;
    s.scanned.saturating_sub(settled)
}

/// The webhook request of one attempt (spec §10.2 plus the signature headers).
pub fn request(url: &ParsedUrl, auth_header: &str, a: &Attempt) -> HttpRequest {
    let mut headers = vec![
        ("Content-Type".to_string(), "application/json".to_string()),
        ("X-BoltQ-Timestamp".to_string(), a.timestamp_s.to_string()),
        ("X-BoltQ-Signature".to_string(), a.signature.clone()),
        ("X-BoltQ-Delivery".to_string(), a.delivery_id.clone()),
    ];
    if !auth_header.is_empty() {
        headers.push(("Authorization".to_string(), auth_header.to_string()));
    }
    HttpRequest {
        method: Method::Post,
        url: url.clone(),
        headers,
        body: a.body.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsettled_counts_read_pointers_without_an_outcome() {
        let s = PushStats {
            scanned: 10,
            sent: 3,
            dropped: 1,
            suppressed: 2,
            read: 1,
            skipped: 1,
            failed: 7, // attempts, not pointers: no part of the lag
            watching: 4,
        };
        assert_eq!(unsettled(&s), 2);
        let caught_up = PushStats {
            scanned: 3,
            sent: 3,
            ..Default::default()
        };
        assert_eq!(unsettled(&caught_up), 0);
        // Counters taken at different moments never make the lag wrap.
        let odd = PushStats {
            scanned: 1,
            sent: 2,
            ..Default::default()
        };
        assert_eq!(unsettled(&odd), 0);
    }
}
