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
mod tests;
