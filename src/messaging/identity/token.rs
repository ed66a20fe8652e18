//! Gateway tokens: HS256 compact JWS verified into a [`Principal`]
//! (spec/messaging-edge.md §3).
//!
//! The operator's auth service mints tokens with a shared secret; the gateway
//! only verifies. [`Verifier::verify`] runs the checks of §3.3 in exactly that
//! order, because the order decides which rejection a bad token gets. Our
//! build tightens v1 in three places, each the safer side of a choice:
//! - `exp` is **required** ([`TokenError::NoExpiry`]): v1 let a token without
//!   `exp` live forever, which no revocation list can make safe (§3.6).
//! - `sub`, and `did`/`tid` when non-empty, must pass [`valid_id`]
//!   ([`TokenError::BadId`]): ids are spliced into ACL patterns and topic
//!   names (§19 #11, §18 G30).
//! - The token is bounded ([`TOKEN_BYTES_MAX`]) before anything is decoded.
//!
//! Sans-IO: the clock is an argument, keys and the revocation list are plain
//! data. Revocation is per verifier (per node in v1; no route, no
//! replication — §3.3): short token lifetimes remain the real control.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::hmac;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::principal::{valid_id, Principal, Scope, Scopes};
use crate::config::{EnvLookup, IdentityConfig};

/// Longest token accepted, in bytes, checked before any decoding. Real
/// tokens are a few hundred bytes; this also bounds every claim inside.
pub const TOKEN_BYTES_MAX: usize = 8 * 1024;
/// Shortest HMAC secret, in bytes (§3.3; also checked by config validation).
pub const KEY_BYTES_MIN: usize = 32;
/// Most keys a verifier holds (rotation needs two; this is generous).
pub const KEYS_MAX: usize = 64;
/// Longest key id (`kid`), in bytes.
pub const KEY_ID_BYTES_MAX: usize = 128;
/// Longest token id (`jti`), in bytes. A longer `jti` makes the token
/// malformed: every accepted token must be revocable, and the revocation list
/// must stay bounded in bytes, not only in entries.
pub const TOKEN_ID_BYTES_MAX: usize = 256;
/// Most revoked token ids remembered at once (with [`TOKEN_ID_BYTES_MAX`],
/// at most ~16 MiB of ids).
pub const REVOKED_MAX: usize = 65_536;
/// Largest clock-skew leeway, in seconds. Beyond a day, "leeway" would be a
/// second, unaudited token lifetime.
pub const LEEWAY_S_MAX: i64 = 86_400;

/// Why a token was refused. All of them surface to the client identically
/// (HTTP 401); the variants exist for logs and metrics. Where §3.3 names a
/// rejection class, the variant is that class: a wrong `alg` and a wrong
/// `iss` are [`TokenError::BadSignature`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    /// Longer than [`TOKEN_BYTES_MAX`]; nothing was decoded.
    TooLong,
    /// Not three base64url segments of JSON objects with well-typed claims.
    Malformed,
    /// Wrong algorithm, wrong signature, or wrong issuer.
    BadSignature,
    /// `kid` names no configured key.
    UnknownKey,
    /// `sub` missing or empty.
    NoSubject,
    /// `sub`, `did` or `tid` is not a valid id (§19 #11).
    BadId,
    /// No `exp` claim (our build requires one).
    NoExpiry,
    /// Past `exp` + leeway.
    Expired,
    /// Before `nbf` − leeway.
    NotYetValid,
    /// `jti` is on the revocation list.
    Revoked,
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TokenError::TooLong => "token too long",
            TokenError::Malformed => "malformed token",
            TokenError::BadSignature => "bad token signature",
            TokenError::UnknownKey => "unknown token key id",
            TokenError::NoSubject => "token has no subject",
            TokenError::BadId => "token carries an invalid user, device or tenant id",
            TokenError::NoExpiry => "token has no expiry",
            TokenError::Expired => "token expired",
            TokenError::NotYetValid => "token not yet valid",
            TokenError::Revoked => "token revoked",
        })
    }
}

impl std::error::Error for TokenError {}

/// Why a revocation was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeError {
    /// An empty `jti` means "no token id" and cannot be revoked.
    EmptyId,
    /// Longer than [`TOKEN_ID_BYTES_MAX`]; no accepted token has such an id.
    IdTooLong,
    /// [`REVOKED_MAX`] live entries. Refused rather than evicting one: an
    /// eviction would silently re-admit a revoked token, a refusal is seen.
    Full,
}

impl fmt::Display for RevokeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RevokeError::EmptyId => "token id is empty",
            RevokeError::IdTooLong => "token id too long",
            RevokeError::Full => "revocation list full",
        })
    }
}

impl std::error::Error for RevokeError {}

/// The claims of a gateway token (§3.2), as decoded and as minted.
///
/// Decoding is strict: a non-integer numeric claim, an `scp` that is not an
/// array of strings, or a claim given twice fails and makes the token
/// malformed. Unknown claims (`aud`, custom ones) are ignored. Absent optional
/// claims are omitted when minting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// User id; required (empty = absent).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sub: String,
    /// Device id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub did: Option<String>,
    /// Tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<String>,
    /// Scope names; absent or empty ⇒ [`Scopes::DEFAULT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scp: Option<Vec<String>>,
    /// Expiry, Unix seconds; required by our verifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
    /// Not-before, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    /// Issued-at, Unix seconds; decoded (so it must be an integer), not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<i64>,
    /// Issuer; must equal the configured issuer when one is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// Token id, the revocation key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
}

/// Mints an HS256 token with header `{"alg":"HS256","typ":"JWT"[,"kid":…]}`.
///
/// For tests, tools and the dev-only minting route. It deliberately refuses
/// nothing (short secrets, missing `sub`, no `exp`): tests need to build the
/// tokens the verifier must reject, and the verifier is the only gate.
pub fn mint_hs256(key_id: Option<&str>, secret: &[u8], claims: &Claims) -> String {
    let claims = serde_json::to_vec(claims).expect("claims of strings and integers serialize");
    mint_hs256_raw(key_id, secret, &claims)
}

