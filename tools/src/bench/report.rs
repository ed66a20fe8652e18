//! The final report: built once as JSON (what `--json` prints) and rendered from that JSON
//! for people, so both always say the same thing.

use super::run::{thousands, Finished, Primary};
use super::stats::{summary_us, Counters, OPS, SERIES};
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering;

/// One consistency check of the run's counts.
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    /// Shown when it fails; also the error kind it is counted under.
    pub detail: String,
    /// How many errors a failure adds (e.g. the number of undelivered messages).
    pub errors: u64,
}

pub struct ReportInput<'a> {
    pub scenario: &'static str,
    pub config: Value,
    pub finished: &'a Finished,
    pub primary: Primary,
    /// Mean payload size when the run itself sent no payloads (`consume`: the prefill's);
    /// otherwise the mean of the sizes actually sent is used.
    pub payload_bytes: Option<f64>,
    pub warmup_secs: f64,
    pub max_errors: u64,
    pub extra: Map<String, Value>,
    pub checks: Vec<Check>,
}

/// Builds the report and says whether the run passes (errors ≤ max).
pub fn build(input: ReportInput<'_>) -> (Value, bool) {
    let f = input.finished;
    let shared = &f.shared;
    let c = &shared.counters;
    for check in input.checks.iter().filter(|c| !c.ok) {
        shared.error(
            None,
            &format!("check failed: {}", check.name),
            check.errors.max(1),
        );
    }

    let mut ops = Map::new();
    let mut adds_up = true;
    for op in OPS {
        let i = op as usize;
        let sent = Counters::get(&c.sent[i]);
        let acknowledged = Counters::get(&c.acknowledged[i]);
        let errors = Counters::get(&c.errors[i]);
        if sent + acknowledged + errors == 0 {
            continue;
        }
        adds_up &= sent == acknowledged + errors;
        ops.insert(
            op.name().into(),
            json!({"sent": sent, "acknowledged": acknowledged, "errors": errors}),
        );
    }
    if !adds_up {
        shared.error(None, "check failed: sent = acknowledged + errors", 1);
    }

    let mut latency = Map::new();
    {
        let hists = shared.hists.lock().unwrap();
        for s in SERIES {
            let h = hists.get(s);
            if !h.is_empty() {
                latency.insert(s.name().into(), summary_us(h));
            }
        }
    }

    let rate = f.rate(input.primary);
    let payload_messages = Counters::get(&c.payload_messages);
    let mean_payload_bytes = if payload_messages > 0 {
        Counters::get(&c.payload_bytes) as f64 / payload_messages as f64
    } else {
        input.payload_bytes.unwrap_or(0.0)
    };
    let round1 = |x: f64| (x * 10.0).round() / 10.0;
    let mut throughput = Map::new();
    throughput.insert("msgs_per_sec".into(), json!(round1(rate)));
    throughput.insert(
        "mb_per_sec".into(),
        json!((rate * mean_payload_bytes / 1e6 * 100.0).round() / 100.0),
    );
    for (name, p) in [
        ("published_per_sec", Primary::Published),
        ("consumed_per_sec", Primary::Consumed),
        ("delivered_per_sec", Primary::Delivered),
    ] {
        let r = f.rate(p);
        if r > 0.0 {
            throughput.insert(name.into(), json!(round1(r)));
        }
    }

    let mut messages = Map::new();
    let publishes_sent: u64 = OPS
        .iter()
        .filter(|o| o.is_publish())
        .map(|&o| Counters::get(&c.sent[o as usize]))
        .sum();
    if publishes_sent > 0 {
        messages.insert("published".into(), json!(c.published()));
    }
    for (name, v) in [
        ("consumed", Counters::get(&c.consumed)),
        ("acked", Counters::get(&c.acked_messages)),
        ("empty_consumes", Counters::get(&c.empty)),
        ("delivered", Counters::get(&c.delivered)),
        ("out_of_order", Counters::get(&c.out_of_order)),
        ("unsent_scheduled", Counters::get(&c.unsent_scheduled)),
    ] {
        if v > 0 {
            messages.insert(name.into(), json!(v));
        }
    }
    if mean_payload_bytes > 0.0 {
        messages.insert(
            "mean_payload_bytes".into(),
            json!(round1(mean_payload_bytes)),
        );
    }
    for (k, v) in input.extra {
        messages.insert(k, v);
    }

    let mut checks = Map::new();
    checks.insert(
        "sent_equals_acknowledged_plus_errors".into(),
        json!(adds_up),
    );
    for check in &input.checks {
        checks.insert(check.name.into(), json!(check.ok));
    }

    let total_errors = c.errors_total();
    let by_kind: Map<String, Value> = shared
        .error_kinds
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let details: Vec<Value> = input
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| json!(format!("{}: {}", c.name, c.detail)))
        .collect();
    let pass = total_errors <= input.max_errors;
    let mut report = json!({
        "scenario": input.scenario,
        "config": input.config,
        "warmup_secs": input.warmup_secs,
        "window_secs": (f.window_secs() * 1000.0).round() / 1000.0,
        "throughput": throughput,
        "latency_us": latency,
        "ops": ops,
        "messages": messages,
        "checks": checks,
        "check_failures": details,
        "errors": {"total": total_errors, "by_kind": by_kind},
        "max_errors": input.max_errors,
        "pass": pass,
        "stopped_by_duration": shared.stop.load(Ordering::Relaxed),
    });
    match &f.server {
        None => {}
        Some(Ok(w)) => report["server"] = w.section(),
        Some(Err(e)) => report["server"] = json!({ "error": e }),
    }
    (report, pass)
}

