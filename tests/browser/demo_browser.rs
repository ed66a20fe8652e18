//! The browser chat demo (`messaging.gateway.demo = true`), end to end: headless Chromium
//! opens `/demo/chat` from the real binary in two tabs, logs in as alice and bob, both open
//! their direct conversation; alice's typing shows in bob's tab, her message appears there,
//! bob's answer appears in hers, presence dots are green, and bob's tab survives a reload by
//! resuming its gateway session (and still receives). A second browser test crashes the
//! server under an open page: the client module reconnects, re-subscribes from the last
//! record it had, and receives again. Plain HTTP tests check that every
//! `/demo/` path is 404 with the flag off, that the token route refuses bad user ids and mints
//! tokens the gateway accepts, and that the flag needs the gateway.
//!
//! Screenshots (full page, 1280 px wide) go to the test output folder, `target/test-output/`
//! (under `$CARGO_TARGET_DIR` when that is set):
//! - `demo-bob-typing.png`: bob's tab while alice types;
//! - `demo-alice.png`, `demo-bob.png`: both tabs after one message each way;
//! - `demo-bob-resumed.png`: bob's tab after a reload, with a message sent after it.
//!
//! Needs Chromium and python3 like tests/browser/dashboard_browser.rs (`BOLTQ_CHROMIUM=<path>`,
//! `BOLTQ_SKIP_BROWSER=1` skips the browser test only); the tabs are driven by
//! `tests/browser/demo_driver.py`, which extends `cdp_driver.py` with tabs.

use crate::support;

use crate::support::browser::{chromium_or_fail, png_ok, test_output_dir, Browser};
use crate::support::gateway::{connect, SECRET};
use crate::support::{http, run_to_exit, Server};
use boltq::messaging::identity::token::Verifier;
use boltq_io::testutil::TempDir;
use serde_json::{json, Value};
use std::path::Path;

