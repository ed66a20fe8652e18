//! Browser test of the built-in dashboard: headless Chromium loads `/` from the real binary,
//! the page shows the queues and the dead letter the test created, and "Requeue" clicked on
//! the page moves the dead letter back to its queue (checked through the API). A second test
//! checks that the Exchanges panel shows each exchange's type and bindings.
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

mod support;

use boltq::client::{Client, ClientOptions, PublishOptions};
use boltq_io::testutil::TempDir;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};
use support::{get, post, Server};

/// How long Chromium may take to open its DevTools port.
const BROWSER_START_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one driver command beyond its own timeout (the driver enforces `timeout_ms`;
/// this catches a hung driver).
const DRIVER_MARGIN: Duration = Duration::from_secs(5);

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

    let mut b = Browser::launch(&chromium);
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
        if stats["DeadLetters"].get("orders_dead_letter").is_none() {
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

    let mut b = Browser::launch(&chromium);
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

/// `target/test-output`, created.
fn test_output_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("test-output");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn png_ok(p: &Path) -> bool {
    std::fs::read(p).is_ok_and(|b| b.len() > 1000 && b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

/// The Chromium binary; `None` (test skipped) only when `BOLTQ_SKIP_BROWSER=1`. Without
/// Chromium (or python3) the test fails: CI must run it.
fn chromium_or_fail() -> Option<PathBuf> {
    if std::env::var("BOLTQ_SKIP_BROWSER").as_deref() == Ok("1") {
        println!("dashboard browser test SKIPPED (BOLTQ_SKIP_BROWSER=1)");
        return None;
    }
    let chromium = match std::env::var_os("BOLTQ_CHROMIUM") {
        Some(p) => {
            let p = PathBuf::from(p);
            assert!(p.is_file(), "BOLTQ_CHROMIUM={} is not a file", p.display());
            Some(p)
        }
        None => find_on_path("chromium"),
    };
    let Some(chromium) = chromium.filter(|p| p.is_file()) else {
        panic!(
            "Chromium is not installed: this test needs the Debian `chromium` package \
             (/usr/bin/chromium). `.ci/run` installs it when missing \
             (`apt-get install -y chromium`); or set BOLTQ_CHROMIUM=<path to a Chromium \
             binary>, or BOLTQ_SKIP_BROWSER=1 to skip the browser test"
        );
    };
    assert!(
        find_on_path("python3").is_some(),
        "python3 is not on PATH: the browser test drives Chromium with \
         tests/browser/cdp_driver.py (standard library only)"
    );
    Some(chromium)
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Headless Chromium plus the CDP driver script. Dropping it kills both (Chromium's whole
/// process group: the browser, its zygote, renderers and GPU process), on success and on
/// panic alike.
struct Browser {
    chromium: Option<Child>,
    driver: Option<Child>,
    stdin: Option<ChildStdin>,
    answers: Receiver<String>,
    profile: TempDir,
}

impl Browser {
    fn launch(chromium: &Path) -> Browser {
        let profile = TempDir::new("chromium-profile");
        let user_data = profile.path().join("user-data");
        std::fs::create_dir_all(&user_data).unwrap();
        let log = std::fs::File::create(profile.path().join("chromium.log")).unwrap();
        let child = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--disable-default-apps",
                "--no-first-run",
                "--no-default-browser-check",
                "--hide-scrollbars",
                "--mute-audio",
                "--window-size=1280,1000",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", user_data.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            // Its own process group, so the guard can end every Chromium process at once.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", chromium.display()));
        let (tx, answers) = mpsc::channel();
        let mut b = Browser {
            chromium: Some(child),
            driver: None,
            stdin: None,
            answers,
            profile,
        };
        let port = b.devtools_port(&user_data);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/cdp_driver.py");
        let driver_log = std::fs::File::create(b.profile.path().join("driver.log")).unwrap();
        let mut driver = Command::new("python3")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .arg(&script)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(driver_log)
            .spawn()
            .expect("spawn python3 tests/browser/cdp_driver.py");
        b.stdin = driver.stdin.take();
        let stdout = driver.stdout.take().unwrap();
        b.driver = Some(driver);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        b
    }

    /// The port Chromium chose, from `<user-data-dir>/DevToolsActivePort` (first line).
    fn devtools_port(&mut self, user_data: &Path) -> u16 {
        let file = user_data.join("DevToolsActivePort");
        let deadline = Instant::now() + BROWSER_START_TIMEOUT;
        loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                if let Some(port) = text.lines().next().and_then(|l| l.trim().parse().ok()) {
                    return port;
                }
            }
            if let Some(status) = self.chromium.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "Chromium exited ({status}) before opening its DevTools port; log:\n{}",
                    self.logs()
                );
            }
            assert!(
                Instant::now() < deadline,
                "Chromium did not open its DevTools port in {BROWSER_START_TIMEOUT:?}; log:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn logs(&self) -> String {
        let read = |name: &str| {
            std::fs::read_to_string(self.profile.path().join(name)).unwrap_or_default()
        };
        format!(
            "--- chromium ---\n{}\n--- cdp_driver.py ---\n{}",
            read("chromium.log"),
            read("driver.log")
        )
    }

    /// Sends one command (with `timeout_ms`) and returns its value; panics on an error or
    /// when no answer comes in time.
    fn call(&mut self, mut cmd: Value, timeout_ms: u64) -> Value {
        cmd["timeout_ms"] = json!(timeout_ms);
        let line = format!("{cmd}\n");
        let stdin = self.stdin.as_mut().expect("driver running");
        if let Err(e) = stdin.write_all(line.as_bytes()).and_then(|_| stdin.flush()) {
            panic!("writing to the driver: {e}; logs:\n{}", self.logs());
        }
        let wait = Duration::from_millis(timeout_ms) + DRIVER_MARGIN;
        let answer = match self.answers.recv_timeout(wait) {
            Ok(a) => a,
            Err(e) => panic!(
                "no answer to {cmd} in {wait:?} ({e}); logs:\n{}",
                self.logs()
            ),
        };
        let v: Value = serde_json::from_str(&answer)
            .unwrap_or_else(|e| panic!("bad driver answer {answer:?}: {e}"));
        if v["ok"] != true {
            panic!(
                "browser command {cmd} failed: {}; logs:\n{}",
                v["error"],
                self.logs()
            );
        }
        v["value"].clone()
    }

    fn quit(&mut self) {
        self.call(json!({"op": "quit"}), 2_000);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if let Some(mut d) = self.driver.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
        if let Some(mut c) = self.chromium.take() {
            // SAFETY: kill(2) on the process group of our own child (spawned with
            // process_group(0), so its pgid is its pid), which has not been reaped yet.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}
