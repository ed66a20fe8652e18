//! What the smoke tests of `boltq-bench` share: the server binary, free ports, waiting for
//! a started server and the ports it bound, and a throwaway CA for the TLS runs.
//!
//! Finding the server binary: `cargo test -p boltq-tools` builds the `boltq` *library* (a
//! dependency of this crate) but not the `boltq` *binary*, and `CARGO_BIN_EXE_boltq` is only
//! given to the root package's own tests. So the first call runs `cargo build -p boltq --bin
//! boltq` with this test's profile and target directory (a no-op when it is up to date; cargo
//! releases its build lock before it runs tests) and uses `target/<profile>/boltq`. Setting
//! `BOLTQ_SERVER_BIN` skips the build and uses that binary instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub const BENCH: &str = env!("CARGO_BIN_EXE_boltq-bench");

pub fn server_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("BOLTQ_SERVER_BIN") {
            return PathBuf::from(p);
        }
        // The bench binary sits in target/<profile>/; the server binary is built next to it.
        let profile_dir = Path::new(BENCH).parent().expect("bench binary directory");
        let target_dir = profile_dir.parent().expect("target directory");
        let profile = profile_dir.file_name().unwrap().to_str().unwrap();
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--quiet", "-p", "boltq", "--bin", "boltq"])
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        match profile {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        let status = cmd
            .status()
            .expect("run cargo build for the boltq server binary");
        assert!(status.success(), "cargo build -p boltq --bin boltq failed");
        let bin = profile_dir.join("boltq");
        assert!(bin.exists(), "{} missing after the build", bin.display());
        bin
    })
}

/// Waits until the server at `addr` answers PING over its TCP port (with `tls` when its
/// listener speaks TLS); panics after 30 s.
pub fn wait_until_pings(addr: &str, tls: Option<boltq::client::ClientTls>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let options = boltq::client::ClientOptions {
            timeout_ms: 1000,
            tls: tls.clone(),
            ..Default::default()
        };
        if let Ok(mut c) = boltq::client::Client::connect(addr, options) {
            if c.ping().is_ok() {
                return;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("server at {addr} not ready in 30 s");
}

/// The TCP and HTTP ports of a server started with port 0, from the `ready:` line of its log
/// file at `log`; panics after 30 s.
pub fn wait_for_ready_ports(log: &Path) -> (u16, u16) {
    use boltq::server::ready::ready_port;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let (Some(tcp), Some(http)) = (ready_port(&text, "tcp"), ready_port(&text, "http")) {
            return (tcp, http);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "server not ready in 30 s: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A port that was free a moment ago, for listeners the tests open themselves or that cannot
/// take port 0 (the gateway's own listener: there 0 means "on the HTTP listener").
pub fn free_port() -> u16 {
    // Never the same port twice in this process: the kernel may hand an ephemeral port out
    // again as soon as the probe closes, and a server's two ports must differ.
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

/// A throwaway CA and a server certificate for `localhost` and `127.0.0.1` it signed, as PEM
/// files in a temporary directory (`ca.pem`, `server.pem`, `server.key`).
pub struct Pki {
    pub dir: boltq_io::testutil::TempDir,
}

impl Pki {
    pub fn new() -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let dir = boltq_io::testutil::TempDir::new("bench-pki");
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("server.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
        Pki { dir }
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// `cert_file = …` and `key_file = …` lines of a TLS section of the server's config.
    pub fn config_lines(&self) -> String {
        format!(
            "cert_file = {:?}\nkey_file = {:?}\n",
            self.dir.path().join("server.pem"),
            self.dir.path().join("server.key")
        )
    }
}

/// A `boltq` process started by [`start_server`], killed when dropped.
#[allow(dead_code)] // for the packaging and README tests; the bench tests start theirs with TLS
pub struct StartedServer {
    child: std::process::Child,
    pub tcp: u16,
    pub http: u16,
}

impl Drop for StartedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `bin` on loopback, ports picked by the kernel, its data and log under `dir`, with
/// `extra` arguments; returns once it answers PING.
#[allow(dead_code)] // as `StartedServer`
pub fn start_server(bin: &Path, dir: &Path, extra: &[&std::ffi::OsStr]) -> StartedServer {
    let log_path = dir.join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let child = Command::new(bin)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--host", "127.0.0.1", "--tcp-port", "0", "--http-port", "0"])
        .args(extra)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    let mut server = StartedServer {
        child,
        tcp: 0,
        http: 0,
    };
    (server.tcp, server.http) = wait_for_ready_ports(&log_path);
    wait_until_pings(&format!("127.0.0.1:{}", server.tcp), None);
    server
}
