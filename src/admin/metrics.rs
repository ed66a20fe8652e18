//! `/metrics`: Prometheus text (default) or JSON (`Accept: application/json`), built at
//! scrape time from every shard's report: broker counters and gauges from the slots, and
//! each shard's registry (latency histograms, HTTP and mesh counters), merged.
//!
//! The text exposition is written here rather than with `prometheus-client`: that crate
//! writes OpenMetrics, which appends `_total` to counter names, and v1 dashboards and alerts
//! scrape `boltq_messages_published` and friends by their exact v1 names.

use super::http::Response;
use crate::queue::server::dispatch::{CONSUME_WAIT_METRIC, PUBLISH_LATENCY_METRIC};
use crate::queue::server::mesh::ShardReport;
use serde_json::{json, Map, Value};
use std::fmt::Write;

/// Queues listed one by one in `boltq_queue_ready_messages{queue=…}`; beyond this the
/// per-queue series stop (the totals stay exact), so a scrape stays bounded.
pub const QUEUE_SERIES_MAX: usize = 1000;

/// The v1 counters, in v1's order, with their values.
fn v1_counters(r: &ShardReport) -> [(&'static str, &'static str, u64); 13] {
    let c = &r.counters;
    let metric = |name: &str| r.metrics.counter(name, &[]).unwrap_or(0);
    let snapshots = metric("boltq_snapshots_total");
    [
        (
            "messages_published",
            "Messages published (work queues, topics, exchanges)",
            c.published + c.published_topic,
        ),
        (
            "messages_consumed",
            "Messages handed to consumers",
            c.consumed,
        ),
        ("messages_acked", "Messages acknowledged", c.acked),
        (
            "messages_nacked",
            "Messages negatively acknowledged",
            c.nacked,
        ),
        (
            "retry_count",
            "Redeliveries after a NACK or ack timeout",
            c.retried,
        ),
        (
            "dead_letter_count",
            "Messages moved to a dead-letter queue",
            c.dead_lettered,
        ),
        (
            "raft_apply_count",
            "Raft entries applied (clustering not enabled)",
            0,
        ),
        ("snapshot_count", "Queue slot snapshots taken", snapshots),
        (
            "leader_changes",
            "Raft leader changes (clustering not enabled)",
            0,
        ),
        (
            "cache_hits",
            "Cache reads that found their key",
            metric("boltq_cache_hits"),
        ),
        (
            "cache_misses",
            "Cache reads that did not",
            metric("boltq_cache_misses"),
        ),
        ("cache_sets", "Cache writes", metric("boltq_cache_sets")),
        (
            "cache_deletes",
            "Cache deletes that removed a key",
            metric("boltq_cache_deletes"),
        ),
    ]
}

/// Gauges of the queue plane now.
fn gauges(r: &ShardReport) -> Vec<(&'static str, &'static str, i64)> {
    let s = &r.stats;
    vec![
        (
            "boltq_ready_messages",
            "Ready messages in all work queues",
            s.queues.values().sum::<u64>() as i64,
        ),
        (
            "boltq_pending_messages",
            "Consumed, not yet acked messages",
            s.pending_count as i64,
        ),
        (
            "boltq_delayed_messages",
            "Delayed or retry-waiting messages",
            s.delayed_count as i64,
        ),
        (
            "boltq_dead_letter_messages",
            "Messages in dead-letter queues",
            s.dead_letters.values().sum::<u64>() as i64,
        ),
        ("boltq_queues", "Work queues", s.queues.len() as i64),
        (
            "boltq_storage_bytes",
            "Bytes of every log (segments and in-memory tails)",
            r.storage_bytes as i64,
        ),
        (
            "boltq_tcp_connections",
            "Open TCP connections",
            r.connections as i64,
        ),
        (
            "boltq_scrape_shards_missing",
            "Shards whose numbers are missing from this scrape (they did not answer in time)",
            r.shards_missing as i64,
        ),
        (
            "boltq_publish_rejected_full_total",
            "Publishes refused because the queue was full",
            r.counters.rejected_full as i64,
        ),
        (
            "boltq_messages_expired_total",
            "Messages discarded when their TTL passed",
            r.counters.expired as i64,
        ),
        (
            "boltq_ack_timeouts_total",
            "Consumed messages whose ack timeout passed",
            r.counters.ack_timeouts as i64,
        ),
        (
            "boltq_pushes_total",
            "Pub/sub deliveries to live subscribers",
            r.counters.pushed as i64,
        ),
    ]
}

