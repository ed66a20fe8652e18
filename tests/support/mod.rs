//! Starting the real `boltq` binary for end-to-end tests.
#![allow(dead_code)]

pub mod admin;
pub mod browser;
pub mod gateway;
pub mod netns;
pub mod pki;
pub mod stub;
pub mod webhook;

use boltq_io::testutil::TempDir;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_boltq");
/// How long a server may take to become ready (a cold CI machine is slow).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A port that was free a moment ago (the kernel may hand it out again). Only for listeners
/// that cannot take port 0: the server's TCP and HTTP ports can ([`Server::start`] passes 0
/// and reads the bound ports from the `ready:` line), the dedicated gateway listener cannot
/// (its port 0 means "on the HTTP listener").
pub fn free_port() -> u16 {
    // The kernel may hand the same ephemeral port out again as soon as the probe listener
    // closes; never give a test the same port twice (a server's TCP and HTTP port collided).
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut given = GIVEN.lock().unwrap();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// How [`Server::start_until`] tells that the server is ready. Either way the log has the
/// line the last shard writes once every listener accepts ([`READY_LOG_MARK`]), which names
/// the ports bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadyBy {
    /// Also `GET /readyz` over plain HTTP answers 200 (the default).
    PlainReadyz,
    /// The log line alone; for servers whose HTTP port is not plain HTTP (TLS).
    LogLine,
}

/// Start of the log line written when every shard serves:
/// `ready: 2 shards, tcp 127.0.0.1:40123, http 127.0.0.1:40124`.
pub const READY_LOG_MARK: &str = boltq::server::ready::READY_MARK;

pub use boltq::server::ready::ready_port;

/// `args` with a port 0 after `--tcp-port` / `--http-port` replaced by the port bound the
/// first time, so that a restarted server comes back where its clients look for it.
fn pin_ports(args: &[String], tcp_port: u16, http_port: u16) -> Vec<String> {
    let mut pinned = args.to_vec();
    for i in 1..pinned.len() {
        let port = match pinned[i - 1].trim_start_matches('-') {
            "tcp-port" => tcp_port,
            "http-port" => http_port,
            _ => continue,
        };
        if pinned[i] == "0" {
            pinned[i] = port.to_string();
        }
    }
    pinned
}

/// Where a server runs: the host its listeners bind (`BOLTQ_HOST`), and the network
/// namespace it is started in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub host: String,
    /// A process whose network namespace the server joins (`nsenter -t <pid> -n`); `None`:
    /// the test's own.
    pub netns_pid: Option<u32>,
    /// More environment for the server (after `BOLTQ_HOST`).
    pub env: Vec<(String, String)>,
}

impl Default for Place {
    fn default() -> Place {
        Place {
            host: "127.0.0.1".to_string(),
            netns_pid: None,
            env: Vec::new(),
        }
    }
}

pub struct Server {
    child: Option<Child>,
    args: Vec<String>,
    place: Place,
    pub tcp_port: u16,
    pub http_port: u16,
    data_dir: PathBuf,
    log_path: PathBuf,
    /// Kept for [`Server::restart`].
    ready_by: ReadyBy,
    _tmp: Option<TempDir>,
}

