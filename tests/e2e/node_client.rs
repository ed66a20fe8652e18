//! The Node.js client (`clients/node`) against the real binary: `node --test` runs its
//! tests (the frame codec alone, then the v1 SDK behaviours through the client: delayed and
//! TTL publishes in milliseconds, the prefetch limit, durable live pushes and catch-up,
//! five concurrent polling consumers exactly once, 1,000 pipelined publishes, dead letters,
//! reconnect with resubscribe, AUTH, TLS against a second server with a throwaway CA) with
//! the servers' ports, key and CA file in its environment.
//!
//! Needs `node` (18 or later) on the PATH; `.ci/run` installs Debian's `nodejs` when it is
//! missing. Without it the test fails rather than skips.

use crate::support::pki::Pki;
use crate::support::Server;
use boltq_io::testutil::TempDir;
use std::process::Command;

const KEY: &str = "node-client-test-key";

#[test]
fn the_node_client_passes_its_tests_against_the_server() {
    let dir = TempDir::new("node-client");
    let config = dir.path().join("boltq.toml");
    std::fs::write(
        &config,
        format!(
            "[security]\napi_key = \"{KEY}\"\n[queue]\nmax_retry = 1\nretry_backoff_base_ms = 0\n"
        ),
    )
    .unwrap();
    let s = Server::start(&["--config", config.to_str().unwrap()]);
    // A second server with TLS on its listeners, for the client's `tls` option.
    let pki = Pki::new("node-tls");
    let (cert, key) = pki.server_cert();
    let tls_config = dir.path().join("tls.toml");
    std::fs::write(
        &tls_config,
        format!(
            "[security]\napi_key = \"{KEY}\"\n[server.tls]\nenabled = true\ncert_file = {:?}\nkey_file = {:?}\n",
            cert.to_str().unwrap(),
            key.to_str().unwrap()
        ),
    )
    .unwrap();
    let tls = Server::start_until(
        &["--config", tls_config.to_str().unwrap()],
        crate::support::ReadyBy::LogLine,
    );
    let client_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/node");
    let out = Command::new("node")
        // A failed test may leave a socket open, which would keep its process alive:
        // force the exit, and bound every test.
        .args([
            "--test",
            "--test-force-exit",
            "--test-timeout=60000",
            "--test-reporter=spec",
            "test/",
        ])
        .current_dir(&client_dir)
        .env("BOLTQ_TEST_TCP_PORT", s.tcp_port.to_string())
        .env("BOLTQ_TEST_API_KEY", KEY)
        .env("BOLTQ_TEST_TLS_PORT", tls.tcp_port.to_string())
        .env("BOLTQ_TEST_CA_FILE", pki.ca_file())
        .output()
        .unwrap_or_else(|e| panic!("cannot run node (install Debian's nodejs): {e}"));
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "node --test failed:\n{report}\nserver log:\n{}",
        s.log()
    );
    // Every test ran: none was skipped for want of the server.
    assert!(report.contains("skipped 0"), "{report}");
    assert!(report.contains("fail 0"), "{report}");
}