/// [`mint_hs256`] over claims given as raw bytes, used verbatim: for tools
/// that need claims [`Claims`] does not model, and for fuzzing the claim
/// decoder behind a valid signature.
pub fn mint_hs256_raw(key_id: Option<&str>, secret: &[u8], claims_json: &[u8]) -> String {
    let header = match key_id {
        Some(kid) => serde_json::json!({"alg": "HS256", "typ": "JWT", "kid": kid}),
        None => serde_json::json!({"alg": "HS256", "typ": "JWT"}),
    };
    let mut token = URL_SAFE_NO_PAD.encode(header.to_string());
    token.push('.');
    token.push_str(&URL_SAFE_NO_PAD.encode(claims_json));
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let tag = hmac::sign(&key, token.as_bytes());
    token.push('.');
    token.push_str(&URL_SAFE_NO_PAD.encode(tag.as_ref()));
    token
}

/// Verifies gateway tokens against the configured keys, issuer and leeway,
/// and keeps the revocation list.
#[derive(Debug, Clone)]
pub struct Verifier {
    /// In configured order: the first is the fallback for tokens without `kid`.
    keys: Vec<(String, hmac::Key)>,
    /// Required `iss` when non-empty.
    issuer: String,
    leeway_s: i64,
    revoked: Revocations,
}

impl Verifier {
    /// A verifier over `keys` (`(id, secret)`, in order). Refuses an empty or
    /// oversized key list, empty, oversized or duplicate ids (a duplicate
    /// would make `kid` ambiguous), secrets shorter than [`KEY_BYTES_MIN`],
    /// and a leeway outside `0..=`[`LEEWAY_S_MAX`].
    pub fn new(
        keys: Vec<(String, Vec<u8>)>,
        issuer: &str,
        leeway_s: i64,
    ) -> Result<Verifier, String> {
        if !(0..=LEEWAY_S_MAX).contains(&leeway_s) {
            return Err(format!(
                "token leeway {leeway_s}s is outside 0..={LEEWAY_S_MAX}s"
            ));
        }
        Ok(Verifier {
            keys: checked_keys(keys)?,
            issuer: issuer.to_string(),
            leeway_s,
            revoked: Revocations::default(),
        })
    }

    /// A verifier from `[messaging.identity]`, secrets resolved through
    /// `secret_env` as config validation does. The leeway is truncated to
    /// whole seconds (the stricter rounding). It is built whether or not
    /// `identity.enabled` is set; whether to use it is the caller's call.
    pub fn from_config(cfg: &IdentityConfig, env: EnvLookup) -> Result<Verifier, String> {
        let keys = cfg
            .keys
            .iter()
            .map(|k| (k.id.clone(), k.resolve_secret(env).into_bytes()))
            .collect();
        let leeway_s = i64::try_from(cfg.leeway.as_secs()).unwrap_or(i64::MAX);
        Verifier::new(keys, &cfg.issuer, leeway_s)
    }

    /// Replaces the keys (rotation, §3.4) with the checks of [`Self::new`];
    /// the revocation list is kept. Tokens of a removed key fail at once.
    pub fn set_keys(&mut self, keys: Vec<(String, Vec<u8>)>) -> Result<(), String> {
        self.keys = checked_keys(keys)?;
        Ok(())
    }

    pub fn leeway_s(&self) -> i64 {
        self.leeway_s
    }

    /// When a connection authenticated as `p` must be closed: `exp` +
    /// leeway (§19 #2); `None` for a principal that never expires.
    pub fn deadline_s(&self, p: &Principal) -> Option<i64> {
        p.expires_at_s.map(|exp| exp.saturating_add(self.leeway_s))
    }

    /// Verifies `token` at `now_s` (§3.3, in order). Steps 7 and 9 carry our
    /// additions: ids must be valid (§19 #11), and `exp` must be present —
    /// a token without `exp` is rejected ([`TokenError::NoExpiry`]), where
    /// v1 let it live forever; a connection must have a deadline (§19 #2).
    pub fn verify(&self, token: &str, now_s: i64) -> Result<Principal, TokenError> {
        if token.len() > TOKEN_BYTES_MAX {
            return Err(TokenError::TooLong);
        }
        let (signed, header_b64, claims_b64, sig_b64) = split_segments(token)?; // 1
        let header = decode_header(header_b64)?; // 2
        check_algorithm(&header)?; // 3
        let key = self.select_key(&header)?; // 4
        check_signature(key, signed, sig_b64)?; // 5
        let claims = decode_claims(claims_b64)?; // 6
        check_ids(&claims)?; // 7
        self.check_issuer(&claims)?; // 8
        let exp = self.check_times(&claims, now_s)?; // 9, 10
        self.check_revocation(&claims, now_s)?; // 11
        Ok(principal_of(claims, exp)) // 12
    }

    /// Revokes token id `jti` until `until_s` (exclusive). Entries whose
    /// window has passed are pruned first; a window already over is not
    /// stored; revoking twice keeps the later end.
    pub fn revoke(&mut self, jti: &str, until_s: i64, now_s: i64) -> Result<(), RevokeError> {
        if jti.is_empty() {
            return Err(RevokeError::EmptyId);
        }
        if jti.len() > TOKEN_ID_BYTES_MAX {
            return Err(RevokeError::IdTooLong);
        }
        self.revoked.prune(now_s);
        if until_s <= now_s {
            return Ok(());
        }
        self.revoked.insert(jti, until_s)
    }

    /// Revocation entries held (live or not yet pruned).
    pub fn revoked_len(&self) -> usize {
        self.revoked.until_by_id.len()
    }

