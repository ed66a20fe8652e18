//! Durable pub/sub across restarts, end to end: the event sequences that lost acknowledged
//! topic publishes (issue 13, failure 1) driven against the real binary.

use crate::queue_plane::{client, raw, recv, send};
use crate::support::Server;
use boltq::queue::protocol::frame::op;
use std::time::{Duration, Instant};

fn subscribe(s: &Server, durable: bool) -> std::net::TcpStream {
    let mut c = raw(s);
    let body = format!(r#"{{"topic":"news","id":"reader","durable":{durable}}}"#);
    send(&mut c, op::CONSUME, &body);
    assert_eq!(recv(&mut c).unwrap().1, r#"{"status":"subscribed"}"#);
    c
}

/// A work queue in the same slot as topic `news`, so its publishes count towards that
/// slot's snapshot threshold.
fn queue_in_slot_of_news() -> String {
    let slot = boltq::queue::server::dispatch::slot_of_name("news");
    (0..)
        .map(|i| format!("fill-{i}"))
        .find(|q| boltq::queue::server::dispatch::slot_of_name(q) == slot)
        .unwrap()
}

fn snapshot_segments(s: &Server) -> usize {
    let slot = boltq::queue::server::dispatch::slot_of_name("news");
    let dir = s.data_dir().join(format!("logs/queue/slot-{slot:03}/snap"));
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// A durable registration, re-subscribed without `durable` by another connection while a
/// snapshot is taken, then offline: the five publishes acknowledged while it is offline are
/// in its backlog after SIGTERM and after kill -9, and a durable re-subscribe gets them.
#[test]
fn publishes_to_an_offline_durable_registration_survive_a_snapshot_taken_while_it_was_live_elsewhere(
) {
    let cfg = boltq_io::testutil::TempDir::new("dcfg");
    let path = cfg.path().join("boltq.toml");
    std::fs::write(&path, "[storage]\ncompaction_threshold = 1\n").unwrap();
    let mut s = Server::start(&["--config", path.to_str().unwrap()]);
    drop(subscribe(&s, true));
    std::thread::sleep(Duration::from_millis(200));
    let b = subscribe(&s, false);
    // More than the 1 MiB threshold of commands in the slot, while B holds the registration.
    let fill = queue_in_slot_of_news();
    let mut p = client(&s);
    let payload = format!("\"{}\"", "x".repeat(1000));
    let deadline = Instant::now() + Duration::from_secs(30);
    while snapshot_segments(&s) == 0 {
        assert!(Instant::now() < deadline, "no snapshot was taken");
        for _ in 0..200 {
            p.publish(&fill, &payload, None, Default::default())
                .unwrap();
        }
    }
    drop(b);
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..5 {
        p.publish_topic("news", &i.to_string(), None, 0).unwrap();
    }
    drop(p);
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        let (next, _) = s.restart(signal);
        s = next;
        let stats = client(&s).stats().unwrap();
        assert_eq!(
            stats["Queues"]["news:reader"], 5,
            "backlog after signal {signal}: {stats}"
        );
    }
    let mut sub = subscribe(&s, true);
    for i in 0..5 {
        let (_, body) = recv(&mut sub).expect("catch-up");
        assert!(body.contains(&format!(r#""payload":{i}"#)), "{body}");
    }
}
