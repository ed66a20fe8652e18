//! Listeners that other hosts can reach while no key guards them (issue 17, safe
//! defaults): a warning at startup for the queue plane's listeners, and a refusal to start
//! for the messaging plane, whose stream commands (TCP `0x1D`–`0x20`) read every
//! conversation and move any device's cursor.
//!
//! "Reachable from other hosts" means the address bound is not a loopback address
//! (`0.0.0.0`, the default `server.host`, is every interface).

use crate::config::Config;
use std::net::{SocketAddr, ToSocketAddrs};

/// Whether `host` (an IP literal or a name) resolves to a loopback address. The first
/// address counts, as it is the one the listeners bind; a name that does not resolve is
/// not loopback (binding it fails anyway, with its own error).
pub fn is_loopback_host(host: &str) -> bool {
    (host, 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .is_some_and(|a| a.ip().is_loopback())
}

/// Refuses a start with the messaging plane on, no `security.api_key`, and the TCP listener
/// reachable from other hosts: the stream commands would then answer anyone. Returns the
/// one-line error to print (exit code 2, like any configuration error).
pub fn refuse_open_stream_commands(config: &Config) -> Result<(), String> {
    refuse_open_stream_commands_on(config, is_loopback_host(&config.server.host))
}

fn refuse_open_stream_commands_on(config: &Config, loopback: bool) -> Result<(), String> {
    if !config.messaging.stream.enabled || !config.security.api_key.is_empty() || loopback {
        return Ok(());
    }
    Err(format!(
        "config error: security.api_key: required when messaging.stream.enabled = true and \
         the TCP listener binds a non-loopback address (server.host = {:?}): the stream \
         commands would let anyone who reaches port {} read every conversation and move any \
         device's cursor; set security.api_key (or BOLTQ_API_KEY), or bind server.host to \
         127.0.0.1",
        config.server.host, config.server.tcp_port
    ))
}

/// The warnings for listeners bound where other hosts reach them while nothing guards
/// them: with no API key, the TCP and admin HTTP listeners (every queue can be read,
/// purged and published to); with `messaging.gateway.demo`, the admin listener (its token
/// route mints a token for any user, key or not). `listeners` are (name, address bound).
/// The gateway's own listener is not named: every device authenticates there with a token
/// whether or not an API key is set.
pub fn open_listener_warnings(config: &Config, listeners: &[(&str, SocketAddr)]) -> Vec<String> {
    let exposed = |name: &str| {
        listeners
            .iter()
            .find(|(n, a)| *n == name && !a.ip().is_loopback())
            .map(|(n, a)| format!("{n} {a}"))
    };
    let mut out = Vec::new();
    if config.security.api_key.is_empty() {
        let open: Vec<String> = ["tcp", "http"].iter().filter_map(|n| exposed(n)).collect();
        if !open.is_empty() {
            out.push(format!(
                "no security.api_key is set and these listeners accept connections from other \
                 hosts: {}; anyone who reaches them can publish, consume, purge and read every \
                 queue. Set security.api_key (or BOLTQ_API_KEY), or bind server.host to \
                 127.0.0.1",
                open.join(", ")
            ));
        }
    }
    if config.messaging.gateway.demo {
        if let Some(http) = exposed("http") {
            out.push(format!(
                "messaging.gateway.demo = true on a listener other hosts reach ({http}): \
                 anyone can mint a token for any user at /demo/token"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_hosts() {
        assert!(is_loopback_host("127.0.0.1"));
        assert!(is_loopback_host("127.0.0.2"));
        assert!(is_loopback_host("::1"));
        assert!(!is_loopback_host("0.0.0.0"));
        assert!(!is_loopback_host("::"));
        assert!(!is_loopback_host("10.1.2.3"));
        assert!(!is_loopback_host("no-such-host.invalid"));
    }

    #[test]
    fn the_messaging_plane_needs_a_key_off_loopback() {
        let mut c = Config::default();
        assert!(
            refuse_open_stream_commands_on(&c, false).is_ok(),
            "plane off"
        );
        c.messaging.stream.enabled = true;
        let err = refuse_open_stream_commands_on(&c, false).unwrap_err();
        assert!(err.starts_with("config error: security.api_key: "), "{err}");
        assert!(err.contains("\"0.0.0.0\""), "{err}");
        assert!(!err.contains('\n'));
        assert!(refuse_open_stream_commands_on(&c, true).is_ok(), "loopback");
        c.security.api_key = "k".into();
        assert!(refuse_open_stream_commands_on(&c, false).is_ok(), "a key");
    }

    #[test]
    fn warnings_name_the_open_listeners() {
        let mut c = Config::default();
        let local = [
            ("tcp", addr("127.0.0.1:9091")),
            ("http", addr("127.0.0.1:9090")),
        ];
        assert!(open_listener_warnings(&c, &local).is_empty());
        let open = [
            ("tcp", addr("0.0.0.0:9091")),
            ("http", addr("127.0.0.1:9090")),
        ];
        let w = open_listener_warnings(&c, &open);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("tcp 0.0.0.0:9091"), "{}", w[0]);
        assert!(!w[0].contains("http"), "{}", w[0]);
        c.security.api_key = "k".into();
        assert!(open_listener_warnings(&c, &open).is_empty());
        c.messaging.gateway.demo = true;
        let both_open = [("tcp", addr("[::]:1")), ("http", addr("0.0.0.0:2"))];
        let w = open_listener_warnings(&c, &both_open);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("/demo/token"), "{}", w[0]);
    }
}
