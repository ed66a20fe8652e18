//! Who belongs to a conversation: direct ids answered from the id itself, groups by the
//! operator's membership service (spec/messaging-edge.md §5).
//!
//! - Direct conversations (`a:b`) need no service: [`direct_members`], [`is_direct_member`].
//!   Whether an id is direct is the caller's call, made from the topic kind (G33): a group
//!   id that happens to contain one `:` is still a group.
//! - The ACL question "is this user in this group?" goes to `GET <base>/is-member` (G36)
//!   and its answers, yes and no alike, are cached for the TTL in a [`MembershipCache`]:
//!   bounded, oldest entries evicted first rather than the whole cache flushed, with
//!   per-user and per-group invalidation, and disabled by a zero or negative TTL (G37).
//! - The member list for fan-out goes to `GET <base>/members` on every send, uncached: a
//!   send must reach the group as it is now.
//! - With no service configured, groups have no members (fail closed) while direct
//!   conversations keep working.

use crate::config::{ChatConfig, IdentityConfig};
use crate::http::client::{
    parse_url, percent_encode_query, HttpClient, HttpError, HttpRequest, TlsOptions,
};
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

/// Most cached membership answers.
pub const MEMBERSHIP_CACHE_ENTRIES_MAX: usize = 200_000;
/// Answers whose tenant, user and group together are longer than this are not cached, so
/// the cache's memory stays bounded by [`MEMBERSHIP_CACHE_ENTRIES_MAX`] times this.
pub const MEMBERSHIP_CACHE_KEY_BYTES_MAX: usize = 512;
/// Most members accepted in one `/members` answer.
pub const MEMBERS_COUNT_MAX: usize = 100_000;
/// Largest membership-service body read.
pub const MEMBERSHIP_RESPONSE_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Idle keep-alive connections kept to the service.
pub const MEMBERSHIP_IDLE_CONNECTIONS_MAX: usize = 64;
/// Total timeout of one call when the configured one is zero.
pub const MEMBERSHIP_TIMEOUT_MS_DEFAULT: u64 = 3_000;
/// Connect timeout within a call (capped by the call's total timeout).
pub const MEMBERSHIP_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Separates the two user ids of a direct conversation id.
pub const DIRECT_SEPARATOR: char = ':';

/// The two users of a direct conversation id: exactly two non-empty parts around one
/// [`DIRECT_SEPARATOR`]. `a`, `a:b:c`, `:`, `:b`, `a:` and `""` are not direct ids.
pub fn direct_members(conversation: &str) -> Option<[String; 2]> {
    split_direct(conversation).map(|(a, b)| [a.to_string(), b.to_string()])
}

/// Whether `user` is one of the two users of the direct conversation `conversation`;
/// false for anything that is not a direct id.
pub fn is_direct_member(conversation: &str, user: &str) -> bool {
    split_direct(conversation).is_some_and(|(a, b)| a == user || b == user)
}

fn split_direct(conversation: &str) -> Option<(&str, &str)> {
    let (a, b) = conversation.split_once(DIRECT_SEPARATOR)?;
    let direct = !a.is_empty() && !b.is_empty() && !b.contains(DIRECT_SEPARATOR);
    direct.then_some((a, b))
}

// ---------------------------------------------------------------------------------------
// The cache

struct Entry {
    member: bool,
    expires_ns: i64,
    /// Position in [`MembershipCache::order`].
    stamp: u64,
}

/// Sans-IO cache of membership answers keyed by (tenant, user, group).
///
/// Eviction is by insertion age (a refreshed answer counts as new): with one TTL for all,
/// the oldest entry is also the first to expire, so a full cache sheds what is stalest
/// instead of flushing everything and sending a burst of calls to the service.
///
/// Invalidation bumps a generation number; an answer fetched while an invalidation
/// happened is not stored (it may predate the change being invalidated for).
pub struct MembershipCache {
    /// `None`: caching is off.
    ttl_ns: Option<i64>,
    entries_max: usize,
    /// (tenant, group) → user → answer.
    groups: HashMap<String, HashMap<String, Entry>>,
    /// Insertion stamp → (group key, user): oldest first.
    order: BTreeMap<u64, (String, String)>,
    next_stamp: u64,
    generation: u64,
}

impl MembershipCache {
    /// A cache of up to [`MEMBERSHIP_CACHE_ENTRIES_MAX`] answers kept for `ttl`; `None` or
    /// zero turns caching off.
    pub fn new(ttl: Option<Duration>) -> MembershipCache {
        MembershipCache::with_entries_max(ttl, MEMBERSHIP_CACHE_ENTRIES_MAX)
    }