/// A server with the messaging plane, the gateway on the admin listener, and the demo flag.
fn start(demo: bool) -> (Server, TempDir) {
    let tmp = TempDir::new("demo");
    let path = tmp.path().join("boltq.toml");
    std::fs::write(
        &path,
        format!(
            "[messaging.stream]\nenabled = true\n\
             [messaging.identity]\nenabled = true\n\
             keys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\
             [messaging.gateway]\nenabled = true\ndemo = {demo}\n"
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", path.to_str().unwrap()]);
    (server, tmp)
}

fn post_token(s: &Server, body: &[u8]) -> support::HttpResponse {
    http(
        s.http_port,
        "POST",
        "/demo/token",
        &[("Content-Type", "application/json")],
        body,
    )
}

#[test]
fn every_demo_path_is_404_when_the_flag_is_off() {
    let (s, _tmp) = start(false);
    for (method, path, body) in [
        ("GET", "/demo/chat", &b""[..]),
        ("GET", "/demo/boltq-gateway.js", b""),
        ("GET", "/demo/chat.js", b""),
        ("POST", "/demo/token", br#"{"user":"alice"}"#),
    ] {
        let r = http(s.http_port, method, path, &[], body);
        assert_eq!(r.status, 404, "{method} {path}: {}", r.body);
        assert!(!r.body.contains("token"), "{method} {path}: {}", r.body);
    }
}

#[test]
fn token_route_mints_tokens_the_gateway_accepts_and_refuses_bad_user_ids() {
    let (s, _tmp) = start(true);
    for body in [
        &br#"{"user":""}"#[..],
        br#"{"user":"alice.bob"}"#,
        br#"{"user":"alice:bob"}"#,
        br#"{"user":"al ice"}"#,
        br#"{"user":"*"}"#,
        br#"{"user":7}"#,
        br#"{}"#,
        b"user=alice",
    ] {
        let r = post_token(&s, body);
        assert_eq!(
            r.status,
            400,
            "{}: {}",
            String::from_utf8_lossy(body),
            r.body
        );
        assert!(r.json()["error"].is_string(), "{}", r.body);
    }
    let long = format!(r#"{{"user":"{}"}}"#, "a".repeat(129));
    assert_eq!(post_token(&s, long.as_bytes()).status, 400);
    assert_eq!(
        http(s.http_port, "GET", "/demo/token", &[], b"").status,
        405
    );

    let r = post_token(&s, br#"{"user":"alice"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let v = r.json();
    assert_eq!(v["user"], "alice");
    assert_eq!(
        v["gateway"],
        json!({"port": 0, "path": "/ws", "tls": false})
    );
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let expires = v["expires_at"].as_i64().unwrap();
    assert!(
        (now_s + 60..=now_s + 3600).contains(&expires),
        "short-lived: {expires} vs now {now_s}"
    );
    let token = v["token"].as_str().unwrap();
    let verifier = Verifier::new(vec![("k1".into(), SECRET.as_bytes().to_vec())], "", 0).unwrap();
    assert_eq!(verifier.verify(token, now_s).unwrap().user_id, "alice");
    // And the gateway itself takes it.
    let url = format!("ws://127.0.0.1:{}/ws", s.http_port);
    let mut c = boltq::client::gateway::GatewayClient::connect(&url, token, "web-1", None)
        .unwrap_or_else(|e| panic!("the gateway accepts a demo token: {e}\n{}", s.log()));
    let pong = c.request(json!({"op": "ping"})).unwrap();
    assert_eq!(pong["op"], "pong", "{pong}");

    let page = http(s.http_port, "GET", "/demo/chat", &[], b"");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("/demo/chat.js"), "{}", page.body);
    let module = http(s.http_port, "GET", "/demo/boltq-gateway.js", &[], b"");
    assert_eq!(module.status, 200);
    assert_eq!(
        module.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    let copy = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/js/boltq-gateway.js"),
    )
    .unwrap();
    assert_eq!(
        module.body, copy,
        "the served module is clients/js/boltq-gateway.js"
    );
}

#[test]
fn the_demo_flag_requires_the_gateway() {
    let tmp = TempDir::new("demo-config");
    let path = tmp.path().join("boltq.toml");
    std::fs::write(&path, "[messaging.gateway]\ndemo = true\n").unwrap();
    let (code, out) = run_to_exit(&["--config", path.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("messaging.gateway.demo"), "{out}");
}

/// The page's state as the test reads it, in one tab.
const PAGE_STATE: &str = r#"(() => {
  const d = window.__demo || {};
  const shown = (id) => { const e = document.getElementById(id); return !!e && !e.hidden; };
  return {
    status: document.getElementById('status').dataset.state,
    resumed: !!d.resumed,
    listening: d.listeningTo || '',
    presenceSupported: !!d.presenceSupported,
    typingSupported: !!d.typingSupported,
    sendsPending: d.sendsPending || 0,
    typing: shown('typing') ? document.getElementById('typing').textContent : '',
    messages: [...document.querySelectorAll('#messages li')].map((li) =>
      li.querySelector('.sender').textContent + ': ' + li.querySelector('.text').textContent),
    convs: [...document.querySelectorAll('#convs li')].map((li) => ({
      id: li.dataset.conv,
      online: li.querySelector('.presence').dataset.online === 'true'
        && !li.querySelector('.presence').hidden,
      unread: li.querySelector('.unread').textContent,
    })),
  };
})()"#;

/// Waits until `cond` (a JS expression over `s`, the page state) holds in `tab`.
fn wait_for(b: &mut Browser, tab: &str, cond: &str, timeout_ms: u64) -> Value {
    b.tab(
        tab,
        json!({"op": "wait", "expr": format!(
            "(() => {{ const s = {PAGE_STATE}; return ({cond}) ? s : null; }})()"
        )}),
        timeout_ms,
    )
}

fn log_in(b: &mut Browser, tab: &str, url: &str, user: &str) {
    let href = b.tab(
        tab,
        json!({"op": "open", "url": url, "width": 1280, "height": 800}),
        20_000,
    );
    assert_eq!(href, json!(url));
    b.tab(
        tab,
        json!({"op": "type", "selector": "#login-user", "text": user}),
        5_000,
    );
    b.tab(tab, json!({"op": "click", "selector": "#login-btn"}), 5_000);
    wait_for(b, tab, "s.status === 'open'", 15_000);
}

fn open_chat(b: &mut Browser, tab: &str, peer: &str, conv: &str) {
    b.tab(
        tab,
        json!({"op": "type", "selector": "#peer", "text": peer}),
        5_000,
    );
    b.tab(tab, json!({"op": "click", "selector": "#open-btn"}), 5_000);
    wait_for(
        b,
        tab,
        &format!(
            "s.listening === {} && s.convs.some((c) => c.id === {0})",
            json!(conv)
        ),
        15_000,
    );
}

fn send(b: &mut Browser, tab: &str, text: &str) {
    b.tab(
        tab,
        json!({"op": "type", "selector": "#composer", "text": text}),
        5_000,
    );
    b.tab(tab, json!({"op": "click", "selector": "#send-btn"}), 5_000);
}

fn sees(b: &mut Browser, tab: &str, line: &str) -> Value {
    wait_for(
        b,
        tab,
        &format!("s.messages.includes({})", json!(line)),
        15_000,
    )
}

#[test]
fn two_tabs_chat_see_typing_and_presence_and_survive_a_reload() {
    let Some(chromium) = chromium_or_fail() else {
        return;
    };
    let (s, _tmp) = start(true);
    let out_dir = test_output_dir();
    let shots = [
        "demo-bob-typing.png",
        "demo-alice.png",
        "demo-bob.png",
        "demo-bob-resumed.png",
    ]
    .map(|n| out_dir.join(n));
    for p in &shots {
        let _ = std::fs::remove_file(p);
    }
    let url = format!("http://127.0.0.1:{}/demo/chat", s.http_port);
    let mut b = Browser::launch(&chromium, "demo_driver.py");
    log_in(&mut b, "alice", &url, "alice");
    log_in(&mut b, "bob", &url, "bob");
    open_chat(&mut b, "alice", "bob", "alice:bob");
    open_chat(&mut b, "bob", "alice", "alice:bob");

    // Presence: each sees the other online.
    for tab in ["alice", "bob"] {
        let st = wait_for(
            &mut b,
            tab,
            "s.convs.some((c) => c.id === 'alice:bob' && c.online)",
            10_000,
        );
        assert_eq!(st["presenceSupported"], true, "{st}");
    }

    // Typing: alice types, bob's tab says so.
    b.tab(
        "alice",
        json!({"op": "type", "selector": "#composer", "text": "hel"}),
        5_000,
    );
    let st = wait_for(
        &mut b,
        "bob",
        "s.typing.includes('alice is typing')",
        10_000,
    );
    assert_eq!(st["typingSupported"], true, "{st}");
    b.tab("bob", json!({"op": "screenshot", "path": shots[0]}), 15_000);

    // Messages both ways.
    send(&mut b, "alice", "lo bob");
    let st = sees(&mut b, "bob", "alice: hello bob");
    assert_eq!(st["messages"], json!(["alice: hello bob"]), "{st}");
    wait_for(&mut b, "bob", "s.typing === ''", 10_000);
    sees(&mut b, "alice", "alice: hello bob");
    send(&mut b, "bob", "hi alice");
    let st = sees(&mut b, "alice", "bob: hi alice");
    assert_eq!(
        st["messages"],
        json!(["alice: hello bob", "bob: hi alice"]),
        "in order, once each: {st}"
    );
    sees(&mut b, "bob", "bob: hi alice");
    b.tab(
        "alice",
        json!({"op": "screenshot", "path": shots[1]}),
        15_000,
    );
    b.tab("bob", json!({"op": "screenshot", "path": shots[2]}), 15_000);

    // A reload resumes bob's session (token in sessionStorage) and keeps the conversation.
    b.tab("bob", json!({"op": "reload"}), 20_000);
    let st = wait_for(
        &mut b,
        "bob",
        "s.status === 'open' && s.resumed && s.messages.length === 2",
        15_000,
    );
    assert_eq!(
        st["messages"],
        json!(["alice: hello bob", "bob: hi alice"]),
        "{st}"
    );
    wait_for(&mut b, "bob", "s.listening === 'alice:bob'", 10_000);
    send(&mut b, "alice", "still there?");
    let st = sees(&mut b, "bob", "alice: still there?");
    assert_eq!(
        st["messages"].as_array().unwrap().len(),
        3,
        "no duplicates: {st}"
    );
    b.tab("bob", json!({"op": "screenshot", "path": shots[3]}), 15_000);

    // A conversation bob never opened shows up from his inbox pointers, with its unread
    // count (carol writes from a native client).
    let mut carol = connect(&s, "carol", "cli");
    for n in 0..2 {
        let sent = carol
            .request(json!({"op": "send", "conversation": "bob:carol", "client_msg_id": format!("c-{n}"), "payload": "aGkgYm9i"}))
            .unwrap();
        assert_eq!(sent["op"], "sent", "{sent}");
    }
    wait_for(
        &mut b,
        "bob",
        "s.convs.some((c) => c.id === 'bob:carol' && c.unread === '2')",
        10_000,
    );
    b.tab(
        "bob",
        json!({"op": "click", "selector": "#convs li[data-conv='bob:carol']"}),
        5_000,
    );
    let st = wait_for(&mut b, "bob", "s.messages.length === 2", 10_000);
    assert_eq!(
        st["messages"],
        json!(["carol: hi bob", "carol: hi bob"]),
        "{st}"
    );
    assert!(
        st["convs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["unread"] == ""),
        "opening it clears the count: {st}"
    );

    for tab in ["alice", "bob"] {
        let errors = b.tab(tab, json!({"op": "errors"}), 5_000);
        assert_eq!(
            errors["exceptions"],
            json!([]),
            "{tab}: uncaught exceptions: {errors}"
        );
    }
    b.quit();
    for p in &shots {
        assert!(png_ok(p), "{} is a PNG", p.display());
    }
    println!("screenshots in {}", out_dir.display());
}

/// The client module survives a server crash: the page reconnects with backoff and a fresh
/// token, finds its session gone (a new process), re-subscribes from the last record it had,
/// and receives what is sent after the restart; its pure helpers behave as documented.
#[test]
fn the_page_reconnects_and_resubscribes_after_a_server_crash() {
    let Some(chromium) = chromium_or_fail() else {
        return;
    };
    let tmp = TempDir::new("demo-restart");
    let path = tmp.path().join("boltq.toml");
    std::fs::write(
        &path,
        format!(
            "[messaging.stream]\nenabled = true\n\
             [messaging.identity]\nenabled = true\n\
             keys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\
             [messaging.gateway]\nenabled = true\ndemo = true\n"
        ),
    )
    .unwrap();
    let s = Server::start_restartable(&["--config", path.to_str().unwrap()]);
    let url = format!("http://127.0.0.1:{}/demo/chat", s.http_port);
    let mut b = Browser::launch(&chromium, "demo_driver.py");
    log_in(&mut b, "alice", &url, "alice");

    let helpers = b.tab(
        "alice",
        json!({"op": "eval", "expr": r#"(async () => {
            const m = await import('/demo/boltq-gateway.js');
            const n = [...Array(40).keys()];
            return {
              direct: [m.directId('bob', 'alice'), m.directId('alice', 'bob')],
              text: m.payloadText(m.encodePayload('h\u00e9llo \u2713')),
              high: n.map((i) => m.backoffMs(i, 250, 15000, () => 0.999999)),
              low: n.map((i) => m.backoffMs(i, 250, 15000, () => 0)),
            };
        })()"#}),
        5_000,
    );
    assert_eq!(helpers["direct"], json!(["alice:bob", "alice:bob"]));
    assert_eq!(helpers["text"], "h\u{e9}llo \u{2713}", "UTF-8 round trip");
    let (high, low) = (&helpers["high"], &helpers["low"]);
    assert_eq!(
        (&low[0], &low[3], &low[39]),
        (&json!(125), &json!(1000), &json!(7500))
    );
    assert!(
        high.as_array()
            .unwrap()
            .iter()
            .all(|d| d.as_u64().unwrap() < 15000),
        "capped: {high}"
    );

    open_chat(&mut b, "alice", "bob", "alice:bob");
    send(&mut b, "alice", "before the crash");
    sees(&mut b, "alice", "alice: before the crash");
    // The echo can come before the answer; a crash between them has the page retry the send
    // on the new process, whose deduplication (memory only) stores it again.
    wait_for(&mut b, "alice", "s.sendsPending === 0", 15_000);

    let (s, _) = s.restart_when_ports_free(9);
    let st = wait_for(&mut b, "alice", "s.status === 'open'", 30_000);
    assert_eq!(st["resumed"], false, "a new process has no sessions: {st}");

    // bob writes from a native client; alice's page gets it on its re-issued subscription.
    let mut bob = connect(&s, "bob", "cli");
    let sent = bob
        .request(json!({"op": "send", "conversation": "alice:bob", "client_msg_id": "b-1", "payload": "YWZ0ZXIgdGhlIGNyYXNo"}))
        .unwrap();
    assert_eq!(sent["op"], "sent", "{sent}");
    let st = sees(&mut b, "alice", "bob: after the crash");
    assert_eq!(
        st["messages"],
        json!(["alice: before the crash", "bob: after the crash"]),
        "{st}"
    );
    send(&mut b, "alice", "welcome back");
    sees(&mut b, "alice", "alice: welcome back");
    let errors = b.tab("alice", json!({"op": "errors"}), 5_000);
    assert_eq!(errors["exceptions"], json!([]), "{errors}");
    b.quit();
}