    /// Step 4: `kid` present ⇒ it must name a key; absent ⇒ the first key.
    /// A `kid` that is not a non-empty string (`null`, `""`, a number) names
    /// no key: treating it as absent would let a token pick the fallback key
    /// by accident.
    fn select_key(&self, header: &Map<String, Value>) -> Result<&hmac::Key, TokenError> {
        let Some(kid) = header.get("kid") else {
            let (_, key) = self.keys.first().expect("a verifier has at least one key");
            return Ok(key);
        };
        let kid = kid.as_str().ok_or(TokenError::UnknownKey)?;
        self.keys
            .iter()
            .find(|(id, _)| id == kid)
            .map(|(_, key)| key)
            .ok_or(TokenError::UnknownKey)
    }

    /// Step 8.
    fn check_issuer(&self, claims: &Claims) -> Result<(), TokenError> {
        if self.issuer.is_empty() || claims.iss.as_deref() == Some(self.issuer.as_str()) {
            Ok(())
        } else {
            Err(TokenError::BadSignature)
        }
    }

    /// Steps 9 and 10, with leeway; returns `exp`.
    fn check_times(&self, claims: &Claims, now_s: i64) -> Result<i64, TokenError> {
        let exp = claims.exp.ok_or(TokenError::NoExpiry)?;
        if now_s > exp.saturating_add(self.leeway_s) {
            return Err(TokenError::Expired);
        }
        if let Some(nbf) = claims.nbf {
            if now_s < nbf.saturating_sub(self.leeway_s) {
                return Err(TokenError::NotYetValid);
            }
        }
        Ok(exp)
    }

    /// Step 11: an empty `jti` counts as none.
    fn check_revocation(&self, claims: &Claims, now_s: i64) -> Result<(), TokenError> {
        let Some(jti) = claims.jti.as_deref().filter(|j| !j.is_empty()) else {
            return Ok(());
        };
        match self.revoked.until_by_id.get(jti) {
            Some(&until) if until > now_s => Err(TokenError::Revoked),
            _ => Ok(()),
        }
    }
}

/// The revocation list: `jti` → revoked until (Unix seconds, exclusive),
/// plus the same entries ordered by end, so pruning costs only what it
/// removes (pruning by scanning every entry on each revocation would be
/// quadratic up to [`REVOKED_MAX`]).
#[derive(Debug, Clone, Default)]
struct Revocations {
    until_by_id: HashMap<String, i64>,
    by_until: BTreeSet<(i64, String)>,
}

impl Revocations {
    /// Drops every entry whose window is over at `now_s`.
    fn prune(&mut self, now_s: i64) {
        while let Some((until, _)) = self.by_until.first() {
            if *until > now_s {
                break;
            }
            let (_, jti) = self.by_until.pop_first().expect("first exists");
            self.until_by_id.remove(&jti);
        }
        debug_assert_eq!(self.until_by_id.len(), self.by_until.len());
    }

    /// Records `jti` until `until_s`, keeping the later end of two.
    fn insert(&mut self, jti: &str, until_s: i64) -> Result<(), RevokeError> {
        let held = self.until_by_id.len();
        match self.until_by_id.get_mut(jti) {
            Some(until) if *until >= until_s => return Ok(()),
            Some(until) => {
                self.by_until.remove(&(*until, jti.to_string()));
                *until = until_s;
            }
            None if held >= REVOKED_MAX => return Err(RevokeError::Full),
            None => {
                self.until_by_id.insert(jti.to_string(), until_s);
            }
        }
        self.by_until.insert((until_s, jti.to_string()));
        debug_assert_eq!(self.until_by_id.len(), self.by_until.len());
        Ok(())
    }
}

/// The checks [`Verifier::new`] and [`Verifier::set_keys`] share. Errors name
/// the key id, never the secret.
fn checked_keys(keys: Vec<(String, Vec<u8>)>) -> Result<Vec<(String, hmac::Key)>, String> {
    if keys.is_empty() {
        return Err("at least one token key is required".into());
    }
    if keys.len() > KEYS_MAX {
        return Err(format!("{} token keys; at most {KEYS_MAX}", keys.len()));
    }
    let mut out: Vec<(String, hmac::Key)> = Vec::with_capacity(keys.len());
    for (id, secret) in keys {
        if id.is_empty() || id.len() > KEY_ID_BYTES_MAX {
            return Err(format!(
                "token key id {id:?} must be 1..={KEY_ID_BYTES_MAX} bytes"
            ));
        }
        if out.iter().any(|(seen, _)| *seen == id) {
            return Err(format!("token key id {id:?} is listed twice"));
        }
        if secret.len() < KEY_BYTES_MIN {
            return Err(format!(
                "token key {id:?} has a {}-byte secret; at least {KEY_BYTES_MIN} are required",
                secret.len()
            ));
        }
        let key = hmac::Key::new(hmac::HMAC_SHA256, &secret);
        out.push((id, key));
    }
    Ok(out)
}

/// Step 1: exactly three `.`-separated segments. Returns the signing input
/// (`header.claims` exactly as received) and the three segments.
fn split_segments(token: &str) -> Result<(&str, &str, &str, &str), TokenError> {
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let signed = &token[..header.len() + 1 + claims.len()];
    Ok((signed, header, claims, sig))
}

/// Unpadded base64url with zero trailing bits only, so every byte string has
/// one encoding and a token cannot be altered without changing what it says.
fn decode_segment(segment: &str) -> Result<Vec<u8>, TokenError> {
    URL_SAFE_NO_PAD
        .decode(segment)
        .map_err(|_| TokenError::Malformed)
}

/// Step 2: the header is a JSON object.
fn decode_header(segment: &str) -> Result<Map<String, Value>, TokenError> {
    serde_json::from_slice(&decode_segment(segment)?).map_err(|_| TokenError::Malformed)
}

