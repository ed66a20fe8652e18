//! The planes share the process and nothing else: the queue plane answers the same script
//! identically with the messaging plane off and on, and with messaging off nothing of it
//! appears on disk.

use crate::support;

use crate::support::Server;
use boltq::client::{Client, ClientOptions, PublishOptions};
use boltq_io::testutil::TempDir;

/// Runs a fixed queue-plane script and returns every answer with server-chosen values
/// (ids, timestamps) blanked, so two servers can be compared.
fn script(s: &Server) -> Vec<String> {
    let mut c = Client::connect(
        &format!("127.0.0.1:{}", s.tcp_port),
        ClientOptions::default(),
    )
    .expect("connect");
    let mut out = Vec::new();
    for i in 0..20 {
        let opts = PublishOptions {
            priority: i % 4,
            ..PublishOptions::default()
        };
        let r = c.publish("jobs", &format!("{{\"n\":{i}}}"), None, opts);
        out.push(format!("publish {}", r.is_ok()));
    }
    let mut first_id = None;
    for _ in 0..12 {
        match c.consume("jobs").expect("consume") {
            Some(m) => {
                out.push(format!(
                    "consume {} {} {}",
                    m.topic, m.payload_json, m.retry
                ));
                first_id.get_or_insert(m.id.clone());
                out.push(format!("ack {:?}", c.ack(&m.id).map_err(|e| e.to_string())));
            }
            None => out.push("empty".into()),
        }
    }
    let id = first_id.expect("something was consumed");
    let twice = c.ack(&id).map_err(|e| e.to_string().replace(&id, "<id>"));
    out.push(format!("ack twice {twice:?}"));
    out.push(format!(
        "nack unknown {:?}",
        c.nack("nope").map_err(|e| e.to_string())
    ));
    out.push(format!("ping {:?}", c.ping().map_err(|e| e.to_string())));
    out.push(format!(
        "exchange {:?}",
        c.exchange_declare("ex", "topic", true)
            .map_err(|e| e.to_string())
    ));
    out.push(format!(
        "bind {:?}",
        c.bind_queue("ex", "routed", "a.*", None, false)
            .map_err(|e| e.to_string())
    ));
    out.push(format!(
        "publish_exchange {:?}",
        c.publish_exchange("ex", "a.b", "{}", None, 0)
            .map(|_| ())
            .map_err(|e| e.to_string())
    ));
    let stats = c.stats().expect("stats");
    out.push(format!(
        "stats {}",
        serde_json::to_string(&stats["Queues"]).unwrap()
    ));
    out
}

fn messaging_config(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("boltq.toml");
    std::fs::write(
        &path,
        "[messaging.stream]\nenabled = true\n[messaging.identity]\nenabled = true\n\
         keys = [{ id = \"k\", secret = \"0123456789abcdef0123456789abcdef\" }]\n\
         [messaging.gateway]\nenabled = true\n",
    )
    .unwrap();
    path
}

#[test]
fn the_queue_plane_answers_identically_with_messaging_on_and_off() {
    let off = Server::start(&[]);
    let off_answers = script(&off);
    let tmp = TempDir::new("planes");
    let cfg = messaging_config(tmp.path());
    let on = Server::start(&["--config", cfg.to_str().unwrap()]);
    let on_answers = script(&on);
    assert_eq!(off_answers, on_answers);
    assert!(off_answers.iter().any(|a| a.starts_with("consume jobs")));
    // The messaging plane did start on the second server (its gateway answers 401).
    assert_eq!(support::http_get(on.http_port, "/ws").unwrap().0, 401);
    assert_eq!(support::http_get(off.http_port, "/ws").unwrap().0, 404);
}

#[test]
fn with_messaging_off_nothing_of_it_is_written() {
    let s = Server::start(&[]);
    script(&s);
    let logs = s.data_dir().join("logs");
    for dir in ["streams", "cursors"] {
        assert!(!logs.join(dir).exists(), "{dir} created with messaging off");
    }
}