    /// As [`MembershipCache::new`] with a smaller bound (at least 1, at most the default).
    pub fn with_entries_max(ttl: Option<Duration>, entries_max: usize) -> MembershipCache {
        let ttl_ns = ttl
            .filter(|t| !t.is_zero())
            .map(|t| i64::try_from(t.as_nanos()).unwrap_or(i64::MAX));
        MembershipCache {
            ttl_ns,
            entries_max: entries_max.clamp(1, MEMBERSHIP_CACHE_ENTRIES_MAX),
            groups: HashMap::new(),
            order: BTreeMap::new(),
            next_stamp: 0,
            generation: 0,
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.ttl_ns.is_some()
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Changes with every invalidation; pass the value read before a lookup to
    /// [`MembershipCache::insert`].
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The cached answer, if there is one younger than the TTL.
    pub fn get(&mut self, tenant: &str, user: &str, group: &str, now_ns: i64) -> Option<bool> {
        let key = group_key(tenant, group);
        let entry = self.groups.get(&key)?.get(user)?;
        if entry.expires_ns > now_ns {
            return Some(entry.member);
        }
        self.remove(&key, user);
        None
    }

    /// Stores an answer fetched from the service at `now_ns` (the time the question was
    /// asked, so the entry expires no later than it should), unless caching is off, the
    /// key is too long, or an invalidation happened since `seen_generation`.
    pub fn insert(
        &mut self,
        tenant: &str,
        user: &str,
        group: &str,
        member: bool,
        now_ns: i64,
        seen_generation: u64,
    ) {
        let Some(ttl_ns) = self.ttl_ns else { return };
        if seen_generation != self.generation
            || tenant.len() + user.len() + group.len() > MEMBERSHIP_CACHE_KEY_BYTES_MAX
        {
            return;
        }
        let key = group_key(tenant, group);
        self.remove(&key, user);
        self.drop_expired(now_ns);
        while self.len() >= self.entries_max {
            self.evict_oldest();
        }
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        let entry = Entry {
            member,
            expires_ns: now_ns.saturating_add(ttl_ns),
            stamp,
        };
        self.groups
            .entry(key.clone())
            .or_default()
            .insert(user.to_string(), entry);
        self.order.insert(stamp, (key, user.to_string()));
        debug_assert!(self.len() <= self.entries_max);
    }

    /// Forgets one user's answer for one group.
    pub fn invalidate(&mut self, tenant: &str, user: &str, group: &str) {
        self.generation += 1;
        self.remove(&group_key(tenant, group), user);
    }

    /// Forgets every answer about one group of one tenant.
    pub fn invalidate_group(&mut self, tenant: &str, group: &str) {
        self.generation += 1;
        if let Some(users) = self.groups.remove(&group_key(tenant, group)) {
            for entry in users.values() {
                self.order.remove(&entry.stamp);
            }
        }
    }

    fn remove(&mut self, key: &str, user: &str) {
        let Some(users) = self.groups.get_mut(key) else {
            return;
        };
        if let Some(entry) = users.remove(user) {
            self.order.remove(&entry.stamp);
        }
        if users.is_empty() {
            self.groups.remove(key);
        }
    }

    /// Drops expired entries from the old end; stops at the first live one.
    fn drop_expired(&mut self, now_ns: i64) {
        while let Some((_, (key, user))) = self.order.first_key_value() {
            let expired = self
                .groups
                .get(key)
                .and_then(|users| users.get(user))
                .is_none_or(|e| e.expires_ns <= now_ns);
            if !expired {
                return;
            }
            self.evict_oldest();
        }
    }

    fn evict_oldest(&mut self) {
        if let Some((_, (key, user))) = self.order.pop_first() {
            self.remove(&key, &user);
        }
    }
}

/// One string per (tenant, group), unambiguous whatever the ids contain.
fn group_key(tenant: &str, group: &str) -> String {
    format!("{}:{tenant}{group}", tenant.len())
}

// ---------------------------------------------------------------------------------------
// Answers

/// Why a membership question has no answer; callers deny (ACL) or fail the send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipError {
    /// The configured base URL is unusable.
    Config(String),
    /// The call failed: transport, timeout, a non-2xx status, a body over the cap.
    Http(HttpError),
    /// A 2xx answer that is not the expected JSON.
    Malformed(String),
}

impl fmt::Display for MembershipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MembershipError::Config(m) => write!(f, "membership service misconfigured: {m}"),
            MembershipError::Http(e) => write!(f, "membership service: {e}"),
            MembershipError::Malformed(m) => write!(f, "membership service answered badly: {m}"),
        }
    }
}

impl std::error::Error for MembershipError {}

impl From<HttpError> for MembershipError {
    fn from(e: HttpError) -> Self {
        MembershipError::Http(e)
    }
}

#[derive(Deserialize)]
struct IsMemberBody {
    /// Absent or null means not a member (never true by default).
    #[serde(default)]
    member: Option<bool>,
}

#[derive(Deserialize)]
struct MembersBody {
    #[serde(default)]
    members: Option<BoundedMembers>,
}

/// A JSON array of strings that stops at [`MEMBERS_COUNT_MAX`] while being read.
struct BoundedMembers(Vec<String>);