/// Step 3: the header never chooses the algorithm; only `HS256` is spoken.
fn check_algorithm(header: &Map<String, Value>) -> Result<(), TokenError> {
    match header.get("alg").and_then(Value::as_str) {
        Some("HS256") => Ok(()),
        _ => Err(TokenError::BadSignature),
    }
}

/// Step 5: constant-time HMAC-SHA256 comparison (ring).
fn check_signature(key: &hmac::Key, signed: &str, segment: &str) -> Result<(), TokenError> {
    let tag = decode_segment(segment)?;
    hmac::verify(key, signed.as_bytes(), &tag).map_err(|_| TokenError::BadSignature)
}

/// Step 6: a JSON object of strictly typed claims (see [`Claims`]); an
/// over-long `jti` is malformed too. The object check comes first because
/// serde would also fill a struct from a JSON array, positionally.
fn decode_claims(segment: &str) -> Result<Claims, TokenError> {
    let bytes = decode_segment(segment)?;
    let first = bytes
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        return Err(TokenError::Malformed);
    }
    let claims: Claims = serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)?;
    if claims
        .jti
        .as_ref()
        .is_some_and(|j| j.len() > TOKEN_ID_BYTES_MAX)
    {
        return Err(TokenError::Malformed);
    }
    Ok(claims)
}

/// Step 7: `sub` present, and every id usable as a topic segment.
fn check_ids(claims: &Claims) -> Result<(), TokenError> {
    if claims.sub.is_empty() {
        return Err(TokenError::NoSubject);
    }
    let optional_ok = |v: &Option<String>| v.as_deref().is_none_or(|s| s.is_empty() || valid_id(s));
    if valid_id(&claims.sub) && optional_ok(&claims.did) && optional_ok(&claims.tid) {
        Ok(())
    } else {
        Err(TokenError::BadId)
    }
}

/// Step 12: absent or empty `scp` ⇒ the defaults. Unknown scope names grant
/// nothing; a list of only unknown names yields no scopes (not the defaults):
/// the issuer meant to restrict the token, so it stays restricted.
fn scopes_of(scp: Option<&[String]>) -> Scopes {
    match scp {
        None | Some([]) => Scopes::DEFAULT,
        Some(names) => names.iter().filter_map(|n| Scope::from_name(n)).collect(),
    }
}

