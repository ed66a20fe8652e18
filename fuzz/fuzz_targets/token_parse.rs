//! Fuzzes gateway token verification (`boltq::messaging::identity::token::Verifier::verify`):
//! the bearer token is the first thing any device sends, before it is anyone.
//!
//! Input: the first byte picks a mode, the rest is the candidate data.
//! - mode 0: the bytes (lossily as UTF-8) are the whole token.
//! - mode 1: the bytes are the claims JSON, correctly signed under a configured key, so
//!   random claims reach decoding and the claim checks instead of dying at the signature.
//! - mode 2: the bytes are (position, byte) edits applied to a valid token.
//!
//! Checked on every input, beyond "never panics":
//! - the verdict is deterministic (verifying twice agrees);
//! - an accepted token is within `TOKEN_BYTES_MAX`, is not anonymous, has a `valid_id`
//!   user and empty-or-valid device and tenant, an expiry not past `exp + leeway`, and is
//!   not the revoked token;
//! - mode 1: an accepted principal says what the JSON says: `sub`, `exp`, `did`, `tid`,
//!   `jti`, and `admin` only when `scp` lists it, defaults only when `scp` is absent or empty;
//! - mode 2: an edited token never verifies (base64 is decoded canonically, so any change
//!   changes the signed bytes or the signature);
//! - every refusal has a non-empty text.
#![no_main]

use std::sync::OnceLock;

use boltq::messaging::identity::principal::{valid_id, Principal, Scope, Scopes};
use boltq::messaging::identity::token::{
    mint_hs256, mint_hs256_raw, Claims, Verifier, TOKEN_BYTES_MAX,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const NOW: i64 = 1_700_000_000;
const KEY: &[u8] = b"fuzz-key-one-0123456789abcdef0123";
const KEY2: &[u8] = b"fuzz-key-two-0123456789abcdef0123";
const REVOKED_JTI: &str = "revoked";

fn verifier() -> &'static Verifier {
    static V: OnceLock<Verifier> = OnceLock::new();
    V.get_or_init(|| {
        let keys = vec![
            ("k1".to_string(), KEY.to_vec()),
            ("k2".to_string(), KEY2.to_vec()),
        ];
        let mut v = Verifier::new(keys, "", 60).expect("valid keys");
        v.revoke(REVOKED_JTI, NOW + 3600, NOW).expect("room");
        v
    })
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            check(&String::from_utf8_lossy(rest));
        }
        1 => check_signed_claims(rest),
        _ => check_edits(rest),
    }
});

/// Verifies `token` twice and checks what every verdict must satisfy.
fn check(token: &str) -> Option<Principal> {
    let v = verifier();
    let verdict = v.verify(token, NOW);
    assert_eq!(verdict, v.verify(token, NOW), "deterministic");
    match verdict {
        Ok(p) => {
            assert!(token.len() <= TOKEN_BYTES_MAX);
            assert!(!p.anonymous);
            assert!(valid_id(&p.user_id), "{:?}", p.user_id);
            assert!(p.device_id.is_empty() || valid_id(&p.device_id));
            assert!(p.tenant.is_empty() || valid_id(&p.tenant));
            let exp = p.expires_at_s.expect("exp is required");
            assert!(NOW <= exp.saturating_add(v.leeway_s()));
            assert_ne!(p.token_id, REVOKED_JTI);
            Some(p)
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            None
        }
    }
}

fn check_signed_claims(claims: &[u8]) {
    let token = mint_hs256_raw(Some("k1"), KEY, claims);
    let Some(p) = check(&token) else {
        return;
    };
    // `Value` refuses lone surrogate escapes, which the decoder skips unvalidated inside
    // ignored claims (harmless: nothing reads them); such inputs cannot be compared.
    let Ok(json) = serde_json::from_slice::<Value>(claims) else {
        return;
    };
    let obj = json.as_object().expect("accepted claims are an object");
    let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("");
    assert_eq!(p.user_id, text("sub"));
    assert_eq!(p.device_id, text("did"));
    assert_eq!(p.tenant, text("tid"));
    assert_eq!(p.token_id, text("jti"));
    assert_eq!(p.expires_at_s, obj.get("exp").and_then(Value::as_i64));
    let names: Vec<&str> = match obj.get("scp") {
        Some(Value::Array(a)) => a.iter().map(|s| s.as_str().expect("strings")).collect(),
        _ => Vec::new(),
    };
    if names.is_empty() {
        assert_eq!(p.scopes, Scopes::DEFAULT);
    } else {
        for s in Scope::EVERY {
            assert_eq!(p.scopes.contains(s), names.contains(&s.name()), "{s:?}");
        }
    }
}

fn check_edits(edits: &[u8]) {
    let claims = Claims {
        sub: "alice".into(),
        did: Some("phone".into()),
        exp: Some(NOW + 600),
        jti: Some("t-1".into()),
        ..Claims::default()
    };
    let original = mint_hs256(Some("k2"), KEY2, &claims);
    assert!(check(&original).is_some(), "the base token verifies");
    let mut bytes = original.clone().into_bytes();
    for pair in edits.chunks_exact(2) {
        let at = usize::from(pair[0]) % bytes.len();
        bytes[at] = pair[1];
    }
    let Ok(edited) = String::from_utf8(bytes) else {
        return;
    };
    if edited != original {
        assert!(
            check(&edited).is_none(),
            "an edited token verified: {edited}"
        );
    }
}
