//! Browser test of the built-in dashboard: headless Chromium loads `/` from the real binary,
//! the page shows the queues and the dead letter the test created, and "Requeue" clicked on
//! the page moves the dead letter back to its queue (checked through the API). A second test
//! checks that the Exchanges panel shows each exchange's type and bindings, a third that a
//! server open to other hosts without a key shows a warning banner.
//!
//! Screenshots (full page, 1280 px wide) are written to the test output folder,
//! `target/test-output/` (under `$CARGO_TARGET_DIR` when that is set):
//! - `target/test-output/dashboard.png`: two queues and one dead letter, before the requeue;
//! - `target/test-output/dashboard-requeued.png`: after the requeue.
//!
//! Needs the Debian `chromium` package (`/usr/bin/chromium`; `.ci/run` installs it when it is
//! missing; `BOLTQ_CHROMIUM=<path>` picks another binary) and `python3`: the browser is driven
//! over the DevTools protocol by `tests/browser/cdp_driver.py`, a standard-library-only
//! script. Without Chromium the test fails; `BOLTQ_SKIP_BROWSER=1` skips it instead.

use crate::support::browser::{chromium_or_fail, png_ok, test_output_dir, Browser};
use crate::support::{get, post, Server};
use boltq::client::{Client, ClientOptions, PublishOptions};
use boltq_io::testutil::TempDir;
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn dashboard_shows_depths_and_dead_letters_and_requeues_from_the_page() {
    let Some(chromium) = chromium_or_fail() else {
        return;
    };
    let dir = TempDir::new("dashboard-browser");
    let cfg = dir.path().join("boltq.toml");
    std::fs::write(&cfg, "[queue]\nmax_retry = 1\nretry_backoff_base_ms = 0\n").unwrap();
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);

    // One dead letter of "orders": with max_retry 1 the second NACK dead-letters.
    post(
        &s,
        "/publish",
        json!({"topic": "orders", "payload": {"order": 0}}),
    );
    let first = get(&s, "/consume?topic=orders").json();
    let id = first["id"].as_str().expect("a message id").to_string();
    assert_eq!(post(&s, "/nack", json!({"id": id})).status, 200);
    let again = get(&s, "/consume?topic=orders").json();
    assert_eq!(again["id"], id.as_str(), "the retry is redelivered");
    assert_eq!(post(&s, "/nack", json!({"id": id})).status, 200);
    // Three more ready in "orders" (over TCP), two in "emails" (over HTTP).
    let mut tcp = Client::connect(
        &format!("127.0.0.1:{}", s.tcp_port),
        ClientOptions::default(),
    )
    .unwrap();
    for n in 1..=3 {
        tcp.publish(
            "orders",
            &format!("{{\"order\":{n}}}"),
            None,
            PublishOptions::default(),
        )
        .unwrap();
    }
    for n in 0..2 {
        let r = post(&s, "/publish", json!({"topic": "emails", "payload": n}));
        assert_eq!(r.status, 200);
    }
    let stats = get(&s, "/stats").json();
    assert_eq!(
        (
            &stats["Queues"]["orders"],
            &stats["Queues"]["emails"],
            &stats["DeadLetters"]["orders_dead_letter"],
            &stats["PendingCount"],
        ),
        (&json!(3), &json!(2), &json!(1), &json!(0)),
        "setup as the API sees it: {stats}"
    );

    let out_dir = test_output_dir();
    let shot = out_dir.join("dashboard.png");
    let shot_after = out_dir.join("dashboard-requeued.png");
    for p in [&shot, &shot_after] {
        let _ = std::fs::remove_file(p);
    }

    let mut b = Browser::launch(&chromium, "cdp_driver.py");
    let url = format!("http://127.0.0.1:{}/", s.http_port);
    let href = b.call(
        json!({"op": "open", "url": url, "width": 1280, "height": 1000}),
        20_000,
    );
    assert_eq!(href, json!(url));

    // Depths and the dead letter, as the page shows them.
    let state = b.call(
        json!({"op": "wait", "expr": format!(
            "(() => {{ const s = {PAGE_STATE}; \
             return s.orders && s.orders.value === '3' && s.emails && s.emails.value === '2' \
             && s.dl && s.dl.value === '1' ? s : null; }})()"
        )}),
        15_000,
    );
    for (row, text) in [("orders", "3"), ("emails", "2"), ("dl", "1")] {
        assert_eq!(state[row]["text"], text, "{row} cell text: {state}");
        assert_eq!(state[row]["shown"], true, "{row} cell is visible: {state}");
    }
    assert_eq!(state["dlEmptyShown"], false, "{state}");
    assert_eq!(state["live"], "ok", "the live indicator is green: {state}");
    let meta = b.call(json!({"op": "screenshot", "path": shot}), 15_000);
    assert!(meta["bytes"].as_u64().unwrap() > 1000, "{meta}");

    // Requeue needs two clicks: the first only arms the button.
    let requeue = "#dl-body button[aria-label=\"Requeue all dead letters of orders\"]";
    let confirm = "#dl-body button[aria-label=\"Confirm: Requeue all dead letters of orders\"]";
    b.call(json!({"op": "click", "selector": requeue}), 10_000);
    let armed = b.call(
        json!({"op": "wait", "expr": format!(
            "(() => {{ const e = document.querySelector({}); return e && e.textContent; }})()",
            json!(confirm)
        )}),
        3_000,
    );
    assert_eq!(armed, "Confirm requeue?");
    let stats = get(&s, "/stats").json();
    assert_eq!(
        stats["DeadLetters"]["orders_dead_letter"], 1,
        "one click does not requeue: {stats}"
    );
    b.call(json!({"op": "click", "selector": confirm}), 3_000);

    // The API sees the dead letter back in its queue.
    let deadline = Instant::now() + Duration::from_secs(10);
    let stats = loop {
        let stats = get(&s, "/stats").json();
        // Emptied, it stays in STATS at 0 (v1); the page's list drops it.
        if stats["DeadLetters"]["orders_dead_letter"] == 0 {
            break stats;
        }
        assert!(
            Instant::now() < deadline,
            "the dead letter was not requeued within 10 s: {stats}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(stats["Queues"]["orders"], 4, "{stats}");
    assert_eq!(stats["Queues"]["emails"], 2, "{stats}");
    let dl = get(&s, "/dead-letters?queue=orders").json();
    assert_eq!(dl["messages"], json!([]), "{dl}");

    // And the page says so.
    let after = b.call(
        json!({"op": "wait", "expr": format!(
            "(() => {{ const s = {PAGE_STATE}; \
             return !s.dl && s.dlEmptyShown && /Requeued 1 message/.test(s.dlNote) ? s : null; }})()"
        )}),
        10_000,
    );
    assert_eq!(after["dlError"], "", "{after}");
    b.call(json!({"op": "screenshot", "path": shot_after}), 15_000);

    let errors = b.call(json!({"op": "errors"}), 5_000);
    assert_eq!(
        errors["exceptions"],
        json!([]),
        "uncaught exceptions on the page: {errors}"
    );
    b.quit();
    let back = (0..4)
        .map(|_| get(&s, "/consume?topic=orders").json()["id"].clone())
        .collect::<Vec<_>>();
    assert!(
        back.contains(&json!(id)),
        "the requeued message is consumable again: {back:?}"
    );
    for p in [&shot, &shot_after] {
        assert!(png_ok(p), "{} is a PNG", p.display());
    }
    println!(
        "screenshots: {} and {}",
        shot.display(),
        shot_after.display()
    );
}

/// The Exchanges panel shows each exchange with its type and its bindings.
#[test]
fn dashboard_shows_exchange_types_and_bindings() {
    let Some(chromium) = chromium_or_fail() else {
        return;
    };
    let s = Server::start(&[]);
    let declare = json!({"name": "events", "type": "topic", "durable": true});
    assert_eq!(post(&s, "/exchange/declare", declare).status, 200);
    let bind = json!({"exchange": "events", "queue": "audit", "binding_key": "order.*"});
    assert_eq!(post(&s, "/exchange/bind", bind).status, 200);

    let mut b = Browser::launch(&chromium, "cdp_driver.py");
    let url = format!("http://127.0.0.1:{}/#exchanges", s.http_port);
    b.call(
        json!({"op": "open", "url": url, "width": 1280, "height": 1000}),
        20_000,
    );
    let shown = b.call(
        json!({"op": "wait", "expr": r#"(() => {
            const a = [...document.querySelectorAll('#ex-list article.ex')]
                .find((x) => x.querySelector('h3').textContent === 'events');
            return a ? {
                badges: [...a.querySelectorAll('.badge')].map((x) => x.textContent),
                rows: [...a.querySelectorAll('tbody tr')]
                    .map((r) => [...r.cells].map((c) => c.textContent)),
            } : null;
        })()"#}),
        15_000,
    );
    b.quit();
    assert_eq!(
        shown["rows"],
        json!([["audit", "order.*", ""]]),
        "binding row: {shown}"
    );
    assert_eq!(
        shown["badges"],
        json!(["topic", "durable"]),
        "the exchange's type is shown (the page reads `type`; GET /exchanges must send it): {shown}; \
         GET /exchanges = {}",
        get(&s, "/exchanges").body
    );
}

/// A server whose listeners other hosts reach with no API key says so on the dashboard, in
/// a banner at the top of every page load, not only once in the startup log; a server on
/// loopback has nothing to warn about (`/overview` `warnings` is empty).
#[test]
fn dashboard_warns_in_a_banner_about_listeners_open_without_a_key() {
    let Some(chromium) = chromium_or_fail() else {
        return;
    };
    let local = Server::start(&[]);
    assert_eq!(get(&local, "/overview").json()["warnings"], json!([]));
    drop(local);
    let open = Server::start(&["--host", "0.0.0.0"]);
    let mut b = Browser::launch(&chromium, "cdp_driver.py");
    let url = format!("http://127.0.0.1:{}/", open.http_port);
    b.call(
        json!({"op": "open", "url": url, "width": 1280, "height": 1000}),
        20_000,
    );
    let banner = b.call(
        json!({"op": "wait", "expr": r#"(() => {
            const w = document.getElementById('warnings');
            return w && !w.hidden && w.getClientRects().length > 0 ? w.textContent : null;
        })()"#}),
        15_000,
    );
    b.quit();
    let text = banner.as_str().unwrap_or_default();
    assert!(
        text.contains("no security.api_key is set")
            && text.contains(&format!("tcp 0.0.0.0:{}", open.tcp_port)),
        "banner: {banner}"
    );
}

/// What the page shows of the two queues and the dead letter.
const PAGE_STATE: &str = r#"(() => {
  const cell = (sel) => {
    const e = document.querySelector(sel);
    return e ? { value: e.dataset.value, text: e.textContent.trim(), shown: e.getClientRects().length > 0 } : null;
  };
  const dlSec = document.getElementById('dead-letters');
  return {
    orders: cell('#q-body tr[data-queue="orders"] td[data-value]'),
    emails: cell('#q-body tr[data-queue="emails"] td[data-value]'),
    dl: cell('#dl-body tr[data-queue="orders"] td[data-value]'),
    dlEmptyShown: !document.getElementById('dl-empty').hidden,
    dlNote: dlSec.querySelector('.note').textContent,
    dlError: dlSec.querySelector('.err').textContent,
    live: document.getElementById('live').dataset.state || '',
  };
})()"#;