fn principal_of(claims: Claims, exp: i64) -> Principal {
    Principal {
        scopes: scopes_of(claims.scp.as_deref()),
        user_id: claims.sub,
        device_id: claims.did.unwrap_or_default(),
        tenant: claims.tid.unwrap_or_default(),
        expires_at_s: Some(exp),
        token_id: claims.jti.unwrap_or_default(),
        anonymous: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IdentityKeyConfig;
    use boltq_io::testutil::Rng;
    use std::time::Duration;

    const NOW: i64 = 1_700_000_000;
    const K1: &[u8] = b"k1-0123456789abcdef0123456789abcdef";
    const K2: &[u8] = b"k2-0123456789abcdef0123456789abcdef";

    fn verifier() -> Verifier {
        Verifier::new(
            vec![("k1".into(), K1.to_vec()), ("k2".into(), K2.to_vec())],
            "",
            60,
        )
        .unwrap()
    }

    fn claims() -> Claims {
        Claims {
            sub: "alice".into(),
            did: Some("phone".into()),
            tid: Some("acme".into()),
            exp: Some(NOW + 3600),
            iat: Some(NOW),
            jti: Some("t-1".into()),
            ..Claims::default()
        }
    }

    fn mint(c: &Claims) -> String {
        mint_hs256(Some("k1"), K1, c)
    }

    /// Signs arbitrary header and claims bytes, for shapes `mint_hs256`
    /// cannot produce.
    fn sign_raw(header: &[u8], claims: &[u8], secret: &[u8]) -> String {
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header),
            URL_SAFE_NO_PAD.encode(claims)
        );
        let tag = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, secret),
            signed.as_bytes(),
        );
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    fn signed_claims_json(claims: &str) -> String {
        mint_hs256_raw(Some("k1"), K1, claims.as_bytes())
    }

    #[test]
    fn sign_verify_round_trip_carries_every_claim() {
        let mut c = claims();
        c.scp = Some(vec!["subscribe".into(), "admin".into()]);
        let p = verifier().verify(&mint(&c), NOW).unwrap();
        assert_eq!(p.user_id, "alice");
        assert_eq!(p.device_id, "phone");
        assert_eq!(p.tenant, "acme");
        assert_eq!(p.expires_at_s, Some(NOW + 3600));
        assert_eq!(p.token_id, "t-1");
        assert!(!p.anonymous);
        assert_eq!(
            p.scopes,
            Scopes::of(Scope::Subscribe).with(Scope::Admin),
            "explicit scopes replace the defaults"
        );
    }

    #[test]
    fn default_scopes_when_scp_absent_or_empty_exclude_admin() {
        for scp in [None, Some(vec![])] {
            let mut c = claims();
            c.scp = scp;
            let p = verifier().verify(&mint(&c), NOW).unwrap();
            assert_eq!(p.scopes, Scopes::DEFAULT);
            assert!(!p.scopes.contains(Scope::Admin));
        }
    }

    #[test]
    fn unknown_scope_names_grant_nothing() {
        let mut c = claims();
        c.scp = Some(vec!["root".into(), "publish".into()]);
        assert_eq!(
            verifier().verify(&mint(&c), NOW).unwrap().scopes,
            Scopes::of(Scope::Publish)
        );
        c.scp = Some(vec!["root".into()]);
        assert_eq!(
            verifier().verify(&mint(&c), NOW).unwrap().scopes,
            Scopes::NONE
        );
    }

    #[test]
    fn optional_claims_absent_give_empty_fields() {
        let c = Claims {
            sub: "bob".into(),
            exp: Some(NOW + 10),
            ..Claims::default()
        };
        let p = verifier().verify(&mint(&c), NOW).unwrap();
        assert_eq!((p.device_id.as_str(), p.tenant.as_str()), ("", ""));
        assert_eq!(p.token_id, "");
    }

    #[test]
    fn alg_none_and_other_algorithms_are_rejected() {
        let body = serde_json::to_vec(&claims()).unwrap();
        let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
        // alg none with an empty signature.
        let none = format!("{}.{}.", b64(br#"{"alg":"none","kid":"k1"}"#), b64(&body));
        assert_eq!(verifier().verify(&none, NOW), Err(TokenError::BadSignature));
        // Correctly HMAC-signed, but the header names another algorithm.
        for header in [
            r#"{"alg":"RS256","kid":"k1"}"#,
            r#"{"alg":"HS512","kid":"k1"}"#,
            r#"{"alg":"hs256","kid":"k1"}"#,
            r#"{"alg":["HS256"],"kid":"k1"}"#,
            r#"{"kid":"k1"}"#,
        ] {
            let t = sign_raw(header.as_bytes(), &body, K1);
            assert_eq!(
                verifier().verify(&t, NOW),
                Err(TokenError::BadSignature),
                "{header}"
            );
        }
    }

    #[test]
    fn tampered_claims_are_rejected() {
        let t = mint(&claims());
        let parts: Vec<&str> = t.split('.').collect();
        let mut c = claims();
        c.sub = "mallory".into();
        c.scp = Some(vec!["admin".into()]);
        let forged_claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&c).unwrap());
        let forged = format!("{}.{}.{}", parts[0], forged_claims, parts[2]);
        assert_eq!(
            verifier().verify(&forged, NOW),
            Err(TokenError::BadSignature)
        );
    }

    #[test]
    fn foreign_secret_under_a_known_kid_is_rejected() {
        let t = mint_hs256(Some("k1"), b"another-secret-0123456789abcdefgh", &claims());
        assert_eq!(verifier().verify(&t, NOW), Err(TokenError::BadSignature));
    }

    #[test]
    fn malformed_shapes_are_rejected() {
        let good = mint(&claims());
        let parts: Vec<&str> = good.split('.').collect();
        let cases = [
            String::new(),
            "abc".into(),
            "a.b".into(),
            "a.b.c.d".into(),
            format!("{good}.{}", parts[2]),
            format!("!!!.{}.{}", parts[1], parts[2]),
            format!("{}.{}.%%%", parts[0], parts[1]),
            format!("{}=.{}.{}", parts[0], parts[1], parts[2]),
            format!("{}.{}.{}=", parts[0], parts[1], parts[2]),
            format!(" {good}"),
        ];
        for t in cases {
            assert_eq!(
                verifier().verify(&t, NOW),
                Err(TokenError::Malformed),
                "{t:?}"
            );
        }
    }

    #[test]
    fn non_json_or_non_object_header_is_malformed_even_when_signed() {
        let body = serde_json::to_vec(&claims()).unwrap();
        for header in [&b"not json"[..], b"[\"HS256\"]", b"\"HS256\"", b""] {
            let t = sign_raw(header, &body, K1);
            assert_eq!(verifier().verify(&t, NOW), Err(TokenError::Malformed));
        }
    }

    #[test]
    fn non_json_claims_are_malformed_even_when_signed() {
        let exp = NOW + 100;
        for body in [
            "not json".to_string(),
            "[]".into(),
            format!(r#"["alice",null,null,null,{exp}]"#),
            "\"alice\"".into(),
            String::new(),
            "{\"sub\":\"alice\"".into(),
        ] {
            let t = signed_claims_json(&body);
            assert_eq!(
                verifier().verify(&t, NOW),
                Err(TokenError::Malformed),
                "{body}"
            );
        }
    }

    #[test]
    fn claims_are_typed_strictly() {
        let exp = NOW + 100;
        for body in [
            format!(r#"{{"sub":"alice","exp":{exp}.5}}"#),
            format!(r#"{{"sub":"alice","exp":"{exp}"}}"#),
            r#"{"sub":"alice","exp":1e10}"#.to_string(),
            r#"{"sub":"alice","exp":99999999999999999999}"#.to_string(),
            format!(r#"{{"sub":"alice","exp":{exp},"nbf":1.0}}"#),
            format!(r#"{{"sub":"alice","exp":{exp},"iat":true}}"#),
            format!(r#"{{"sub":"alice","exp":{exp},"scp":"publish subscribe"}}"#),
            format!(r#"{{"sub":"alice","exp":{exp},"scp":[1]}}"#),
            format!(r#"{{"sub":7,"exp":{exp}}}"#),
            format!(r#"{{"sub":"alice","sub":"bob","exp":{exp}}}"#),
            format!(
                r#"{{"sub":"alice","exp":{exp},"jti":"{}"}}"#,
                "j".repeat(TOKEN_ID_BYTES_MAX + 1)
            ),
        ] {
            let t = signed_claims_json(&body);
            assert_eq!(
                verifier().verify(&t, NOW),
                Err(TokenError::Malformed),
                "{body}"
            );
        }
        // Unknown claims such as aud are ignored.
        let t = signed_claims_json(&format!(
            r#"{{"sub":"alice","exp":{exp},"aud":["x",{{"y":1}}],"custom":null}}"#
        ));
        assert!(verifier().verify(&t, NOW).is_ok());
        // JSON whitespace around the object is fine.
        let t = signed_claims_json(&format!("\r\n\t {{\"sub\":\"alice\",\"exp\":{exp}}} "));
        assert!(verifier().verify(&t, NOW).is_ok());
    }

    #[test]
    fn expiry_and_not_before_honour_the_leeway() {
        let v = verifier();
        let at = |exp: i64, nbf: Option<i64>| {
            let mut c = claims();
            c.exp = Some(exp);
            c.nbf = nbf;
            v.verify(&mint(&c), NOW)
        };
        assert_eq!(at(NOW - 7200, None), Err(TokenError::Expired));
        assert!(
            at(NOW - 10, None).is_ok(),
            "10 s past exp is inside the leeway"
        );
        assert!(
            at(NOW - 60, None).is_ok(),
            "exactly exp + leeway is accepted"
        );
        assert_eq!(at(NOW - 61, None), Err(TokenError::Expired));
        assert_eq!(
            at(NOW + 9000, Some(NOW + 7200)),
            Err(TokenError::NotYetValid)
        );
        assert!(at(NOW + 9000, Some(NOW + 10)).is_ok());
        assert!(at(NOW + 9000, Some(NOW + 60)).is_ok());
        assert_eq!(at(NOW + 9000, Some(NOW + 61)), Err(TokenError::NotYetValid));
        // Saturating arithmetic at the extremes.
        assert!(at(i64::MAX, Some(i64::MIN)).is_ok());
    }

    #[test]
    fn a_token_without_exp_is_rejected() {
        let mut c = claims();
        c.exp = None;
        assert_eq!(verifier().verify(&mint(&c), NOW), Err(TokenError::NoExpiry));
        let t = signed_claims_json(r#"{"sub":"alice","exp":null}"#);
        assert_eq!(verifier().verify(&t, NOW), Err(TokenError::NoExpiry));
    }

    #[test]
    fn subject_is_required() {
        let mut c = claims();
        c.sub.clear();
        assert_eq!(
            verifier().verify(&mint(&c), NOW),
            Err(TokenError::NoSubject)
        );
        let t = signed_claims_json(&format!(r#"{{"sub":"","exp":{}}}"#, NOW + 5));
        assert_eq!(verifier().verify(&t, NOW), Err(TokenError::NoSubject));
    }

    #[test]
    fn ids_that_could_widen_an_acl_pattern_are_rejected() {
        for bad in [
            "#",
            "*",
            "a.b",
            "alice.x",
            "a:b",
            "a b",
            "é",
            &"x".repeat(129),
        ] {
            let mut c = claims();
            c.sub = bad.to_string();
            assert_eq!(
                verifier().verify(&mint(&c), NOW),
                Err(TokenError::BadId),
                "sub {bad:?}"
            );
            let mut c = claims();
            c.did = Some(bad.to_string());
            assert_eq!(
                verifier().verify(&mint(&c), NOW),
                Err(TokenError::BadId),
                "did {bad:?}"
            );
            let mut c = claims();
            c.tid = Some(bad.to_string());
            assert_eq!(
                verifier().verify(&mint(&c), NOW),
                Err(TokenError::BadId),
                "tid {bad:?}"
            );
        }
        let mut c = claims();
        c.did = Some(String::new());
        c.tid = Some(String::new());
        let p = verifier().verify(&mint(&c), NOW).unwrap();
        assert_eq!((p.device_id.as_str(), p.tenant.as_str()), ("", ""));
    }

    #[test]
    fn issuer_is_enforced_only_when_configured() {
        let v = Verifier::new(vec![("k1".into(), K1.to_vec())], "auth.example", 60).unwrap();
        let mut c = claims();
        assert_eq!(
            v.verify(&mint(&c), NOW),
            Err(TokenError::BadSignature),
            "missing iss"
        );
        c.iss = Some("evil.example".into());
        assert_eq!(v.verify(&mint(&c), NOW), Err(TokenError::BadSignature));
        c.iss = Some("auth.example".into());
        assert!(v.verify(&mint(&c), NOW).is_ok());
        c.iss = Some("anything".into());
        assert!(verifier().verify(&mint(&c), NOW).is_ok());
    }

    #[test]
    fn key_rotation_and_fallback() {
        let v = verifier();
        assert!(v
            .verify(&mint_hs256(Some("k1"), K1, &claims()), NOW)
            .is_ok());
        assert!(v
            .verify(&mint_hs256(Some("k2"), K2, &claims()), NOW)
            .is_ok());
        // No kid: the first configured key, and only it.
        assert!(v.verify(&mint_hs256(None, K1, &claims()), NOW).is_ok());
        assert_eq!(
            v.verify(&mint_hs256(None, K2, &claims()), NOW),
            Err(TokenError::BadSignature)
        );
        // The old key retired: its tokens fail at once with unknown kid.
        let mut v = v;
        v.set_keys(vec![("k2".into(), K2.to_vec())]).unwrap();
        assert_eq!(
            v.verify(&mint_hs256(Some("k1"), K1, &claims()), NOW),
            Err(TokenError::UnknownKey)
        );
        assert!(v.verify(&mint_hs256(None, K2, &claims()), NOW).is_ok());
    }

    #[test]
    fn a_kid_that_is_not_a_key_name_is_unknown() {
        let body = serde_json::to_vec(&claims()).unwrap();
        for header in [
            r#"{"alg":"HS256","kid":""}"#,
            r#"{"alg":"HS256","kid":null}"#,
            r#"{"alg":"HS256","kid":1}"#,
            r#"{"alg":"HS256","kid":"K1"}"#,
        ] {
            let t = sign_raw(header.as_bytes(), &body, K1);
            assert_eq!(
                verifier().verify(&t, NOW),
                Err(TokenError::UnknownKey),
                "{header}"
            );
        }
    }

    #[test]
    fn bad_keys_are_refused_at_construction() {
        let short = vec![0u8; KEY_BYTES_MIN - 1];
        assert!(Verifier::new(vec![], "", 60).is_err());
        let e = Verifier::new(vec![("k".into(), short.clone())], "", 60).unwrap_err();
        assert!(e.contains("31-byte"), "{e}");
        assert!(Verifier::new(vec![("k".into(), vec![7; KEY_BYTES_MIN])], "", 60).is_ok());
        assert!(Verifier::new(vec![("".into(), K1.to_vec())], "", 60).is_err());
        assert!(Verifier::new(
            vec![("k".into(), K1.to_vec()), ("k".into(), K2.to_vec())],
            "",
            60
        )
        .is_err());
        let many = (0..=KEYS_MAX)
            .map(|i| (format!("k{i}"), K1.to_vec()))
            .collect();
        assert!(Verifier::new(many, "", 60).is_err());
        assert!(Verifier::new(vec![("k".into(), K1.to_vec())], "", -1).is_err());
        assert!(Verifier::new(vec![("k".into(), K1.to_vec())], "", LEEWAY_S_MAX + 1).is_err());
        let mut v = verifier();
        assert!(v.set_keys(vec![("k".into(), short)]).is_err());
        assert!(v.set_keys(vec![]).is_err());
        // A refused rotation leaves the old keys in place.
        assert!(v.verify(&mint(&claims()), NOW).is_ok());
    }

    #[test]
    fn from_config_resolves_secrets_and_leeway() {
        let cfg = IdentityConfig {
            enabled: true,
            keys: vec![
                IdentityKeyConfig {
                    id: "env".into(),
                    secret: "ignored".into(),
                    secret_env: "TOKEN_KEY".into(),
                },
                IdentityKeyConfig {
                    id: "inline".into(),
                    secret: String::from_utf8(K2.to_vec()).unwrap(),
                    secret_env: String::new(),
                },
            ],
            issuer: "iss".into(),
            leeway: Duration::from_millis(30_900),
            ..IdentityConfig::default()
        };
        let env =
            |name: &str| (name == "TOKEN_KEY").then(|| String::from_utf8(K1.to_vec()).unwrap());
        let v = Verifier::from_config(&cfg, &env).unwrap();
        assert_eq!(v.leeway_s(), 30, "sub-second leeway is truncated");
        let mut c = claims();
        c.iss = Some("iss".into());
        assert!(v.verify(&mint_hs256(Some("env"), K1, &c), NOW).is_ok());
        assert!(v.verify(&mint_hs256(Some("inline"), K2, &c), NOW).is_ok());
        // The fallback key is the first listed one.
        assert!(v.verify(&mint_hs256(None, K1, &c), NOW).is_ok());

        let no_env = |_: &str| None;
        let e = Verifier::from_config(&cfg, &no_env).unwrap_err();
        assert!(e.contains("\"env\"") && !e.contains("ignored"), "{e}");
        assert!(Verifier::from_config(&IdentityConfig::default(), &no_env).is_err());
    }

    #[test]
    fn revoked_token_is_rejected_until_its_window_ends() {
        let mut v = verifier();
        let t = mint(&claims());
        v.revoke("t-1", NOW + 100, NOW).unwrap();
        assert_eq!(v.verify(&t, NOW), Err(TokenError::Revoked));
        assert_eq!(v.verify(&t, NOW + 99), Err(TokenError::Revoked));
        assert!(v.verify(&t, NOW + 100).is_ok(), "the window is over");
        // Other tokens are unaffected.
        let mut other = claims();
        other.jti = Some("t-2".into());
        assert!(v.verify(&mint(&other), NOW).is_ok());
        // A token without jti (or an empty one) skips the check.
        for jti in [None, Some(String::new())] {
            let mut c = claims();
            c.jti = jti;
            assert!(v.verify(&mint(&c), NOW).is_ok());
        }
    }

    #[test]
    fn revocation_prunes_keeps_the_later_end_and_is_bounded() {
        let mut v = verifier();
        assert_eq!(v.revoke("", NOW + 5, NOW), Err(RevokeError::EmptyId));
        let long = "j".repeat(TOKEN_ID_BYTES_MAX + 1);
        assert_eq!(v.revoke(&long, NOW + 5, NOW), Err(RevokeError::IdTooLong));
        v.revoke("a", NOW + 10, NOW).unwrap();
        v.revoke("a", NOW + 5, NOW).unwrap();
        let mut c = claims();
        c.jti = Some("a".into());
        assert_eq!(v.verify(&mint(&c), NOW + 7), Err(TokenError::Revoked));
        v.revoke("past", NOW - 1, NOW).unwrap();
        assert_eq!(v.revoked_len(), 1, "a window already over is not stored");
        v.revoke("b", NOW + 20, NOW + 10).unwrap();
        assert_eq!(v.revoked_len(), 1, "a's ended window was pruned");

        for i in 0..REVOKED_MAX - 1 {
            v.revoke(&format!("x{i}"), NOW + 50, NOW + 10).unwrap();
        }
        assert_eq!(v.revoked_len(), REVOKED_MAX);
        assert_eq!(
            v.revoke("one-more", NOW + 50, NOW + 10),
            Err(RevokeError::Full)
        );
        v.revoke("b", NOW + 60, NOW + 10).unwrap(); // Extending one still works.
        c.jti = Some("one-more".into());
        assert!(v.verify(&mint(&c), NOW + 10).is_ok());
        // Once the windows pass, room comes back.
        v.revoke("one-more", NOW + 100, NOW + 55).unwrap();
        assert_eq!(v.revoked_len(), 2);
        assert_eq!(v.verify(&mint(&c), NOW + 56), Err(TokenError::Revoked));
    }

    #[test]
    fn checks_run_in_the_specified_order() {
        let v = verifier();
        let body = serde_json::to_vec(&claims()).unwrap();
        // 3 before 4: a bad alg with an unknown kid is a bad signature.
        let t = sign_raw(br#"{"alg":"RS256","kid":"nope"}"#, &body, K1);
        assert_eq!(v.verify(&t, NOW), Err(TokenError::BadSignature));
        // 4 before 5: an unknown kid with a wrong signature is an unknown key.
        let t = mint_hs256(Some("nope"), b"whatever-0123456789abcdef0123456", &claims());
        assert_eq!(v.verify(&t, NOW), Err(TokenError::UnknownKey));
        // 5 before 6: unsigned garbage claims are a bad signature.
        let t = sign_raw(
            br#"{"alg":"HS256"}"#,
            b"not json",
            b"other-key-0123456789abcdef012345",
        );
        assert_eq!(v.verify(&t, NOW), Err(TokenError::BadSignature));
        // 7 before 8 before 9 before 11.
        let mut c = claims();
        c.sub.clear();
        c.exp = Some(NOW - 9999);
        let strict = Verifier::new(vec![("k1".into(), K1.to_vec())], "iss", 60).unwrap();
        assert_eq!(strict.verify(&mint(&c), NOW), Err(TokenError::NoSubject));
        c.sub = "alice".into();
        assert_eq!(strict.verify(&mint(&c), NOW), Err(TokenError::BadSignature));
        c.iss = Some("iss".into());
        let mut strict = strict;
        strict.revoke("t-1", NOW + 10, NOW).unwrap();
        assert_eq!(strict.verify(&mint(&c), NOW), Err(TokenError::Expired));
        c.exp = Some(NOW + 10);
        assert_eq!(strict.verify(&mint(&c), NOW), Err(TokenError::Revoked));
    }

    #[test]
    fn length_is_bounded_before_decoding() {
        assert_eq!(
            verifier().verify(&"a".repeat(TOKEN_BYTES_MAX + 1), NOW),
            Err(TokenError::TooLong)
        );
        let mut c = claims();
        c.scp = Some(vec!["x".repeat(TOKEN_BYTES_MAX)]);
        assert_eq!(verifier().verify(&mint(&c), NOW), Err(TokenError::TooLong));
        c.scp = Some(vec!["x".repeat(TOKEN_BYTES_MAX / 2), "publish".into()]);
        assert!(verifier().verify(&mint(&c), NOW).is_ok());
    }

    #[test]
    fn deadline_is_exp_plus_leeway() {
        let v = verifier();
        let p = v.verify(&mint(&claims()), NOW).unwrap();
        assert_eq!(v.deadline_s(&p), Some(NOW + 3600 + 60));
        assert_eq!(v.deadline_s(&Principal::anonymous()), None);
    }

    #[test]
    fn error_texts_are_distinct_and_non_empty() {
        let all = [
            TokenError::TooLong,
            TokenError::Malformed,
            TokenError::BadSignature,
            TokenError::UnknownKey,
            TokenError::NoSubject,
            TokenError::BadId,
            TokenError::NoExpiry,
            TokenError::Expired,
            TokenError::NotYetValid,
            TokenError::Revoked,
        ];
        let texts: std::collections::HashSet<String> = all.iter().map(|e| e.to_string()).collect();
        assert_eq!(texts.len(), all.len());
        assert!(texts.iter().all(|t| !t.is_empty()));
        for e in [
            RevokeError::EmptyId,
            RevokeError::IdTooLong,
            RevokeError::Full,
        ] {
            assert!(!e.to_string().is_empty());
        }
    }

    /// Base64 is decoded canonically, so no single-byte change to a valid
    /// token yields a token that still verifies.
    #[test]
    fn property_no_single_byte_mutation_verifies() {
        let v = verifier();
        let token = mint(&claims());
        assert!(v.verify(&token, NOW).is_ok());
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/";
        let mut rng = Rng::new(0x70c3);
        for _ in 0..4000 {
            let mut bytes = token.clone().into_bytes();
            let at = rng.below(bytes.len() as u64) as usize;
            let b = alphabet[rng.below(alphabet.len() as u64) as usize];
            if bytes[at] == b {
                continue;
            }
            bytes[at] = b;
            let t = String::from_utf8(bytes).unwrap();
            assert!(v.verify(&t, NOW).is_err(), "{t}");
        }
    }

    /// Random claim sets: whatever is accepted carries valid ids, an expiry
    /// within the leeway and no admin scope unless `scp` named it.
    #[test]
    fn property_accepted_tokens_satisfy_the_invariants() {
        let v = verifier();
        let mut rng = Rng::new(0xacce);
        let pieces = ["alice", "", "a.b", "#", "*", "bob-1", "x:y", "Ω"];
        let mut accepted = 0;
        for _ in 0..3000 {
            let pick = |rng: &mut Rng| pieces[rng.below(pieces.len() as u64) as usize].to_string();
            let c = Claims {
                sub: pick(&mut rng),
                did: (rng.below(2) == 0).then(|| pick(&mut rng)),
                tid: (rng.below(2) == 0).then(|| pick(&mut rng)),
                scp: (rng.below(2) == 0).then(|| vec![pick(&mut rng), "admin".into()]),
                exp: (rng.below(8) != 0).then(|| NOW - 120 + rng.below(240) as i64),
                nbf: (rng.below(2) == 0).then(|| NOW - 120 + rng.below(240) as i64),
                ..Claims::default()
            };
            let Ok(p) = v.verify(&mint(&c), NOW) else {
                continue;
            };
            accepted += 1;
            assert!(valid_id(&p.user_id));
            assert!(p.device_id.is_empty() || valid_id(&p.device_id));
            assert!(p.tenant.is_empty() || valid_id(&p.tenant));
            let exp = p.expires_at_s.unwrap();
            assert!(NOW <= exp + v.leeway_s());
            assert_eq!(p.scopes.contains(Scope::Admin), c.scp.is_some());
        }
        assert!(
            accepted > 100,
            "the generator must reach acceptance ({accepted})"
        );
    }
}
