//! The `ready: ` log line: written by the last shard to serve, it names the addresses bound,
//! so that whoever started the server with port 0 (tests, tools) learns the ports the kernel
//! chose. Its writer and its reader live here together.

use super::Plan;
use std::net::SocketAddr;

/// Start of the line, after the logger's timestamp, level and thread.
pub const READY_MARK: &str = "ready: ";

/// `ready: 2 shards, tcp 127.0.0.1:40123, http 127.0.0.1:40124[, gateway …]`.
pub fn ready_line(plan: &Plan) -> String {
    let gateway = plan.gateway_listener.as_ref().map(|(l, _)| l);
    let listeners = [
        ("tcp", Some(&plan.tcp)),
        ("http", Some(&plan.http)),
        ("gateway", gateway),
    ];
    let bound: Vec<(&str, SocketAddr)> = listeners
        .into_iter()
        .filter_map(|(what, l)| Some((what, l?.local_addr().ok()?)))
        .collect();
    format_line(plan.state.shard_count, &bound)
}

fn format_line(shard_count: usize, bound: &[(&str, SocketAddr)]) -> String {
    let mut line = format!("{READY_MARK}{shard_count} shards");
    for (what, addr) in bound {
        line.push_str(&format!(", {what} {addr}"));
    }
    line
}

/// The port of `listener` (`tcp`, `http`, `gateway`) in the first ready line of `log` (a
/// server's whole log output, or one line); `None` until the server has written it.
pub fn ready_port(log: &str, listener: &str) -> Option<u16> {
    let line = log
        .lines()
        .find_map(|l| l.split_once(READY_MARK).map(|(_, rest)| rest))?;
    line.split(", ").find_map(|part| {
        let addr = part.strip_prefix(listener)?.strip_prefix(' ')?;
        addr.rsplit_once(':')?.1.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_every_bound_listener_and_reads_back() {
        let tcp: SocketAddr = "127.0.0.1:40123".parse().unwrap();
        let http: SocketAddr = "[::1]:40124".parse().unwrap();
        let line = format_line(2, &[("tcp", tcp), ("http", http)]);
        assert_eq!(
            line,
            "ready: 2 shards, tcp 127.0.0.1:40123, http [::1]:40124"
        );
        let log = format!("2026-12-05T02:15:03.123Z INFO  [main] listening\n… [shard-1] {line}\n");
        assert_eq!(ready_port(&log, "tcp"), Some(40123));
        assert_eq!(ready_port(&log, "http"), Some(40124));
        assert_eq!(ready_port(&log, "gateway"), None);
        assert_eq!(ready_port("… listening tcp on 127.0.0.1:1\n", "tcp"), None);
        assert_eq!(format_line(1, &[]), "ready: 1 shards");
    }
}
