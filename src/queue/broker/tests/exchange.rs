//! The exchange table and routing (spec §2.5.6, §3.10).

use super::gen::Rng;
use crate::queue::broker::exchange::*;
use std::collections::BTreeMap;

fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn none() -> BTreeMap<String, String> {
    BTreeMap::new()
}

#[test]
fn declare_is_idempotent_conflicting_type_and_unknown_type_are_refused() {
    let mut x = Exchanges::new();
    assert_eq!(x.declare("logs", "topic", true), Ok(()));
    assert_eq!(x.declare("logs", "topic", false), Ok(()));
    assert!(
        x.get("logs").unwrap().durable,
        "durable flag is not updated on redeclare"
    );
    assert_eq!(
        x.declare("logs", "fanout", true),
        Err("exchange \"logs\" already exists with type topic".into())
    );
    assert_eq!(
        x.declare("x", "Direct", true),
        Err("unknown exchange type \"Direct\" (want direct, fanout, topic or headers)".into())
    );
    assert_eq!(x.declare("d", "", false), Ok(()));
    assert_eq!(
        x.get("d").unwrap().kind,
        ExchangeType::Direct,
        "empty type is direct (v1 default)"
    );
    assert_eq!(
        x.declare("", "direct", true),
        Ok(()),
        "the default exchange exists"
    );
    assert_eq!(
        x.declare("", "fanout", true),
        Err("exchange \"\" already exists with type direct".into())
    );
}

#[test]
fn delete_unknown_and_default_exchange_are_refused() {
    let mut x = Exchanges::new();
    assert_eq!(
        x.delete(""),
        Err("cannot delete the default exchange".into())
    );
    assert_eq!(x.delete("nope"), Err("exchange \"nope\" not found".into()));
    x.declare("e", "fanout", false).unwrap();
    x.bind("e", "q", "", &none(), false).unwrap();
    assert_eq!(x.delete("e"), Ok(()));
    assert_eq!(
        x.route("e", "k", &none()),
        Err("exchange \"e\" not found".into())
    );
    assert!(x.get("").is_some());
}

#[test]
fn bind_and_unbind_need_the_exchange_and_unbind_removes_the_first_equal_binding() {
    let mut x = Exchanges::new();
    assert_eq!(
        x.bind("nope", "q", "k", &none(), false),
        Err("exchange \"nope\" not found".into())
    );
    assert_eq!(
        x.unbind("nope", "q", "k"),
        Err("exchange \"nope\" not found".into())
    );
    x.declare("d", "direct", false).unwrap();
    x.bind("d", "q", "k", &none(), false).unwrap();
    x.bind("d", "q", "k", &none(), false).unwrap();
    x.bind("d", "r", "k", &none(), false).unwrap();
    assert_eq!(
        x.route("d", "k", &none()).unwrap(),
        vec!["q", "r"],
        "duplicates route once"
    );
    x.unbind("d", "q", "k").unwrap();
    assert_eq!(x.get("d").unwrap().bindings.len(), 2);
    assert_eq!(x.route("d", "k", &none()).unwrap(), vec!["q", "r"]);
    x.unbind("d", "q", "k").unwrap();
    assert_eq!(x.route("d", "k", &none()).unwrap(), vec!["r"]);
    assert_eq!(x.unbind("d", "q", "k"), Ok(()), "no match is OK");
    let long = "k".repeat(BINDING_KEY_BYTES_MAX + 1);
    assert!(x.bind("d", "q", &long, &none(), false).is_err());
}

#[test]
fn direct_and_fanout_route_in_binding_order() {
    let mut x = Exchanges::new();
    x.declare("d", "direct", false).unwrap();
    x.declare("f", "fanout", false).unwrap();
    for (q, k) in [("q3", "a"), ("q1", "b"), ("q2", "a"), ("q3", "a")] {
        x.bind("d", q, k, &none(), false).unwrap();
        x.bind("f", q, k, &none(), false).unwrap();
    }
    assert_eq!(x.route("d", "a", &none()).unwrap(), vec!["q3", "q2"]);
    assert_eq!(
        x.route("d", "A", &none()).unwrap(),
        Vec::<String>::new(),
        "case-sensitive"
    );
    assert_eq!(
        x.route("f", "anything", &none()).unwrap(),
        vec!["q3", "q1", "q2"]
    );
}

