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
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>
        + Send
        + 'static,
{
    boltq_shards::block_on("membership-test", move || {
        Box::pin(async move {
            let client = MembershipClient::new(&base, "Bearer s3cret", timeout, cache_ttl).unwrap();
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
