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
    let env = |name: &str| (name == "TOKEN_KEY").then(|| String::from_utf8(K1.to_vec()).unwrap());
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