impl<'de> Deserialize<'de> for BoundedMembers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Bounded;
        impl<'de> Visitor<'de> for Bounded {
            type Value = BoundedMembers;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an array of at most {MEMBERS_COUNT_MAX} strings")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<BoundedMembers, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = seq.next_element::<String>()? {
                    if members.len() == MEMBERS_COUNT_MAX {
                        return Err(serde::de::Error::custom(format!(
                            "more than {MEMBERS_COUNT_MAX} members"
                        )));
                    }
                    members.push(member);
                }
                Ok(BoundedMembers(members))
            }
        }
        d.deserialize_seq(Bounded)
    }
}

/// `{"member": true}` → true; `false`, null or absent → false.
pub fn parse_is_member(body: &[u8]) -> Result<bool, MembershipError> {
    expect_object(body, "is-member")?;
    serde_json::from_slice::<IsMemberBody>(body)
        .map(|b| b.member.unwrap_or(false))
        .map_err(|e| MembershipError::Malformed(format!("is-member: {e}")))
}

/// `{"members": [...]}` → the list; null or absent → empty.
pub fn parse_members(body: &[u8]) -> Result<Vec<String>, MembershipError> {
    expect_object(body, "members")?;
    serde_json::from_slice::<MembersBody>(body)
        .map(|b| b.members.map(|m| m.0).unwrap_or_default())
        .map_err(|e| MembershipError::Malformed(format!("members: {e}")))
}