/// The Cluster panel of a clustered node (here a cluster of one, founded with
/// `cluster.bootstrap`) lists its members with the slot groups they lead and vote in, and
/// every slot group with its leader, term, commit and applied index.
#[test]
fn dashboard_shows_cluster_members_and_every_slot_group() {
    let Some(chromium) = chromium_or_fail() else {
        return;
    };
    let dir = TempDir::new("dashboard-cluster");
    let cfg = dir.path().join("boltq.toml");
    let raft = crate::support::free_port_below_ephemeral();
    std::fs::write(
        &cfg,
        format!("[server]\nshards = 1\n[cluster]\nenabled = true\nnode_id = \"solo\"\nraft_addr = \"127.0.0.1:{raft}\"\nbootstrap = true\n"),
    )
    .unwrap();
    let s = Server::start(&["--config", cfg.to_str().unwrap()]);
    let mut b = Browser::launch(&chromium, "cdp_driver.py");
    let url = format!("http://127.0.0.1:{}/#cluster", s.http_port);
    b.call(
        json!({"op": "open", "url": url, "width": 1280, "height": 1000}),
        20_000,
    );
    let shown = b.call(
        json!({"op": "wait", "expr": r#"(() => {
            const cells = (sel) => [...document.querySelectorAll(sel + ' tbody tr')]
                .map((r) => [...r.cells].map((c) => c.textContent));
            const groups = cells('#cl-groups');
            return groups.length === 256 ? { members: cells('#cl-members'), groups } : null;
        })()"#}),
        15_000,
    );
    b.quit();
    let addr = format!("127.0.0.1:{raft}");
    assert_eq!(
        shown["members"],
        json!([["solo", addr, "256", "256", "0"]]),
        "{shown}"
    );
    let groups = shown["groups"].as_array().unwrap();
    assert_eq!(groups[0][0], "0");
    assert_eq!(groups[255][0], "255");
    for g in groups {
        assert_eq!(g[1], "solo", "every group led by the only member: {g}");
        let (commit, applied) = (g[3].as_str().unwrap(), g[4].as_str().unwrap());
        assert!(
            commit.parse::<u64>().unwrap() >= 6,
            "past the founding index: {g}"
        );
        assert_eq!(commit, applied, "{g}");
    }
}