#[test]
fn default_exchange_routes_to_the_queue_named_by_the_key() {
    let mut x = Exchanges::new();
    x.bind("", "ignored", "jobs", &none(), false).unwrap();
    assert_eq!(x.route("", "jobs", &none()).unwrap(), vec!["jobs"]);
    assert_eq!(x.route("", "other", &none()).unwrap(), vec!["other"]);
}

#[test]
fn topic_wildcards() {
    let cases = [
        ("a.b.c", "a.b.c", true),
        ("a.b.c", "a.b", false),
        ("a.*.c", "a.b.c", true),
        ("a.*.c", "a.c", false),
        ("a.*.c", "a.b.b.c", false),
        ("*", "a", true),
        ("*", "a.b", false),
        ("*", "", true),
        ("#", "", true),
        ("#", "a.b.c", true),
        ("a.#", "a", true),
        ("a.#", "a.b", true),
        ("a.#", "a.b.c", true),
        ("a.#", "b.a", false),
        ("#.c", "c", true),
        ("#.c", "a.b.c", true),
        ("#.c", "a.b.c.d", false),
        ("a.#.c", "a.c", true),
        ("a.#.c", "a.b.x.c", true),
        ("a.#.c", "a.b.x.d", false),
        ("*.#", "a", true),
        ("*.#", "", true),
        ("#.*", "", true),
        ("*.*", "a", false),
        ("#.#", "a.b", true),
        ("a.#.b.#.c", "a.b.c", true),
        ("a.#.b.#.c", "a.x.b.y.z.c", true),
        ("a.#.b.#.c", "a.x.c.y.b", false),
        ("stock.usd.*", "stock.usd.nyse", true),
        ("stock.#", "stock.eur", true),
        ("*.orange.*", "quick.orange.rabbit", true),
        ("*.*.rabbit", "lazy.orange.elephant", false),
        ("lazy.#", "lazy.brown.fox", true),
        ("", "", true),
        ("", "a", false),
        ("a..b", "a..b", true),
        ("a.*.b", "a..b", true),
    ];
    for (pattern, key, want) in cases {
        assert_eq!(topic_matches(pattern, key), want, "{pattern:?} vs {key:?}");
    }
}

/// Plain recursive definition of the topic rule, to check the fast matcher against.
fn reference(p: &[&str], k: &[&str]) -> bool {
    match p.split_first() {
        None => k.is_empty(),
        Some((&"#", rest)) => (0..=k.len()).any(|n| reference(rest, &k[n..])),
        Some((w, rest)) => !k.is_empty() && (*w == "*" || *w == k[0]) && reference(rest, &k[1..]),
    }
}

#[test]
fn topic_matcher_agrees_with_the_recursive_definition() {
    let words = ["a", "b", "*", "#"];
    let mut rng = Rng::new(0x5eed);
    for _ in 0..20_000 {
        let p: Vec<&str> = (0..=rng.below(5))
            .map(|_| words[rng.below(4) as usize])
            .collect();
        let k: Vec<&str> = (0..=rng.below(6))
            .map(|_| words[rng.below(2) as usize])
            .collect();
        let (pattern, key) = (p.join("."), k.join("."));
        assert_eq!(
            topic_matches(&pattern, &key),
            reference(&p, &k),
            "{pattern:?} vs {key:?}"
        );
    }
}

#[test]
fn topic_exchange_routes_by_pattern() {
    let mut x = Exchanges::new();
    x.declare("t", "topic", false).unwrap();
    x.bind("t", "all", "#", &none(), false).unwrap();
    x.bind("t", "usd", "stock.usd.*", &none(), false).unwrap();
    x.bind("t", "stock", "stock.#", &none(), false).unwrap();
    assert_eq!(
        x.route("t", "stock.usd.nyse", &none()).unwrap(),
        vec!["all", "usd", "stock"]
    );
    assert_eq!(
        x.route("t", "stock", &none()).unwrap(),
        vec!["all", "stock"]
    );
    assert_eq!(x.route("t", "fx.eur", &none()).unwrap(), vec!["all"]);
}