/// serde would also fill a struct from a JSON array (`[true]` as `{"member": true}`);
/// only an object is an answer.
fn expect_object(body: &[u8], route: &str) -> Result<(), MembershipError> {
    match body.trim_ascii_start().first() {
        Some(b'{') => Ok(()),
        _ => Err(MembershipError::Malformed(format!(
            "{route}: the answer is not a JSON object"
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// The client

/// The operator's membership service, with the ACL answer cache, for one shard.
pub struct MembershipClient {
    /// Trailing `/` removed; `None`: no service, groups have no members.
    base_url: Option<String>,
    /// Sent verbatim as `Authorization`.
    auth_header: Option<String>,
    /// Total per call, redirects and body included.
    timeout: Duration,
    http: HttpClient,
    cache: RefCell<MembershipCache>,
}

impl MembershipClient {
    /// `base_url` "" means no service. A zero `timeout` means the 3 s default. `cache_ttl`
    /// `None` or zero turns the answer cache off.
    pub fn new(
        base_url: &str,
        auth_header: &str,
        timeout: Duration,
        cache_ttl: Option<Duration>,
    ) -> Result<MembershipClient, MembershipError> {
        let base_url = match base_url.trim() {
            "" => None,
            url => Some(checked_base(url)?),
        };
        let timeout = if timeout.is_zero() {
            Duration::from_millis(MEMBERSHIP_TIMEOUT_MS_DEFAULT)
        } else {
            timeout
        };
        let connect_timeout = timeout.min(Duration::from_millis(MEMBERSHIP_CONNECT_TIMEOUT_MS));
        Ok(MembershipClient {
            base_url,
            auth_header: Some(auth_header.to_string()).filter(|h| !h.is_empty()),
            timeout,
            http: HttpClient::new(MEMBERSHIP_IDLE_CONNECTIONS_MAX)
                .with_connect_timeout(connect_timeout),
            cache: RefCell::new(MembershipCache::new(cache_ttl)),
        })
    }

    /// From `[messaging.chat]` (service) and `[messaging.identity]` (cache TTL).
    pub fn from_config(
        chat: &ChatConfig,
        identity: &IdentityConfig,
    ) -> Result<MembershipClient, MembershipError> {
        MembershipClient::new(
            &chat.membership_url,
            &chat.membership_auth_header,
            chat.membership_timeout,
            identity.membership_cache_ttl,
        )
    }

    /// Whom `https://` membership URLs trust, and where failed handshakes are counted.
    pub fn with_tls(mut self, tls: TlsOptions) -> MembershipClient {
        self.http = self.http.with_tls(tls);
        self
    }

    /// The base URL in use, trailing slashes removed; `None` without a service.
    pub fn base_url(&self) -> Option<&str> {
        self.base_url.as_deref()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether `user` of `tenant` is in `group` (the ACL question): cached answer, else
    /// `GET <base>/is-member`. Errors are never cached. Without a service: false.
    pub async fn is_member(
        &self,
        tenant: &str,
        user: &str,
        group: &str,
        now_ns: i64,
    ) -> Result<bool, MembershipError> {
        let Some(base) = &self.base_url else {
            return Ok(false);
        };
        let generation = {
            let mut cache = self.cache.borrow_mut();
            if let Some(member) = cache.get(tenant, user, group, now_ns) {
                return Ok(member);
            }
            cache.generation()
        };
        let url = format!(
            "{base}/is-member?tenant={}&user={}&group={}",
            percent_encode_query(tenant),
            percent_encode_query(user),
            percent_encode_query(group)
        );
        let member = parse_is_member(&self.get(&url).await?)?;
        self.cache
            .borrow_mut()
            .insert(tenant, user, group, member, now_ns, generation);
        Ok(member)
    }

    /// Everyone in `group` of `tenant` (for fan-out), fetched on every call. Without a
    /// service: nobody.
    pub async fn members(&self, tenant: &str, group: &str) -> Result<Vec<String>, MembershipError> {
        let Some(base) = &self.base_url else {
            return Ok(Vec::new());
        };
        let url = format!(
            "{base}/members?tenant={}&group={}",
            percent_encode_query(tenant),
            percent_encode_query(group)
        );
        parse_members(&self.get(&url).await?)
    }

    /// Forgets the cached answer for one user of one group.
    pub fn invalidate(&self, tenant: &str, user: &str, group: &str) {
        self.cache.borrow_mut().invalidate(tenant, user, group);
    }

    /// Forgets every cached answer about one group.
    pub fn invalidate_group(&self, tenant: &str, group: &str) {
        self.cache.borrow_mut().invalidate_group(tenant, group);
    }

    /// Cached answers held now.
    pub fn cached_answers(&self) -> usize {
        self.cache.borrow().len()
    }

    async fn get(&self, url: &str) -> Result<Vec<u8>, MembershipError> {
        let mut req = HttpRequest::get(parse_url(url)?);
        req.headers
            .push(("Accept".into(), "application/json".into()));
        if let Some(auth) = &self.auth_header {
            req.headers.push(("Authorization".into(), auth.clone()));
        }
        let answer = self
            .http
            .request(&req, self.timeout, MEMBERSHIP_RESPONSE_BYTES_MAX)
            .await?;
        Ok(answer.body)
    }
}

/// The base URL with trailing slashes removed, checked to be usable for both routes.
fn checked_base(url: &str) -> Result<String, MembershipError> {
    let base = url.trim_end_matches('/');
    if base.contains(['?', '#']) {
        return Err(MembershipError::Config(format!(
            "membership_url {url:?} must not carry a query or fragment"
        )));
    }
    parse_url(&format!("{base}/is-member"))
        .map_err(|e| MembershipError::Config(format!("membership_url {url:?}: {e}")))?;
    Ok(base.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::client::test_server::{self, Reply};
    use boltq_io::testutil::Rng;
    use std::time::Instant;

    const SEC: i64 = 1_000_000_000;

    fn ttl(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    /// Runs `f` with a client for `base` (cache off unless `cache_ttl`), on a temporary
    /// glommio executor.
    fn with_client<T: Send + 'static, F>(
        base: String,
        timeout: Duration,
        cache_ttl: Option<Duration>,
        f: F,
    ) -> T
    where
        F: for<'a> FnOnce(
                &'a MembershipClient,
            )
                -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>
            + Send
            + 'static,
    {
        boltq_shards::block_on("membership-test", move || {
            Box::pin(async move {
                let client =
                    MembershipClient::new(&base, "Bearer s3cret", timeout, cache_ttl).unwrap();
                f(&client).await
            })
        })
        .unwrap()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    // --- direct conversations -----------------------------------------------------------

    #[test]
    fn direct_members_derive_from_the_id() {
        assert_eq!(
            direct_members("alice:bob"),
            Some(["alice".to_string(), "bob".to_string()])
        );
        for bad in ["a", "a:b:c", ":", ":b", "a:", "", "::"] {
            assert_eq!(direct_members(bad), None, "{bad:?}");
        }
        assert!(is_direct_member("alice:bob", "alice"));
        assert!(is_direct_member("alice:bob", "bob"));
        assert!(!is_direct_member("alice:bob", "carol"));
        assert!(!is_direct_member("alice:bob", "alice:bob"));
        assert!(!is_direct_member("a:b:c", "a"));
        assert!(!is_direct_member(":b", ""));
    }

    // --- the cache ----------------------------------------------------------------------

    #[test]
    fn cached_answers_both_ways_for_the_ttl() {
        let mut c = MembershipCache::new(ttl(30));
        let g = c.generation();
        c.insert("t", "alice", "g1", true, 0, g);
        c.insert("t", "bob", "g1", false, 0, g);
        assert_eq!(c.get("t", "alice", "g1", 29 * SEC), Some(true));
        assert_eq!(c.get("t", "bob", "g1", 29 * SEC), Some(false));
        assert_eq!(c.get("t", "carol", "g1", 0), None);
        assert_eq!(
            c.get("other", "alice", "g1", 0),
            None,
            "tenants are separate"
        );
        assert_eq!(c.get("t", "alice", "g2", 0), None);
        assert_eq!(
            c.get("t", "alice", "g1", 30 * SEC),
            None,
            "expired at the TTL"
        );
        assert_eq!(c.len(), 1, "an expired entry found by get is dropped");
    }

    #[test]
    fn a_refreshed_answer_replaces_the_old_one() {
        let mut c = MembershipCache::new(ttl(30));
        c.insert("t", "u", "g", true, 0, 0);
        c.insert("t", "u", "g", false, 10 * SEC, 0);
        assert_eq!(c.len(), 1);
        assert_eq!(c.get("t", "u", "g", 35 * SEC), Some(false));
    }

    #[test]
    fn invalidation_per_user_and_per_group() {
        let mut c = MembershipCache::new(ttl(30));
        for (tenant, user, group) in [
            ("t", "a", "g"),
            ("t", "b", "g"),
            ("t", "a", "h"),
            ("u", "a", "g"),
        ] {
            c.insert(tenant, user, group, true, 0, 0);
        }
        c.invalidate("t", "a", "g");
        assert_eq!(c.get("t", "a", "g", 0), None);
        assert_eq!(c.get("t", "b", "g", 0), Some(true));
        c.insert("t", "a", "g", true, 0, c.generation());
        c.invalidate_group("t", "g");
        assert_eq!(
            (c.get("t", "a", "g", 0), c.get("t", "b", "g", 0)),
            (None, None)
        );
        assert_eq!(c.get("t", "a", "h", 0), Some(true), "other groups stay");
        assert_eq!(c.get("u", "a", "g", 0), Some(true), "other tenants stay");
        assert_eq!(c.len(), 2);
        c.invalidate_group("t", "nothing-cached");
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn an_answer_fetched_across_an_invalidation_is_not_stored() {
        let mut c = MembershipCache::new(ttl(30));
        let seen = c.generation();
        c.invalidate_group("t", "g");
        c.insert("t", "u", "g", true, 0, seen);
        assert_eq!(c.get("t", "u", "g", 0), None);
    }

    #[test]
    fn a_full_cache_evicts_the_oldest_not_everything() {
        let mut c = MembershipCache::with_entries_max(ttl(30), 3);
        for (i, user) in ["a", "b", "c", "d"].iter().enumerate() {
            c.insert("t", user, "g", true, i as i64, 0);
        }
        assert_eq!(c.len(), 3);
        assert_eq!(c.get("t", "a", "g", 10), None);
        for user in ["b", "c", "d"] {
            assert_eq!(c.get("t", user, "g", 10), Some(true), "{user}");
        }
    }

    #[test]
    fn expired_entries_go_before_live_ones() {
        let mut c = MembershipCache::with_entries_max(ttl(1), 2);
        c.insert("t", "a", "g", true, 0, 0);
        c.insert("t", "b", "g", true, 5 * SEC, 0);
        c.insert("t", "c", "g", true, 5 * SEC, 0);
        assert_eq!(c.get("t", "b", "g", 5 * SEC), Some(true));
        assert_eq!(c.get("t", "c", "g", 5 * SEC), Some(true));
    }

    #[test]
    fn defaults_and_disabled_caches() {
        let mut c = MembershipCache::new(ttl(30));
        assert!(c.is_enabled() && c.is_empty());
        assert_eq!(c.entries_max, MEMBERSHIP_CACHE_ENTRIES_MAX);
        for off in [None, Some(Duration::ZERO)] {
            let mut c = MembershipCache::new(off);
            assert!(!c.is_enabled());
            c.insert("t", "u", "g", true, 0, 0);
            assert_eq!((c.len(), c.get("t", "u", "g", 0)), (0, None));
        }
        let long = "x".repeat(MEMBERSHIP_CACHE_KEY_BYTES_MAX);
        c.insert("t", &long, "g", true, 0, 0);
        assert!(c.is_empty(), "over-long keys are not cached");
    }

    #[test]
    fn the_cache_matches_a_simple_model() {
        // Model: a list of (tenant, user, group, member, expires) in insertion order.
        type Row = (u64, u64, u64, bool, i64);
        for seed in 1..40 {
            let mut rng = Rng::new(seed);
            let cap = 1 + rng.below(6) as usize;
            let mut cache = MembershipCache::with_entries_max(ttl(10), cap);
            let mut model: Vec<Row> = Vec::new();
            let mut now = 0i64;
            for step in 0..400 {
                now += rng.below(2 * SEC as u64) as i64;
                let (t, u, g) = (rng.below(2), rng.below(3), rng.below(3));
                let (ts, us, gs) = (t.to_string(), u.to_string(), g.to_string());
                match rng.below(5) {
                    0 | 1 => {
                        let member = rng.below(2) == 1;
                        cache.insert(&ts, &us, &gs, member, now, cache.generation());
                        model.retain(|r| (r.0, r.1, r.2) != (t, u, g));
                        model.retain(|r| r.4 > now);
                        if model.len() == cap {
                            model.remove(0);
                        }
                        model.push((t, u, g, member, now + 10 * SEC));
                    }
                    2 => {
                        cache.invalidate(&ts, &us, &gs);
                        model.retain(|r| (r.0, r.1, r.2) != (t, u, g));
                    }
                    3 => {
                        cache.invalidate_group(&ts, &gs);
                        model.retain(|r| (r.0, r.2) != (t, g));
                    }
                    _ => {
                        let want = model
                            .iter()
                            .find(|r| (r.0, r.1, r.2) == (t, u, g) && r.4 > now)
                            .map(|r| r.3);
                        assert_eq!(
                            cache.get(&ts, &us, &gs, now),
                            want,
                            "seed {seed} step {step}"
                        );
                        model.retain(|r| (r.0, r.1, r.2) != (t, u, g) || r.4 > now);
                    }
                }
                assert!(cache.len() <= cap, "seed {seed} step {step}");
                assert_eq!(cache.len(), model.len(), "seed {seed} step {step}");
            }
        }
    }

    // --- parsing answers ----------------------------------------------------------------

    #[test]
    fn answers_parse_and_missing_fields_mean_no() {
        assert_eq!(parse_is_member(br#"{"member": true}"#), Ok(true));
        assert_eq!(parse_is_member(br#"{"member": false}"#), Ok(false));
        assert_eq!(parse_is_member(b"{}"), Ok(false));
        assert_eq!(parse_is_member(br#"{"member": null, "x": 1}"#), Ok(false));
        assert_eq!(
            parse_members(br#"{"members": ["u1", "u2"]}"#),
            Ok(vec!["u1".into(), "u2".into()])
        );
        assert_eq!(parse_members(br#"{"members": []}"#), Ok(vec![]));
        assert_eq!(parse_members(b"{}"), Ok(vec![]));
        for bad in [
            &b"true"[..],
            b"[true]",
            b"not json",
            br#"{"member": "yes"}"#,
            b"",
        ] {
            assert!(
                matches!(parse_is_member(bad), Err(MembershipError::Malformed(_))),
                "{bad:?}"
            );
        }
        for bad in [&br#"{"members": [1]}"#[..], br#"{"members": "u1"}"#, b"[]"] {
            assert!(
                matches!(parse_members(bad), Err(MembershipError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn member_lists_are_bounded_while_read() {
        let list = |n: usize| format!("{{\"members\": [{}]}}", vec!["\"a\""; n].join(","));
        assert_eq!(
            parse_members(list(MEMBERS_COUNT_MAX).as_bytes())
                .unwrap()
                .len(),
            MEMBERS_COUNT_MAX
        );
        let err = parse_members(list(MEMBERS_COUNT_MAX + 1).as_bytes()).unwrap_err();
        assert!(err.to_string().contains("more than"), "{err}");
    }

    // --- construction -------------------------------------------------------------------

    #[test]
    fn construction_trims_slashes_applies_defaults_and_checks_the_url() {
        let c = MembershipClient::new("http://svc:81/api///", "", Duration::ZERO, None).unwrap();
        assert_eq!(c.base_url(), Some("http://svc:81/api"));
        assert_eq!(c.timeout(), secs(3));
        assert!(c.auth_header.is_none());
        let c = MembershipClient::new("http://svc/", "", secs(1), None).unwrap();
        assert_eq!(c.base_url(), Some("http://svc"));
        let c = MembershipClient::new("", "x", secs(1), None).unwrap();
        assert_eq!(c.base_url(), None);
        let c = MembershipClient::new("https://svc/", "", secs(1), None).unwrap();
        assert_eq!(c.base_url(), Some("https://svc"));
        for bad in [
            "ftp://svc",
            "svc:80",
            "http://svc/?a=1",
            "http://a b/",
            "http:///",
        ] {
            assert!(
                matches!(
                    MembershipClient::new(bad, "", secs(1), None),
                    Err(MembershipError::Config(_))
                ),
                "{bad}"
            );
        }
        let chat = ChatConfig {
            membership_url: "http://m/".into(),
            membership_auth_header: "Bearer x".into(),
            ..ChatConfig::default()
        };
        let c = MembershipClient::from_config(&chat, &IdentityConfig::default()).unwrap();
        assert_eq!(
            (c.base_url(), c.auth_header.as_deref()),
            (Some("http://m"), Some("Bearer x"))
        );
        assert!(c.cache.borrow().is_enabled());
    }

    #[test]
    fn without_a_service_groups_have_no_members() {
        let (member, members) = with_client(String::new(), secs(1), ttl(30), |c| {
            Box::pin(async move {
                (
                    c.is_member("t", "u", "g", 0).await,
                    c.members("t", "g").await,
                )
            })
        });
        assert_eq!(member, Ok(false));
        assert_eq!(members, Ok(vec![]));
    }

    // --- against a server ---------------------------------------------------------------

    #[test]
    fn is_member_sends_the_query_and_headers() {
        let server = test_server::serve(|_| test_server::json(r#"{"member": true}"#));
        let base = format!("{}/api//", server.url());
        let got = with_client(base, secs(5), None, |c| {
            Box::pin(async move { c.is_member("t 1", "u/1", "g&1", 0).await })
        });
        assert_eq!(got, Ok(true));
        let req = &server.received()[0];
        assert_eq!(
            req.request_line(),
            "GET /api/is-member?tenant=t%201&user=u%2F1&group=g%261 HTTP/1.1"
        );
        assert_eq!(
            req.header("authorization").as_deref(),
            Some("Bearer s3cret")
        );
        assert_eq!(req.header("accept").as_deref(), Some("application/json"));
    }

    #[test]
    fn is_member_false_and_missing_field_are_no() {
        let server = test_server::serve(|r| {
            if r.request_line().contains("user=a&") {
                test_server::json(r#"{"member": false}"#)
            } else {
                test_server::json("{}")
            }
        });
        let got = with_client(server.url(), secs(5), None, |c| {
            Box::pin(async move {
                (
                    c.is_member("", "a", "g", 0).await,
                    c.is_member("", "b", "g", 0).await,
                )
            })
        });
        assert_eq!(got, (Ok(false), Ok(false)));
        assert!(server.received()[0]
            .request_line()
            .contains("?tenant=&user=a&group=g "));
    }

    #[test]
    fn members_returns_the_list() {
        let server = test_server::serve(|r| {
            if r.request_line().contains("group=empty") {
                test_server::json(r#"{"members": []}"#)
            } else {
                test_server::json(r#"{"members": ["u1", "u2"]}"#)
            }
        });
        let got = with_client(server.url(), secs(5), None, |c| {
            Box::pin(async move { (c.members("t", "g1").await, c.members("t", "empty").await) })
        });
        assert_eq!(
            got,
            (Ok(vec!["u1".to_string(), "u2".to_string()]), Ok(vec![]))
        );
        let req = &server.received()[0];
        assert_eq!(
            req.request_line(),
            "GET /members?tenant=t&group=g1 HTTP/1.1"
        );
        assert_eq!(
            req.header("authorization").as_deref(),
            Some("Bearer s3cret")
        );
    }

    #[test]
    fn non_ok_statuses_are_errors_naming_the_status() {
        let server = test_server::serve(|r| {
            let code: u16 = r.request_line().split("group=").nth(1).unwrap()[..3]
                .parse()
                .unwrap();
            test_server::status(code, "nope")
        });
        let codes = [400u16, 401, 403, 404, 500, 503];
        let got = with_client(server.url(), secs(5), ttl(30), move |c| {
            Box::pin(async move {
                let mut out = Vec::new();
                for code in codes {
                    out.push(c.is_member("t", "u", &code.to_string(), 0).await);
                    out.push(c.members("t", &code.to_string()).await.map(|_| true));
                }
                (out, c.cached_answers())
            })
        });
        let (results, cached) = got;
        for (i, result) in results.iter().enumerate() {
            let code = codes[i / 2];
            match result {
                Err(
                    e @ MembershipError::Http(HttpError::Status {
                        code: c,
                        body_preview,
                    }),
                ) => {
                    assert_eq!((*c, body_preview.as_str()), (code, "nope"));
                    assert!(e.to_string().contains(&code.to_string()), "{e}");
                }
                other => panic!("{code}: {other:?}"),
            }
        }
        assert_eq!(cached, 0, "errors are never cached");
    }

    #[test]
    fn errors_are_not_cached_and_answers_are() {
        let server = test_server::serve(|r| {
            if r.connection == 0 && r.request_line().contains("user=u&") {
                Reply::RawThenClose(b"HTTP/1.1 500 X\r\nContent-Length: 0\r\n\r\n".to_vec())
            } else {
                test_server::json(r#"{"member": true}"#)
            }
        });
        let got = with_client(server.url(), secs(5), ttl(30), |c| {
            Box::pin(async move {
                let first = c.is_member("t", "u", "g", 0).await;
                let second = c.is_member("t", "u", "g", SEC).await;
                let third = c.is_member("t", "u", "g", 2 * SEC).await;
                c.invalidate_group("t", "g");
                let fourth = c.is_member("t", "u", "g", 3 * SEC).await;
                let expired = c.is_member("t", "u", "g", 40 * SEC).await;
                vec![
                    first.is_err(),
                    second == Ok(true),
                    third == Ok(true),
                    fourth == Ok(true),
                    expired == Ok(true),
                ]
            })
        });
        assert_eq!(got, vec![true; 5]);
        assert_eq!(
            server.received().len(),
            4,
            "the error, the first answer, after invalidation, after expiry"
        );
    }

    #[test]
    fn malformed_json_is_an_error() {
        let server = test_server::serve(|_| test_server::json("{not json"));
        let got = with_client(server.url(), secs(5), ttl(30), |c| {
            Box::pin(async move {
                (
                    c.is_member("t", "u", "g", 0).await,
                    c.members("t", "g").await,
                )
            })
        });
        assert!(
            matches!(got.0, Err(MembershipError::Malformed(_))),
            "{:?}",
            got.0
        );
        assert!(
            matches!(got.1, Err(MembershipError::Malformed(_))),
            "{:?}",
            got.1
        );
    }

    #[test]
    fn an_unreachable_endpoint_is_an_error() {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let got = with_client(format!("http://{addr}"), secs(5), None, |c| {
            Box::pin(async move {
                (
                    c.is_member("t", "u", "g", 0).await,
                    c.members("t", "g").await,
                )
            })
        });
        assert!(
            matches!(got.0, Err(MembershipError::Http(HttpError::Connect(_)))),
            "{:?}",
            got.0
        );
        assert!(
            matches!(got.1, Err(MembershipError::Http(HttpError::Connect(_)))),
            "{:?}",
            got.1
        );
    }

    #[test]
    fn the_timeout_is_enforced() {
        let server = test_server::serve(|_| Reply::Silent);
        let started = Instant::now();
        let got = with_client(server.url(), Duration::from_millis(50), None, |c| {
            Box::pin(async move { c.is_member("t", "u", "g", 0).await })
        });
        assert_eq!(got, Err(MembershipError::Http(HttpError::Timeout)));
        assert!(started.elapsed() < secs(2), "{:?}", started.elapsed());
    }

    #[test]
    fn oversized_answers_are_rejected_at_the_cap() {
        const BODY_BYTES: usize = 20 * 1000 * 1000;
        let server = test_server::serve(|r| {
            let mut raw = Vec::with_capacity(BODY_BYTES + 100);
            if r.request_line().contains("group=chunked") {
                // One chunk of 1 MB after another: the cap must stop the read midway.
                raw.extend_from_slice(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
                for _ in 0..20 {
                    raw.extend_from_slice(format!("{:x}\r\n", 1_000_000).as_bytes());
                    raw.resize(raw.len() + 1_000_000, b' ');
                    raw.extend_from_slice(b"\r\n");
                }
                raw.extend_from_slice(b"0\r\n\r\n");
            } else {
                raw.extend_from_slice(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY_BYTES}\r\n\r\n").as_bytes(),
                );
                raw.resize(raw.len() + BODY_BYTES, b' ');
            }
            Reply::Raw(raw)
        });
        let got = with_client(server.url(), secs(20), None, |c| {
            Box::pin(async move {
                (
                    c.members("t", "length").await,
                    c.members("t", "chunked").await,
                )
            })
        });
        let too_large = Err(MembershipError::Http(HttpError::TooLarge {
            bytes_max: MEMBERSHIP_RESPONSE_BYTES_MAX,
        }));
        assert_eq!(got.0, too_large);
        assert_eq!(got.1, too_large);
    }

    #[test]
    fn connections_are_reused() {
        let server = test_server::serve(|_| test_server::json(r#"{"member": true}"#));
        let got = with_client(server.url(), secs(5), None, |c| {
            Box::pin(async move {
                let mut all = true;
                for i in 0..20 {
                    all &= c.is_member("t", &format!("u{i}"), "g", 0).await == Ok(true);
                }
                all
            })
        });
        assert!(got);
        assert_eq!(server.received().len(), 20);
        assert!(
            server.connections() <= 3,
            "{} connections",
            server.connections()
        );
    }

    #[test]
    fn concurrent_requests_never_cross() {
        // Members are the users with an even number; the answer also echoes nothing else,
        // so a crossed answer would give some user the wrong verdict.
        let server = test_server::serve(|r| {
            let user = r.request_line().split("user=u").nth(1).unwrap();
            let n: u32 = user.split('&').next().unwrap().parse().unwrap();
            std::thread::sleep(Duration::from_millis(u64::from(n % 3)));
            test_server::json(&format!("{{\"member\": {}}}", n.is_multiple_of(2)))
        });
        let got = with_client(server.url(), secs(5), None, |c| {
            Box::pin(async move {
                let calls = (0..10u32)
                    .map(|n| async move { (n, c.is_member("t", &format!("u{n}"), "g", 0).await) });
                futures_util::future::join_all(calls).await
            })
        });
        assert_eq!(got.len(), 10);
        for (n, answer) in got {
            assert_eq!(answer, Ok(n.is_multiple_of(2)), "u{n}");
        }
    }

    #[test]
    fn chunked_answers_are_parsed() {
        let server = test_server::serve(|_| {
            Reply::Raw(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"mem\r\n9\r\nbers\": [\"\r\n6\r\nu1\"]}\n\r\n0\r\n\r\n"
                    .to_vec(),
            )
        });
        let got = with_client(server.url(), secs(5), None, |c| {
            Box::pin(async move { c.members("t", "g").await })
        });
        assert_eq!(got, Ok(vec!["u1".to_string()]));
    }
}