pub fn render(report: &ShardReport, as_json: bool) -> Response {
    if as_json {
        return Response::json(200, &json_form(report));
    }
    Response::text(
        200,
        "text/plain; version=0.0.4; charset=utf-8",
        text_form(report),
    )
}

fn text_form(r: &ShardReport) -> String {
    let mut out = String::with_capacity(8 * 1024);
    for (name, help, value) in v1_counters(r) {
        let _ = writeln!(
            out,
            "# HELP boltq_{name} {help}\n# TYPE boltq_{name} counter\nboltq_{name} {value}"
        );
    }
    for (name, help, value) in gauges(r) {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
    let _ = writeln!(out, "# HELP boltq_queue_ready_messages Ready messages per work queue\n# TYPE boltq_queue_ready_messages gauge");
    for (queue, n) in r.stats.queues.iter().take(QUEUE_SERIES_MAX) {
        let _ = writeln!(
            out,
            "boltq_queue_ready_messages{{queue=\"{}\"}} {n}",
            escape_label(queue)
        );
    }
    let mut last = String::new();
    let mut type_line = |out: &mut String, name: &str, kind: &str| {
        if last != name {
            let _ = writeln!(out, "# TYPE {name} {kind}");
            last = name.to_string();
        }
    };
    // Series of one name are adjacent (the maps are ordered by name, then labels), so each
    // name gets exactly one TYPE line, as strict parsers require.
    for (key, value) in &r.metrics.counters {
        if key.name == "boltq_snapshots_total" || key.name.starts_with("boltq_cache_") {
            continue; // reported under their v1 names above
        }
        type_line(&mut out, &key.name, "counter");
        let _ = writeln!(out, "{}{} {value}", key.name, labels(&key.labels));
    }
    for (key, value) in &r.metrics.gauges {
        type_line(&mut out, &key.name, "gauge");
        let _ = writeln!(out, "{}{} {value}", key.name, labels(&key.labels));
    }
    for (key, h) in &r.metrics.histograms {
        type_line(&mut out, &key.name, "summary");
        for q in [0.5, 0.9, 0.99, 0.999] {
            let mut l = key.labels.clone();
            l.push(("quantile".into(), q.to_string()));
            let _ = writeln!(out, "{}{} {}", key.name, labels(&l), h.value_at_quantile(q));
        }
        let sum = (h.mean() * h.len() as f64).round() as u64;
        let _ = writeln!(out, "{}_sum{} {sum}", key.name, labels(&key.labels));
        let _ = writeln!(out, "{}_count{} {}", key.name, labels(&key.labels), h.len());
    }
    out
}

fn labels(l: &[(String, String)]) -> String {
    if l.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = l
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// Label values escape `\`, `"` and newlines (Prometheus text format).
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn json_form(r: &ShardReport) -> Value {
    let mut o = Map::new();
    for (name, _, value) in v1_counters(r) {
        o.insert(name.to_string(), json!(value));
    }
    for (name, _, value) in gauges(r) {
        o.insert(name.trim_start_matches("boltq_").to_string(), json!(value));
    }
    o.insert("connections".into(), json!(r.connections));
    for (metric, key) in [
        (PUBLISH_LATENCY_METRIC, "publish_latency_us"),
        (CONSUME_WAIT_METRIC, "consume_wait_us"),
    ] {
        let Some(h) = r.metrics.histogram(metric, &[]) else {
            continue;
        };
        o.insert(
            key.into(),
            json!({
                "count": h.len(),
                "p50": h.value_at_quantile(0.5),
                "p90": h.value_at_quantile(0.9),
                "p99": h.value_at_quantile(0.99),
                "p999": h.value_at_quantile(0.999),
                "max": h.max(),
            }),
        );
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_keeps_v1_names_and_order_and_escapes_labels() {
        let mut r = ShardReport::default();
        r.counters.published = 3;
        r.counters.published_topic = 2;
        r.stats.queues.insert("a\"b".into(), 7);
        let text = text_form(&r);
        let names: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("# TYPE boltq_") && l.ends_with(" counter"))
            .take(13)
            .map(|l| l.split_whitespace().nth(2).unwrap())
            .collect();
        assert_eq!(names[0], "boltq_messages_published");
        assert_eq!(names[12], "boltq_cache_deletes");
        assert!(text.contains("\nboltq_messages_published 5\n"));
        let mut types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        let n = types.len();
        types.sort();
        types.dedup();
        assert_eq!(types.len(), n, "one TYPE line per metric name");
        assert!(text.contains("boltq_queue_ready_messages{queue=\"a\\\"b\"} 7"));
        let json = json_form(&r);
        assert_eq!(json["messages_published"], 5);
        assert_eq!(json["ready_messages"], 7);
    }
}