/// The report for people.
pub fn render(r: &Value) -> String {
    let mut s = String::new();
    let num = |v: &Value| v.as_f64().unwrap_or(0.0);
    s += &format!(
        "boltq-bench {}  {}\n",
        r["scenario"].as_str().unwrap_or(""),
        r["config"]
    );
    s += &format!(
        "window        {:.3} s (after {} s warm-up)\n",
        num(&r["window_secs"]),
        num(&r["warmup_secs"])
    );
    let t = &r["throughput"];
    s += &format!(
        "throughput    {} msg/s   {:.2} MB/s of payload",
        thousands(num(&t["msgs_per_sec"]) as u64),
        num(&t["mb_per_sec"])
    );
    for k in ["published_per_sec", "consumed_per_sec", "delivered_per_sec"] {
        if let Some(v) = t.get(k) {
            s += &format!("   {} {}/s", &k[..k.len() - 8], thousands(num(v) as u64));
        }
    }
    s += "\n";
    if let Some(lat) = r["latency_us"].as_object().filter(|m| !m.is_empty()) {
        s += &format!(
            "latency (µs)  {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}\n",
            "p50", "p90", "p99", "p99.9", "max", "mean", "count"
        );
        for (name, v) in lat {
            s += &format!(
                "  {:<11} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>12}\n",
                name,
                num(&v["p50"]),
                num(&v["p90"]),
                num(&v["p99"]),
                num(&v["p99_9"]),
                num(&v["max"]),
                num(&v["mean"]),
                thousands(v["count"].as_u64().unwrap_or(0))
            );
        }
    }
    s += &format!(
        "requests      {:>16} {:>14} {:>10}\n",
        "sent", "acknowledged", "errors"
    );
    if let Some(ops) = r["ops"].as_object() {
        for (name, v) in ops {
            s += &format!(
                "  {:<16} {:>12} {:>14} {:>10}\n",
                name,
                thousands(v["sent"].as_u64().unwrap_or(0)),
                thousands(v["acknowledged"].as_u64().unwrap_or(0)),
                thousands(v["errors"].as_u64().unwrap_or(0))
            );
        }
    }
    if let Some(m) = r["messages"].as_object() {
        let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k} {v}")).collect();
        s += &format!("messages      {}\n", parts.join(", "));
    }
    if let Some(server) = r.get("server") {
        s += &render_server(server);
    }
    if let Some(checks) = r["checks"].as_object() {
        let parts: Vec<String> = checks
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k}: {}",
                    if v.as_bool() == Some(true) {
                        "ok"
                    } else {
                        "FAILED"
                    }
                )
            })
            .collect();
        s += &format!("checks        {}\n", parts.join(", "));
    }
    for d in r["check_failures"].as_array().into_iter().flatten() {
        s += &format!("  {}\n", d.as_str().unwrap_or(""));
    }
    let total = r["errors"]["total"].as_u64().unwrap_or(0);
    s += &format!("errors        {total}");
    if let Some(kinds) = r["errors"]["by_kind"].as_object() {
        for (k, v) in kinds {
            s += &format!("\n  {v:>10}  {k}");
        }
    }
    s += &format!(
        "\nresult        {} (max errors {})\n",
        if r["pass"].as_bool() == Some(true) {
            "PASS"
        } else {
            "FAIL"
        },
        r["max_errors"]
    );
    s
}

/// The `server` section on one line: counters that moved with their rates, gauges before →
/// after (the JSON has every series).
fn render_server(v: &Value) -> String {
    if let Some(e) = v["error"].as_str() {
        return format!("server        scrape failed: {e}\n");
    }
    let mut parts = Vec::new();
    for (k, x) in v.as_object().into_iter().flatten() {
        let n = |f: &str| x[f].as_i64().unwrap_or(0);
        if x.get("per_sec").is_some() && n("delta") != 0 {
            parts.push(format!(
                "{k} +{} ({}/s)",
                n("delta"),
                x["per_sec"].as_f64().unwrap_or(0.0)
            ));
        } else if x.get("after").is_some() {
            parts.push(format!("{k} {} -> {}", n("before"), n("after")));
        }
    }
    let mut s = format!(
        "server        over {} s: {}\n",
        v["secs"].as_f64().unwrap_or(0.0),
        parts.join(", ")
    );
    if let Some(m) = v["missing"].as_array().filter(|m| !m.is_empty()) {
        let names: Vec<&str> = m.iter().filter_map(|x| x.as_str()).collect();
        s += &format!("  not exported by the server: {}\n", names.join(", "));
    }
    s
}
