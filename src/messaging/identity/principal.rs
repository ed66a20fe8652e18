//! Who is on the other end of a gateway connection: the result of verifying a
//! token (spec/messaging-edge.md §3.2), or the anonymous holder of the shared
//! API key (§3.7).
//!
//! A principal is plain data, decided once at connect time; the ACL reads it on
//! every request and expiry is re-evaluated against the caller's clock each time
//! (`is_expired(now_s)`), so nothing here caches a verdict.

use std::fmt;

/// Longest user, device or tenant id, in bytes (§19 #11).
pub const ID_BYTES_MAX: usize = 128;

/// Whether `s` is a usable user, device or tenant id: 1..=[`ID_BYTES_MAX`]
/// bytes of `[A-Za-z0-9_@+-]` (§19 #11).
///
/// Ids become topic segments (`chat.inbox.<user>`) and ACL placeholder values,
/// so `.`, `*`, `#` would let an id widen or shift a pattern (§18 G30), `:` is
/// the direct-conversation separator, and `/` is the log separator of
/// [`Principal`]'s `Display`. Refusing them at the door is simpler and safer
/// than escaping them everywhere downstream.
pub fn valid_id(s: &str) -> bool {
    (1..=ID_BYTES_MAX).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'@' | b'+' | b'-'))
}

/// One permission a token can carry (§3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Append to conversations and publish.
    Publish,
    /// Read: subscribe, history, commit cursors.
    Subscribe,
    /// Publish one's own presence and typing signals.
    Presence,
    /// Topic and cluster management; never implied by the defaults.
    Admin,
}

impl Scope {
    /// Every scope, in bit order.
    pub const EVERY: [Scope; 4] = [
        Scope::Publish,
        Scope::Subscribe,
        Scope::Presence,
        Scope::Admin,
    ];

    /// The name used in the token's `scp` claim and in ACL config.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Publish => "publish",
            Scope::Subscribe => "subscribe",
            Scope::Presence => "presence",
            Scope::Admin => "admin",
        }
    }

    /// The scope with this exact (lowercase) name.
    pub fn from_name(name: &str) -> Option<Scope> {
        Scope::EVERY.into_iter().find(|s| s.name() == name)
    }

    const fn bit(self) -> u8 {
        match self {
            Scope::Publish => 1,
            Scope::Subscribe => 2,
            Scope::Presence => 4,
            Scope::Admin => 8,
        }
    }
}

/// A set of [`Scope`]s as a bitset: checked on every ACL rule, so it is a
/// `Copy` byte rather than a list of strings.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Scopes(u8);

impl Scopes {
    pub const NONE: Scopes = Scopes(0);
    /// What the shared API key holds (§3.7).
    pub const ALL: Scopes = Scopes(0b1111);
    /// What a token without (or with an empty) `scp` gets: publish,
    /// subscribe, presence — never admin (§3.2).
    pub const DEFAULT: Scopes = Scopes(0b0111);

    /// The set holding exactly `scope`.
    pub const fn of(scope: Scope) -> Scopes {
        Scopes(scope.bit())
    }

    /// This set plus `scope`.
    pub const fn with(self, scope: Scope) -> Scopes {
        Scopes(self.0 | scope.bit())
    }