#[test]
fn headers_any_and_all() {
    let msg = headers(&[("format", "pdf"), ("type", "report")]);
    let cases = [
        (headers(&[]), true, true),
        (headers(&[]), false, true),
        (
            headers(&[("format", "pdf"), ("type", "report")]),
            true,
            true,
        ),
        (headers(&[("format", "pdf"), ("type", "log")]), true, false),
        (headers(&[("format", "pdf"), ("type", "log")]), false, true),
        (headers(&[("format", "zip"), ("type", "log")]), false, false),
        (headers(&[("format", "pdf"), ("missing", "x")]), true, false),
        (headers(&[("missing", "x")]), false, false),
        (headers(&[("format", "PDF")]), false, false),
    ];
    for (binding, match_all, want) in cases {
        assert_eq!(
            headers_match(&binding, match_all, &msg),
            want,
            "{binding:?} all={match_all}"
        );
    }
    let mut x = Exchanges::new();
    x.declare("h", "headers", false).unwrap();
    x.bind(
        "h",
        "all",
        "",
        &headers(&[("format", "pdf"), ("type", "log")]),
        true,
    )
    .unwrap();
    x.bind(
        "h",
        "any",
        "",
        &headers(&[("format", "pdf"), ("type", "log")]),
        false,
    )
    .unwrap();
    x.bind("h", "every", "ignored-key", &none(), true).unwrap();
    assert_eq!(x.route("h", "", &msg).unwrap(), vec!["any", "every"]);
}

#[test]
fn snapshot_round_trips_and_keeps_the_default_exchange() {
    let mut x = Exchanges::new();
    x.declare("t", "topic", true).unwrap();
    x.declare("tmp", "fanout", false).unwrap();
    x.bind("t", "q", "a.#", &headers(&[("k", "v")]), true)
        .unwrap();
    let json = serde_json::to_string(&x.snapshot()).unwrap();
    assert!(json.contains("\"type\":\"topic\""), "{json}");
    let back = Exchanges::restore(serde_json::from_str(&json).unwrap()).unwrap();
    assert_eq!(back, x);
    let durable = Exchanges::restore(x.snapshot().durable_only()).unwrap();
    assert!(
        durable.get("tmp").is_none() && durable.get("t").is_some() && durable.get("").is_some()
    );
    let empty = Exchanges::restore(ExchangesSnapshot { exchanges: vec![] }).unwrap();
    assert_eq!(empty, Exchanges::new());
    let mut twice = x.snapshot();
    twice.exchanges.push(twice.exchanges[1].clone());
    assert!(Exchanges::restore(twice).is_err());
}

#[test]
fn routing_key_length_is_bounded() {
    let x = Exchanges::new();
    let long = "a".repeat(ROUTING_KEY_BYTES_MAX + 1);
    assert!(x
        .route("", &long, &none())
        .unwrap_err()
        .contains("routing key too long"));
}

/// With `cluster.enabled` the table is a broker's state (`Command::Exchange` in the
/// exchange slot's log): its changes are logged, counted, survive a snapshot and travel as
/// command log records.
#[test]
fn a_brokers_exchange_table_is_logged_counted_and_survives_snapshots() {
    use crate::queue::broker::{Broker, BrokerConfig, Command, Outcome};
    use crate::queue::protocol::request::Binding;
    use crate::queue::server::wal::record;
    let mut b = Broker::new(BrokerConfig::default());
    assert_eq!(b.exchanges().0, 0);
    let declare = Command::Exchange {
        op: ExchangeOp::Declare {
            name: "orders".into(),
            kind: "direct".into(),
            durable: true,
        },
    };
    let bind = Command::Exchange {
        op: ExchangeOp::Bind(Binding {
            exchange: "orders".into(),
            queue: "paid".into(),
            binding_key: "paid".into(),
            headers: none(),
            match_all: false,
        }),
    };
    for (cmd, version) in [(&declare, 1), (&bind, 2)] {
        let applied = b.apply_logged(cmd);
        assert_eq!(applied.outcome, Outcome::Exchanged { version });
        assert!(applied.logged);
        let mut bytes = Vec::new();
        record::encode(cmd, &mut bytes);
        assert_eq!(&record::decode(&bytes).unwrap(), cmd);
    }
    let refused = b.apply_logged(&Command::Exchange {
        op: ExchangeOp::Delete {
            name: "nope".into(),
        },
    });
    assert!(matches!(refused.outcome, Outcome::Error(_)) && !refused.logged);
    let routed = b.exchanges().1.route("orders", "paid", &none()).unwrap();
    assert_eq!(routed, vec!["paid".to_string()]);
    let restored = Broker::restore(b.snapshot(), BrokerConfig::default());
    assert_eq!(restored.exchanges().0, 2);
    assert_eq!(restored.exchanges().1, b.exchanges().1);
    assert!(
        Broker::new(BrokerConfig::default())
            .snapshot()
            .exchanges
            .is_none(),
        "a broker that never changed its table snapshots none"
    );
}