impl Server {
    /// Starts a server on ports the kernel picks (port 0) and a fresh data dir, with 2
    /// shards, and waits until `/readyz` answers 200.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_until(extra, ReadyBy::PlainReadyz)
    }

    /// [`Server::start`], waiting for readiness as `ready_by` says.
    pub fn start_until(extra: &[&str], ready_by: ReadyBy) -> Server {
        Server::start_placed(&Place::default(), extra, ready_by)
    }

    /// [`Server::start`] with more environment (a fault of `src/faults.rs`, say).
    #[allow(dead_code)]
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let place = Place {
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Place::default()
        };
        Server::start_placed(&place, extra, ReadyBy::PlainReadyz)
    }

    fn start_placed(place: &Place, extra: &[&str], ready_by: ReadyBy) -> Server {
        let tmp = TempDir::new("server");
        let data = tmp.path().join("data");
        let mut args = vec![
            "--data-dir",
            data.to_str().unwrap(),
            "--tcp-port",
            "0",
            "--http-port",
            "0",
            "--shards",
            "2",
        ];
        args.extend_from_slice(extra);
        let mut s = Server::start_at(place, &args, 0, 0, &data, ready_by);
        s._tmp = Some(tmp);
        s
    }

    /// Starts with exactly `args`; the caller says which ports (0: whatever the `ready:` line
    /// says) and data dir they imply.
    pub fn start_raw(args: &[&str], tcp_port: u16, http_port: u16, data_dir: &Path) -> Server {
        Server::start_raw_until(args, tcp_port, http_port, data_dir, ReadyBy::PlainReadyz)
    }

    /// [`Server::start_raw`], waiting for readiness as `ready_by` says.
    pub fn start_raw_until(
        args: &[&str],
        tcp_port: u16,
        http_port: u16,
        data_dir: &Path,
        ready_by: ReadyBy,
    ) -> Server {
        Server::start_at(
            &Place::default(),
            args,
            tcp_port,
            http_port,
            data_dir,
            ready_by,
        )
    }

    /// [`Server::start_raw_until`] at `place`.
    pub fn start_at(
        place: &Place,
        args: &[&str],
        tcp_port: u16,
        http_port: u16,
        data_dir: &Path,
        ready_by: ReadyBy,
    ) -> Server {
        let log_path = data_dir.with_extension("log");
        std::fs::create_dir_all(log_path.parent().unwrap()).unwrap();
        let log = std::fs::File::create(&log_path).unwrap();
        // nsenter joins the namespace and execs the server (no fork for a network
        // namespace), so the child's pid is the server's.
        let mut command = match place.netns_pid {
            None => Command::new(BIN),
            Some(pid) => {
                let mut c = Command::new("nsenter");
                c.args(["-t", &pid.to_string(), "-n", "--", BIN]);
                c
            }
        };
        let child = command
            .args(args)
            .env("BOLTQ_HOST", &place.host)
            .envs(place.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn boltq");
        let mut server = Server {
            child: Some(child),
            args: args.iter().map(|a| a.to_string()).collect(),
            place: place.clone(),
            tcp_port,
            http_port,
            data_dir: data_dir.to_path_buf(),
            log_path,
            ready_by,
            _tmp: None,
        };
        server.wait_ready(ready_by);
        server
    }

    /// Waits for the `ready:` line, takes the ports from it, then (for
    /// [`ReadyBy::PlainReadyz`]) waits for `/readyz`.
    fn wait_ready(&mut self, ready_by: ReadyBy) {
        let deadline = Instant::now() + READY_TIMEOUT;
        let (tcp, http) = loop {
            let log = self.log();
            if let (Some(tcp), Some(http)) = (ready_port(&log, "tcp"), ready_port(&log, "http")) {
                break (tcp, http);
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("server exited before ready ({status}); log:\n{log}");
            }
            if Instant::now() > deadline {
                self.not_ready();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for (asked, bound) in [(&mut self.tcp_port, tcp), (&mut self.http_port, http)] {
            assert!(
                *asked == 0 || *asked == bound,
                "asked for port {asked}, the server bound {bound}"
            );
            *asked = bound;
        }
        while ready_by == ReadyBy::PlainReadyz
            && !matches!(
                http_get_at(&self.place.host, self.http_port, "/readyz"),
                Ok((200, _))
            )
        {
            if Instant::now() > deadline {
                self.not_ready();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn not_ready(&self) -> ! {
        panic!(
            "server not ready in {READY_TIMEOUT:?}; log:\n{}\nthreads:\n{}",
            self.log(),
            thread_stacks(self.pid())
        )
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Stops with `signal` and starts again with the same arguments, data dir and ports;
    /// returns the new server and the old one's exit code.
    pub fn restart(mut self, signal: i32) -> (Server, Option<i32>) {
        let tmp = self._tmp.take();
        let (tcp, http, data) = (self.tcp_port, self.http_port, self.data_dir.clone());
        let args = pin_ports(&self.args, tcp, http);
        let (code, _) = self.stop_inner(signal);
        let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let mut next = Server::start_at(&self.place, &refs, tcp, http, &data, self.ready_by);
        next._tmp = tmp;
        (next, code)
    }

    /// Sends `signal` and waits (up to 20 s) for the exit; returns the exit code and log.
    pub fn stop(mut self, signal: i32) -> (Option<i32>, String) {
        self.stop_inner(signal)
    }

    fn stop_inner(&mut self, signal: i32) -> (Option<i32>, String) {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        unsafe { libc::kill(child.id() as i32, signal) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return (status.code(), self.log());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return (None, self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs the binary to completion (bounded to 30 s); returns exit code and stderr+stdout.
pub fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    run_to_exit_env(args, &[])
}

pub fn run_to_exit_env(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// A minimal HTTP/1.1 GET; returns status and body.
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    http_get_at("127.0.0.1", port, path)
}

/// [`http_get`] to `host`.
pub fn http_get_at(host: &str, port: u16, path: &str) -> std::io::Result<(u16, String)> {
    http_get_keyed(host, port, path, None)
}

/// [`http_get_at`] with the admin API key (`X-API-Key`) when given.
pub fn http_get_keyed(
    host: &str,
    port: u16,
    path: &str,
    api_key: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect((host, port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let key = api_key
        .map(|k| format!("X-API-Key: {k}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{key}Connection: close\r\n\r\n"
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad response: {resp:?}")))?;
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Ok((status, body))
}

/// A response as a test sees it.
pub struct HttpResponse {
    pub status: u16,
    /// Header lines, lower-cased names.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request with `Connection: close`; returns status, headers and body.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    HttpResponse {
        status,
        headers,
        body: body.to_string(),
    }
}

/// Lowest port of the kernel's ephemeral range (the source ports of outgoing connections).
fn ephemeral_port_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// A loopback port that was free a moment ago and lies *below* the kernel's ephemeral range.
///
/// For tests that restart a server on the same ports: [`free_port`] hands out ephemeral
/// ports, and while the server is down any outgoing connection on the machine (this test's
/// or another process's) may take that port as its source port, so the restarted server
/// cannot bind it ("Address already in use"). No connection picks a source port outside the
/// ephemeral range.
pub fn free_port_below_ephemeral() -> u16 {
    free_ports_below_ephemeral(1)[0]
}

/// `n` consecutive free ports below the ephemeral range (e.g. TCP port p and HTTP port
/// p − 1); see [`free_port_below_ephemeral`].
static GIVEN_BELOW_EPHEMERAL: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

pub fn free_ports_below_ephemeral(n: u16) -> Vec<u16> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let high = ephemeral_port_low().saturating_sub(n).max(10_000 + n);
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        ^ (u64::from(std::process::id()) << 20)
        ^ CALLS
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for _ in 0..10_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let first = 10_000 + (x % u64::from(high - 10_000)) as u16;
        let ports: Vec<u16> = (first..first + n).collect();
        // Never the same port twice in one test process: parallel tests pick before they
        // bind, and a probe cannot see a port another test picked and has not bound yet.
        let mut given = GIVEN_BELOW_EPHEMERAL.lock().unwrap();
        if ports.iter().any(|p| given.contains(p)) {
            continue;
        }
        let held: Vec<_> = ports
            .iter()
            .map_while(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).ok())
            .collect();
        if held.len() == ports.len() {
            given.extend(&ports);
            return ports;
        }
    }
    panic!("no {n} free consecutive ports below the ephemeral range");
}

impl Server {
    /// [`Server::start`] on ports below the ephemeral range ([`free_port_below_ephemeral`]),
    /// for tests that restart the server many times on the same ports.
    pub fn start_restartable(extra: &[&str]) -> Server {
        let tmp = TempDir::new("server");
        let ports = free_ports_below_ephemeral(2);
        let (tcp, http) = (ports[1], ports[0]);
        let data = tmp.path().join("data");
        let (tcp_arg, http_arg) = (tcp.to_string(), http.to_string());
        let mut args = vec![
            "--data-dir",
            data.to_str().unwrap(),
            "--tcp-port",
            &tcp_arg,
            "--http-port",
            &http_arg,
            "--shards",
            "2",
        ];
        args.extend_from_slice(extra);
        let mut s = Server::start_raw(&args, tcp, http, &data);
        s._tmp = Some(tmp);
        s
    }
}

/// Waits (up to 10 s) until every port can be bound on loopback again.
pub fn wait_until_bindable(ports: &[u16]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for &port in ports {
        while std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "port {port} still in use 10 s after the server exited"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Server {
    /// [`Server::restart`], starting the new process only once the old one's ports can be
    /// bound again. After a SIGKILL the listening sockets outlive the reaped process by a
    /// few milliseconds (io_uring releases the files its requests hold asynchronously), and
    /// a server started in that window fails with "Address already in use".
    pub fn restart_when_ports_free(mut self, signal: i32) -> (Server, Option<i32>) {
        let tmp = self._tmp.take();
        let (tcp, http, data) = (self.tcp_port, self.http_port, self.data_dir.clone());
        let args = pin_ports(&self.args, tcp, http);
        let ready_by = self.ready_by;
        let (code, _) = self.stop_inner(signal);
        wait_until_bindable(&[tcp, http]);
        let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let mut next = Server::start_at(&self.place, &refs, tcp, http, &data, ready_by);
        next._tmp = tmp;
        (next, code)
    }
}

/// The arguments of a server started from config file `cfg` with data dir `data` on fixed
/// ports (for tests that restart it where its clients look for it).
pub fn config_args(cfg: &Path, data: &Path, tcp: u16, http: u16) -> Vec<String> {
    [
        "--config",
        cfg.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--tcp-port",
        &tcp.to_string(),
        "--http-port",
        &http.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// Whether an open connection to an HTTP listener answers a keep-alive `GET path` with 200
/// (a connection past a listener's cap is closed without an answer).
pub fn answers_get(c: &mut TcpStream, path: &str) -> bool {
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n");
    if c.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    c.read_exact(&mut head).is_ok() && &head == b"HTTP/1.1 200"
}

/// `boltq_connections_refused_total{listener="<listener>"}` in `/metrics` text.
pub fn refused_connections(metrics: &str, listener: &str) -> u64 {
    let series = format!("boltq_connections_refused_total{{listener=\"{listener}\"}}");
    metrics
        .lines()
        .find(|l| l.starts_with(&series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics:\n{metrics}"))
}

/// POST of a JSON body to the server's HTTP port.
pub fn post(s: &Server, path: &str, body: serde_json::Value) -> HttpResponse {
    http(
        s.http_port,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

/// GET on the server's HTTP port.
pub fn get(s: &Server, path: &str) -> HttpResponse {
    http(s.http_port, "GET", path, &[], b"")
}

/// Every thread's stack of process `pid`, by gdb when the machine has it: what a server
/// that never became ready was doing, for the report of a failure that is rare.
fn thread_stacks(pid: u32) -> String {
    let gdb = Command::new("gdb")
        .args([
            "-batch",
            "-p",
            &pid.to_string(),
            "-ex",
            "thread apply all bt",
        ])
        .stdin(Stdio::null())
        .output();
    match gdb {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => format!("(no stacks: gdb: {e})"),
    }
}