    pub const fn contains(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    /// Whether the two sets share at least one scope.
    pub const fn intersects(self, other: Scopes) -> bool {
        self.0 & other.0 != 0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The scopes in the set, in [`Scope::EVERY`] order.
    pub fn iter(self) -> impl Iterator<Item = Scope> {
        Scope::EVERY.into_iter().filter(move |s| self.contains(*s))
    }
}

impl FromIterator<Scope> for Scopes {
    fn from_iter<I: IntoIterator<Item = Scope>>(iter: I) -> Self {
        iter.into_iter().fold(Scopes::NONE, Scopes::with)
    }
}

impl fmt::Debug for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scopes(")?;
        for (i, s) in self.iter().enumerate() {
            if i > 0 {
                f.write_str("|")?;
            }
            f.write_str(s.name())?;
        }
        f.write_str(")")
    }
}

/// An authenticated party: a token's claims, or the shared-key holder.
///
/// `Debug` is written by hand so that neither `Debug` nor `Display` prints the
/// token id (`jti`): it is the revocation key, and logs are read by more
/// people than the revocation list.
#[derive(Clone, PartialEq, Eq)]
pub struct Principal {
    /// Token `sub`; empty only for the anonymous principal.
    pub user_id: String,
    /// Token `did`; may be empty (then `hello.device_id` names the device).
    pub device_id: String,
    /// Token `tid`; may be empty.
    pub tenant: String,
    pub scopes: Scopes,
    /// Token `exp` in Unix seconds; `None` never expires (the shared key).
    pub expires_at_s: Option<i64>,
    /// Token `jti`; empty when the token had none.
    pub token_id: String,
    /// The shared API key holder (§3.7): no user, every scope, no expiry.
    pub anonymous: bool,
}

impl Principal {
    /// The principal of the shared API key: no user id, every scope, never
    /// expires (§3.7).
    pub fn anonymous() -> Principal {
        Principal {
            user_id: String::new(),
            device_id: String::new(),
            tenant: String::new(),
            scopes: Scopes::ALL,
            expires_at_s: None,
            token_id: String::new(),
            anonymous: true,
        }
    }

    /// Whether `now_s` is past `exp`, with no leeway (§4.2 step 2; the
    /// leeway is the verifier's business, at connect time). Recomputed on
    /// every call: the principal outlives many clock ticks.
    pub fn is_expired(&self, now_s: i64) -> bool {
        match self.expires_at_s {
            Some(exp) => now_s > exp,
            None => false,
        }
    }

    /// Whether the principal holds at least one scope of `wanted`. An empty
    /// `wanted` yields false: "no requirement" is the caller's case to handle,
    /// not something to grant by accident.
    pub fn has_any_scope(&self, wanted: Scopes) -> bool {
        self.scopes.intersects(wanted)
    }
}

/// The log form: `user/device` (`user/` without a device), or `shared-key`.
impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.anonymous {
            f.write_str("shared-key")
        } else {
            write!(f, "{}/{}", self.user_id, self.device_id)
        }
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Principal")
            .field("user_id", &self.user_id)
            .field("device_id", &self.device_id)
            .field("tenant", &self.tenant)
            .field("scopes", &self.scopes)
            .field("expires_at_s", &self.expires_at_s)
            .field("has_token_id", &!self.token_id.is_empty())
            .field("anonymous", &self.anonymous)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;

    fn alice(expires_at_s: Option<i64>) -> Principal {
        Principal {
            user_id: "alice".into(),
            device_id: "phone".into(),
            tenant: "t1".into(),
            scopes: Scopes::DEFAULT,
            expires_at_s,
            token_id: "jti-secret-123".into(),
            anonymous: false,
        }
    }

    #[test]
    fn valid_id_accepts_the_allowed_alphabet_up_to_the_limit() {
        assert!(valid_id("a"));
        assert!(valid_id("user-8891"));
        assert!(valid_id("Alice_B+c@example-1"));
        assert!(valid_id(&"x".repeat(ID_BYTES_MAX)));
    }

    #[test]
    fn valid_id_refuses_empty_long_and_separator_characters() {
        assert!(!valid_id(""));
        assert!(!valid_id(&"x".repeat(ID_BYTES_MAX + 1)));
        for bad in [
            "a.b", "a:b", "#", "*", "a/b", "a b", "a\n", "é", "a\0", "${user}", "a%2E",
        ] {
            assert!(!valid_id(bad), "{bad:?} must be refused");
        }
    }

