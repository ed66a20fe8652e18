//! Headless Chromium for the browser tests: launch it with a CDP driver script from
//! `tests/browser/`, send commands as JSON lines, read answers with a timeout.

use boltq_io::testutil::TempDir;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// How long Chromium may take to open its DevTools port.
const BROWSER_START_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one driver command beyond its own timeout (the driver enforces `timeout_ms`;
/// this catches a hung driver).
const DRIVER_MARGIN: Duration = Duration::from_secs(5);

/// `target/test-output`, created.
pub fn test_output_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("test-output");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn png_ok(p: &Path) -> bool {
    std::fs::read(p).is_ok_and(|b| b.len() > 1000 && b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

/// The Chromium binary; `None` (test skipped) only when `BOLTQ_SKIP_BROWSER=1`. Without
/// Chromium (or python3) the test fails: CI must run it.
pub fn chromium_or_fail() -> Option<PathBuf> {
    if std::env::var("BOLTQ_SKIP_BROWSER").as_deref() == Ok("1") {
        println!("browser test SKIPPED (BOLTQ_SKIP_BROWSER=1)");
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
         tests/browser/*.py (standard library only)"
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
pub struct Browser {
    chromium: Option<Child>,
    driver: Option<Child>,
    stdin: Option<ChildStdin>,
    answers: Receiver<String>,
    profile: TempDir,
}

impl Browser {
    /// Starts Chromium and `tests/browser/<driver>` (a CDP driver speaking JSON lines).
    pub fn launch(chromium: &Path, driver: &str) -> Browser {
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
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/browser")
            .join(driver);
        let driver_log = std::fs::File::create(b.profile.path().join("driver.log")).unwrap();
        let mut driver = Command::new("python3")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .arg(&script)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(driver_log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn python3 tests/browser/{driver}: {e}"));
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

    pub fn logs(&self) -> String {
        let read = |name: &str| {
            std::fs::read_to_string(self.profile.path().join(name)).unwrap_or_default()
        };
        format!(
            "--- chromium ---\n{}\n--- driver ---\n{}",
            read("chromium.log"),
            read("driver.log")
        )
    }

    /// Sends one command (with `timeout_ms`) and returns its value; panics on an error or
    /// when no answer comes in time.
    pub fn call(&mut self, mut cmd: Value, timeout_ms: u64) -> Value {
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

    /// [`Browser::call`] in the tab named `tab` (opened on first use).
    pub fn tab(&mut self, tab: &str, mut cmd: Value, timeout_ms: u64) -> Value {
        cmd["tab"] = json!(tab);
        self.call(cmd, timeout_ms)
    }

    pub fn quit(&mut self) {
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
            // Chromium's whole process group (spawned with process_group(0), so its pgid is
            // its pid): the browser, its zygote, renderers and GPU process.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", c.id())])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
