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
mod tests;