    #[test]
    fn valid_id_matches_a_byte_by_byte_model() {
        let mut rng = Rng::new(0x1d5);
        let alphabet = b"aZ09_@+-.:#*/ %\xff";
        for _ in 0..5000 {
            let len = rng.below(6) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                .collect();
            let Ok(s) = std::str::from_utf8(&bytes) else {
                continue;
            };
            let model = !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_@+-".contains(c));
            assert_eq!(valid_id(s), model, "{s:?}");
        }
    }

    #[test]
    fn scopes_set_operations() {
        let s = Scopes::of(Scope::Publish).with(Scope::Presence);
        assert!(s.contains(Scope::Publish) && s.contains(Scope::Presence));
        assert!(!s.contains(Scope::Subscribe) && !s.contains(Scope::Admin));
        assert!(s.intersects(Scopes::of(Scope::Presence)));
        assert!(!s.intersects(Scopes::of(Scope::Admin)));
        assert!(!s.intersects(Scopes::NONE));
        assert!(Scopes::NONE.is_empty() && !s.is_empty());
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            vec![Scope::Publish, Scope::Presence]
        );
        assert_eq!(Scope::EVERY.into_iter().collect::<Scopes>(), Scopes::ALL);
        assert_eq!(format!("{s:?}"), "Scopes(publish|presence)");
    }

    #[test]
    fn default_scopes_exclude_admin_and_all_includes_it() {
        assert!(!Scopes::DEFAULT.contains(Scope::Admin));
        for s in [Scope::Publish, Scope::Subscribe, Scope::Presence] {
            assert!(Scopes::DEFAULT.contains(s));
        }
        assert!(Scope::EVERY.iter().all(|s| Scopes::ALL.contains(*s)));
    }

    #[test]
    fn scope_names_round_trip_and_are_exact() {
        for s in Scope::EVERY {
            assert_eq!(Scope::from_name(s.name()), Some(s));
        }
        assert_eq!(Scope::from_name("Admin"), None);
        assert_eq!(Scope::from_name("publish "), None);
        assert_eq!(Scope::from_name(""), None);
    }

    #[test]
    fn expiry_is_evaluated_per_call_without_leeway() {
        let p = alice(Some(1000));
        assert!(!p.is_expired(999));
        assert!(!p.is_expired(1000));
        assert!(p.is_expired(1001));
        // The same principal, asked again later, answers differently.
        assert!(!p.is_expired(0));
    }

    #[test]
    fn principal_without_expiry_never_expires() {
        assert!(!alice(None).is_expired(i64::MAX));
        assert!(!Principal::anonymous().is_expired(i64::MAX));
    }

    #[test]
    fn anonymous_holds_every_scope_and_no_user() {
        let a = Principal::anonymous();
        assert!(a.anonymous);
        assert!(a.user_id.is_empty());
        assert_eq!(a.scopes, Scopes::ALL);
        for s in Scope::EVERY {
            assert!(a.has_any_scope(Scopes::of(s)));
        }
    }

    #[test]
    fn has_any_scope_is_any_of_and_false_for_nothing() {
        let mut p = alice(None);
        p.scopes = Scopes::of(Scope::Subscribe);
        assert!(p.has_any_scope(Scopes::of(Scope::Publish).with(Scope::Subscribe)));
        assert!(!p.has_any_scope(Scopes::of(Scope::Publish).with(Scope::Admin)));
        assert!(!p.has_any_scope(Scopes::NONE));
    }

    #[test]
    fn display_is_user_slash_device_or_shared_key() {
        assert_eq!(alice(None).to_string(), "alice/phone");
        let mut p = alice(None);
        p.device_id.clear();
        assert_eq!(p.to_string(), "alice/");
        assert_eq!(Principal::anonymous().to_string(), "shared-key");
    }

    #[test]
    fn display_and_debug_omit_the_token_id() {
        let p = alice(Some(5));
        assert!(!p.to_string().contains("jti-secret-123"));
        let dbg = format!("{p:?}");
        assert!(!dbg.contains("jti-secret-123"), "{dbg}");
        assert!(dbg.contains("has_token_id: true"), "{dbg}");
    }
}
