//! `boltq-bench`: the bundled load generator (issue 7): TCP scenarios of the queue plane here,
//! WebSocket scenarios of the messaging gateway in [`gateway`].
//!
//! - [`cli`]: the command line (clap).
//! - [`engine`]: the event loop driving pipelined connections (one thread per `--cpus` CPU).
//! - [`run`]: timing (warm-up, duration, drain) and the progress line.
//! - [`report`]: the final report, JSON and text.
//! - [`wire`]: request templates and reply scanning; [`stats`]: counters and histograms.
//!
//! Each scenario below turns its arguments into a [`run::Plan`] (which connections do what),
//! runs it, and checks the counts that must add up for that scenario.

pub mod cli;
pub mod cpus;
pub mod engine;
pub mod gateway;
pub mod poll;
pub mod report;
pub mod run;
pub mod server_metrics;
pub mod size_dist;
pub mod stats;
pub mod transport;
pub mod wire;

use boltq::client::{Client, ClientOptions, ClientTls, TlsSession};
use boltq::queue::protocol::frame::op;
use clap::Parser;
use cli::{Cli, Common, ConsumerArgs, PayloadArgs, Scenario};
use engine::{ConnSpec, ConsumeMode, ConsumerSpec, ProducerSpec, RoleSpec};
use report::{Check, ReportInput};
use run::{Plan, Primary};
use serde_json::{json, Map, Value};
use size_dist::SizeDist;
use stats::{Counters, Op, Series};
use std::sync::Arc;
use wire::{json_str, Template};

/// Exit status when setup failed (bad arguments are clap's 2 as well).
pub const EXIT_SETUP: i32 = 2;
/// Default measured duration when neither `--duration-secs` nor `--messages` is given.
const DEFAULT_DURATION_SECS: f64 = 10.0;

/// Entry point of the binary: parses `args` (program name first), runs, prints the report on
/// stdout (JSON with `--json`) and returns the exit status.
pub fn main_with_args(args: Vec<std::ffi::OsString>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    let json_out = common_of(&cli.scenario).json;
    match run_scenario(cli.scenario) {
        Ok((report, pass)) => {
            if json_out {
                println!("{report}");
            } else {
                print!("{}", report::render(&report));
            }
            if pass {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("boltq-bench: {e}");
            EXIT_SETUP
        }
    }
}

fn common_of(s: &Scenario) -> &Common {
    match s {
        Scenario::Publish(a) => &a.common,
        Scenario::Consume(a) => &a.common,
        Scenario::Queue(a) => &a.common,
        Scenario::Pubsub(a) => &a.common,
        Scenario::Exchange(a) => &a.common,
        Scenario::Chat(a) => &a.common,
        Scenario::Channel(a) => &a.common,
        Scenario::Reconnect(a) => &a.common,
    }
}

/// Runs one scenario; returns the report and whether it passed.
pub fn run_scenario(s: Scenario) -> Result<(Value, bool), String> {
    check_tls_options(&s)?;
    if let Some(ep) = server_endpoint(common_of(&s)) {
        // A wrong --http is a setup error, found before anything connects or is set up.
        server_metrics::scrape(&ep, poll::now_ns())?;
    }
    match s {
        Scenario::Publish(a) => publish(a),
        Scenario::Consume(a) => consume(a),
        Scenario::Queue(a) => queue(a),
        Scenario::Pubsub(a) => pubsub(a),
        Scenario::Exchange(a) => exchange(a),
        Scenario::Chat(a) => gateway::chat(a),
        Scenario::Channel(a) => gateway::channel(a),
        Scenario::Reconnect(a) => gateway::reconnect(a),
    }
}

// ---- building blocks -----------------------------------------------------------------------

/// `--priority-mix 0:80,9:20` → `[(0, 80), (9, 20)]`; none → one slot without a priority.
fn priority_mix(spec: Option<&str>) -> Result<Vec<(Option<u8>, u32)>, String> {
    let Some(spec) = spec else {
        return Ok(vec![(None, 1)]);
    };
    let mut mix = Vec::new();
    for part in spec.split(',') {
        let bad = || format!("bad --priority-mix {spec:?}: expected e.g. 0:80,5:15,9:5");
        let (p, w) = part.trim().split_once(':').ok_or_else(bad)?;
        let p: u8 = p.trim().parse().map_err(|_| bad())?;
        let w: u32 = w.trim().parse().map_err(|_| bad())?;
        if p > 9 || w == 0 {
            return Err(bad());
        }
        mix.push((Some(p), w));
    }
    if mix.is_empty() {
        return Err(format!("bad --priority-mix {spec:?}"));
    }
    Ok(mix)
}

fn cumulative(mix: &[(Option<u8>, u32)]) -> Vec<u32> {
    mix.iter()
        .scan(0u32, |acc, &(_, w)| {
            *acc += w;
            Some(*acc)
        })
        .collect()
}

/// Templates `[target][priority slot]` for bodies `{<head>"payload":…<priority><tail>}`.
fn templates(
    code: u8,
    head: &str,
    tails: &[String],
    mix: &[(Option<u8>, u32)],
) -> Vec<Vec<Template>> {
    tails
        .iter()
        .map(|tail| {
            mix.iter()
                .map(|(p, _)| {
                    let prio = p.map(|p| format!(",\"priority\":{p}")).unwrap_or_default();
                    Template::new(
                        code,
                        &format!("{{{head}\"payload\":"),
                        &format!("{prio}{tail}}}"),
                    )
                })
                .collect()
        })
        .collect()
}

struct Producers<'a> {
    count: usize,
    depth: usize,
    op: Op,
    templates: Vec<Vec<Template>>,
    payload: &'a PayloadArgs,
    rate: Option<f64>,
}

fn producer_specs(p: Producers<'_>) -> Result<Vec<ConnSpec>, String> {
    let mix = priority_mix(p.payload.priority_mix.as_deref())?;
    let templates = Arc::new(p.templates);
    let cumulative = Arc::new(cumulative(&mix));
    let sizes = Arc::new(p.payload.size.clone());
    let filler = Arc::new(wire::filler(sizes.max() as usize));
    let interval = match p.rate {
        Some(r) if r > 0.0 => Some(((p.count as f64 * 1e9 / r) as u64).max(1)),
        Some(r) => return Err(format!("--rate must be positive, got {r}")),
        None => None,
    };
    Ok((0..p.count)
        .map(|i| ConnSpec {
            depth: p.depth,
            role: RoleSpec::Producer(ProducerSpec {
                op: p.op,
                templates: templates.clone(),
                priority_cumulative: cumulative.clone(),
                sizes: sizes.clone(),
                filler: filler.clone(),
                interval_ns: interval,
                phase_ns: interval.map_or(0, |iv| iv * i as u64 / p.count as u64),
                first_target: i,
                one_target: false,
                seed: 0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1),
            }),
        })
        .collect())
}

fn consumer_specs(
    count: usize,
    depth: usize,
    queues: &[String],
    c: &ConsumerArgs,
    mode: ConsumeMode,
    record_e2e: bool,
) -> Vec<ConnSpec> {
    let frames: Vec<Vec<u8>> = queues
        .iter()
        .map(|q| {
            let mut body = String::from("{");
            if let Some(max) = c.batch {
                body += &format!("\"max\":{max},");
            }
            body += &format!("\"topic\":{}", json_str(q));
            if let Some(w) = c.wait_ms {
                body += &format!(",\"wait_ms\":{w}");
            }
            body += "}";
            wire::frame(op::CONSUME, &body)
        })
        .collect();
    let frames = Arc::new(frames);
    (0..count)
        .map(|i| ConnSpec {
            depth,
            role: RoleSpec::Consumer(ConsumerSpec {
                frames: frames.clone(),
                first_queue: i,
                one_queue: false,
                mode,
                record_e2e,
                ack_many: c.ack_many,
            }),
        })
        .collect()
}

/// Keeps each producer and consumer on the queue it starts at (`--queue-per-connection`).
fn one_queue_each(conns: &mut [ConnSpec]) {
    for conn in conns {
        match &mut conn.role {
            RoleSpec::Producer(p) => p.one_target = true,
            RoleSpec::Consumer(c) => c.one_queue = true,
            _ => {}
        }
    }
}

fn queue_names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}.{i}")).collect()
}

fn check_counts(common: &Common, what: &str, n: usize) -> Result<(), String> {
    if n == 0 {
        return Err(format!("{what} must be at least 1"));
    }
    if common.warmup_secs < 0.0 || common.drain_timeout_secs < 0.0 {
        return Err("durations must not be negative".into());
    }
    if common.request_timeout_secs <= 0.0 {
        return Err("--request-timeout-secs must be positive".into());
    }
    if common.duration_secs.is_some_and(|d| d <= 0.0) {
        return Err("--duration-secs must be positive".into());
    }
    Ok(())
}

/// The trust settings of `--tls-ca`, `--tls-insecure` and `--tls-server-name`, for every
/// connection that speaks TLS (`--tls`, a `wss://` URL, an `https://` `--http`).
pub(crate) fn tls_options(common: &Common) -> ClientTls {
    ClientTls {
        ca_file: common.tls_ca.clone(),
        insecure: common.tls_insecure,
        server_name: common.tls_server_name.clone(),
        client_certificate: None,
    }
}

/// What `--tls` asks of a TCP connection.
fn client_tls(common: &Common) -> Option<ClientTls> {
    common.tls.then(|| tls_options(common))
}

/// Where TLS is asked for, and that the trust options are not given in vain.
fn check_tls_options(s: &Scenario) -> Result<(), String> {
    let c = common_of(s);
    let wss = match s {
        Scenario::Chat(a) => Some(a.gateway.url.starts_with("wss://")),
        Scenario::Channel(a) => Some(a.gateway.url.starts_with("wss://")),
        Scenario::Reconnect(a) => Some(a.gateway.url.starts_with("wss://")),
        _ => None,
    };
    if c.tls && wss.is_some() {
        return Err(
            "--tls is for the TCP scenarios; the gateway speaks TLS with a wss:// --url".into(),
        );
    }
    let https = c.http.as_deref().is_some_and(|h| h.starts_with("https://"));
    let options = c.tls_ca.is_some() || c.tls_insecure || c.tls_server_name.is_some();
    if options && !c.tls && wss != Some(true) && !https {
        return Err(
            "--tls-ca, --tls-insecure and --tls-server-name need --tls, a wss:// --url or an \
             https:// --http"
                .into(),
        );
    }
    Ok(())
}

/// The TLS settings of the run's connections, checked (CA file read, server name valid)
/// before anything connects.
pub(crate) fn tls_session(common: &Common) -> Result<Option<Arc<TlsSession>>, String> {
    client_tls(common)
        .map(|t| TlsSession::new(&t, &common.addr).map(Arc::new))
        .transpose()
        .map_err(|e| format!("--tls: {e}"))
}

fn control_client(common: &Common) -> Result<Client, String> {
    Client::connect(
        &common.addr,
        ClientOptions {
            api_key: common.api_key.clone(),
            tls: client_tls(common),
            ..Default::default()
        },
    )
    .map_err(|e| format!("cannot connect to {}: {e}", common.addr))
}

/// Sum of the ready counts STATS reports for `queues`.
fn ready_messages(common: &Common, queues: &[String]) -> Result<u64, String> {
    let stats = control_client(common)?
        .stats()
        .map_err(|e| format!("STATS: {e}"))?;
    Ok(queues
        .iter()
        .map(|q| stats["Queues"][q.as_str()].as_u64().unwrap_or(0))
        .sum())
}

fn equal_check(name: &'static str, got: u64, want: u64, what: &str) -> Check {
    Check {
        name,
        ok: got == want,
        detail: format!("{what}: got {got}, expected {want}"),
        errors: got.abs_diff(want),
    }
}

/// `got` in `least..=most`: a count that sends of unknown outcome may raise past what was
/// acknowledged, and nothing may bring below it.
fn range_check(name: &'static str, got: u64, least: u64, most: u64, what: &str) -> Check {
    assert!(least <= most, "{name}: an empty range");
    let errors = if got < least {
        least - got
    } else {
        got.saturating_sub(most)
    };
    Check {
        name,
        ok: errors == 0,
        detail: format!("{what}: got {got}, expected {least}..={most}"),
        errors,
    }
}

fn sender_duration(common: &Common) -> Option<f64> {
    common.duration_secs.or(if common.messages.is_none() {
        Some(DEFAULT_DURATION_SECS)
    } else {
        None
    })
}

fn plan(common: &Common, conns: Vec<ConnSpec>, senders: usize, primary: Primary) -> Plan {
    Plan {
        conns,
        senders,
        primary,
        headline: Series::Publish,
        budget: None,
        duration_secs: sender_duration(common),
        warmup_secs: common.warmup_secs,
        drain_timeout_secs: common.drain_timeout_secs,
        request_timeout_secs: common.request_timeout_secs,
        progress: !common.quiet,
        label: String::new(),
        server: server_endpoint(common),
    }
}

/// Where `--http` says the server's `/metrics` is.
/// `--http host:port` (plain) or `https://host:port`.
fn server_endpoint(common: &Common) -> Option<server_metrics::Endpoint> {
    let http = common.http.as_deref()?;
    let (addr, tls) = match http.strip_prefix("https://") {
        Some(addr) => (addr, Some(tls_options(common))),
        None => (http.strip_prefix("http://").unwrap_or(http), None),
    };
    Some(server_metrics::Endpoint {
        addr: addr.trim_end_matches('/').to_string(),
        api_key: common.api_key.clone(),
        tls,
    })
}

/// What a scenario hands to the report besides its configuration.
struct Outcome<'a> {
    finished: &'a run::Finished,
    primary: Primary,
    /// Mean payload size when the run itself sent no payloads (`consume`: the prefill's).
    payload_bytes: Option<f64>,
    extra: Map<String, Value>,
    checks: Vec<Check>,
}

fn finish(
    scenario: &'static str,
    common: &Common,
    mut config: Value,
    mut o: Outcome<'_>,
) -> (Value, bool) {
    server_checks(common, o.finished, &mut o.checks);
    config["http"] = json!(common.http);
    config["addr"] = json!(common.addr);
    config["loop"] = json!(match common.rate {
        Some(r) => format!("open ({r} msg/s)"),
        None => "closed".to_string(),
    });
    config["cpus"] = json!(common.cpus.as_ref().map(|c| c.to_string()));
    config["duration_secs"] = json!(common.duration_secs);
    config["messages"] = json!(common.messages);
    report::build(ReportInput {
        scenario,
        config,
        finished: o.finished,
        primary: o.primary,
        payload_bytes: o.payload_bytes,
        warmup_secs: common.warmup_secs,
        max_errors: common.max_errors,
        extra: o.extra,
        checks: o.checks,
    })
}

/// With `--http` and no warm-up the two scrapes enclose every request of the run, so the
/// server's published and consumed deltas must equal what the generator saw acknowledged and
/// consumed. After a warm-up, requests in flight when measuring starts blur the boundary:
/// the deltas are reported, not checked.
fn server_checks(common: &Common, f: &run::Finished, checks: &mut Vec<Check>) {
    let Some(Ok(w)) = &f.server else { return };
    if common.warmup_secs > 0.0 {
        return;
    }
    let c = &f.shared.counters;
    let publishes_sent: u64 = stats::OPS
        .iter()
        .filter(|o| o.is_publish())
        .map(|&o| Counters::get(&c.sent[o as usize]))
        .sum();
    let consumed = Counters::get(&c.consumed);
    for (name, key, ours, applies) in [
        (
            "server_published_delta_equals_acknowledged",
            "messages_published",
            c.published(),
            publishes_sent > 0,
        ),
        (
            "server_consumed_delta_equals_consumed",
            "messages_consumed",
            consumed,
            consumed > 0,
        ),
    ] {
        if let (true, Some(theirs)) = (applies, w.delta(key)) {
            checks.push(equal_check(name, theirs, ours, &format!("/metrics {key}")));
        }
    }
}

// ---- scenarios -----------------------------------------------------------------------------

fn publish(a: cli::PublishArgs) -> Result<(Value, bool), String> {
    let c = &a.common;
    check_counts(c, "--connections", a.connections)?;
    check_counts(c, "--queues", a.queues)?;
    let names = queue_names(&c.prefix, a.queues);
    let mix = priority_mix(a.payload.priority_mix.as_deref())?;
    let tails: Vec<String> = names
        .iter()
        .map(|q| format!(",\"topic\":{}", json_str(q)))
        .collect();
    let conns = producer_specs(Producers {
        count: a.connections,
        depth: a.depth,
        op: Op::Publish,
        templates: templates(op::PUBLISH, "", &tails, &mix),
        payload: &a.payload,
        rate: c.rate,
    })?;
    let before = (!c.no_verify)
        .then(|| ready_messages(c, &names))
        .transpose()?;
    let mut p = plan(c, conns, a.connections, Primary::Published);
    p.budget = c.messages;
    p.label = "publish".into();
    let f = run::execute(p, c)?;
    let mut checks = Vec::new();
    if let Some(before) = before {
        let after = ready_messages(c, &names)?;
        checks.push(equal_check(
            "server_ready_delta_equals_published",
            after.saturating_sub(before),
            f.shared.counters.published(),
            "messages STATS counts as ready in the run's queues",
        ));
    }
    let config = json!({
        "connections": a.connections, "depth": a.depth, "size": a.payload.size.to_string(),
        "queues": a.queues, "priority_mix": a.payload.priority_mix, "prefix": c.prefix,
    });
    Ok(finish(
        "publish",
        c,
        config,
        Outcome {
            finished: &f,
            primary: Primary::Published,
            payload_bytes: None,
            extra: Map::new(),
            checks,
        },
    ))
}

fn consume(a: cli::ConsumeArgs) -> Result<(Value, bool), String> {
    let c = &a.common;
    check_counts(c, "--connections", a.connections)?;
    check_counts(c, "--queues", a.queues)?;
    if c.rate.is_some() {
        return Err("--rate applies to senders; consumers always run closed loop".into());
    }
    let names = queue_names(&c.prefix, a.queues);
    let mut extra = Map::new();
    let mut prefill_mean_bytes = None;
    if let Some(n) = a.prefill {
        let (prefilled, mean) = prefill(c, &names, n, &a.size, a.connections)?;
        extra.insert("prefilled".into(), json!(prefilled));
        prefill_mean_bytes = Some(mean);
    }
    let target = c.messages.or(a.prefill);
    let mode = match target {
        Some(n) => ConsumeMode::Target(n),
        None => ConsumeMode::UntilEmpty,
    };
    let conns = consumer_specs(a.connections, a.depth, &names, &a.consumer, mode, false);
    let mut p = plan(c, conns, 0, Primary::Consumed);
    p.request_timeout_secs += a.consumer.wait_ms.unwrap_or(0) as f64 / 1000.0;
    p.duration_secs = c.duration_secs.or(if target.is_none() {
        Some(DEFAULT_DURATION_SECS)
    } else {
        None
    });
    p.headline = Series::Consume;
    p.label = "consume".into();
    let f = run::execute(p, c)?;
    let consumed = Counters::get(&f.shared.counters.consumed);
    let mut checks = Vec::new();
    if let Some(n) = target {
        checks.push(equal_check(
            "consumed_equals_target",
            consumed,
            n,
            "messages consumed",
        ));
    }
    let config = json!({
        "connections": a.connections, "depth": a.depth, "queues": a.queues,
        "batch": a.consumer.batch, "wait_ms": a.consumer.wait_ms, "prefill": a.prefill,
        "size": a.size.to_string(), "prefix": c.prefix,
    });
    Ok(finish(
        "consume",
        c,
        config,
        Outcome {
            finished: &f,
            primary: Primary::Consumed,
            payload_bytes: prefill_mean_bytes,
            extra,
            checks,
        },
    ))
}

/// Publishes `n` messages (not measured) for a drain run; returns how many were stored and
/// their mean payload size.
fn prefill(
    common: &Common,
    queues: &[String],
    n: u64,
    size: &SizeDist,
    connections: usize,
) -> Result<(u64, f64), String> {
    let tails: Vec<String> = queues
        .iter()
        .map(|q| format!(",\"topic\":{}", json_str(q)))
        .collect();
    let payload = PayloadArgs {
        size: size.clone(),
        priority_mix: None,
    };
    let mix = [(None, 1)];
    let conns = producer_specs(Producers {
        count: connections,
        depth: 64,
        op: Op::Publish,
        templates: templates(op::PUBLISH, "", &tails, &mix),
        payload: &payload,
        rate: None,
    })?;
    let mut p = plan(common, conns, connections, Primary::Published);
    p.budget = Some(n);
    p.duration_secs = None;
    p.warmup_secs = 0.0;
    p.label = "prefill".into();
    p.server = None; // not measured
    let f = run::execute(p, common)?;
    let errors = f.shared.counters.errors_total();
    let published = f.shared.counters.published();
    if errors > 0 || published != n {
        let kinds = f.shared.error_kinds.lock().unwrap().clone();
        return Err(format!(
            "prefill stored {published} of {n} messages ({errors} errors: {kinds:?})"
        ));
    }
    let bytes = Counters::get(&f.shared.counters.payload_bytes);
    Ok((published, bytes as f64 / published.max(1) as f64))
}

fn queue(a: cli::QueueArgs) -> Result<(Value, bool), String> {
    let c = &a.common;
    check_counts(c, "--producers", a.producers)?;
    check_counts(c, "--consumers", a.consumers)?;
    check_counts(c, "--queues", a.queues)?;
    let names = queue_names(&c.prefix, a.queues);
    let mix = priority_mix(a.payload.priority_mix.as_deref())?;
    let tails: Vec<String> = names
        .iter()
        .map(|q| format!(",\"topic\":{}", json_str(q)))
        .collect();
    let mut conns = producer_specs(Producers {
        count: a.producers,
        depth: a.depth,
        op: Op::Publish,
        templates: templates(op::PUBLISH, "", &tails, &mix),
        payload: &a.payload,
        rate: c.rate,
    })?;
    let consumer_depth = a.consumer_depth.unwrap_or(a.depth);
    conns.extend(consumer_specs(
        a.consumers,
        consumer_depth,
        &names,
        &a.consumer,
        ConsumeMode::Follow,
        true,
    ));
    if a.queue_per_connection {
        one_queue_each(&mut conns);
    }
    let mut p = plan(c, conns, a.producers, Primary::Consumed);
    p.request_timeout_secs += a.consumer.wait_ms.unwrap_or(0) as f64 / 1000.0;
    p.budget = c.messages;
    p.headline = Series::EndToEnd;
    p.label = "queue".into();
    let f = run::execute(p, c)?;
    let counters = &f.shared.counters;
    let checks = vec![equal_check(
        "consumed_equals_published",
        Counters::get(&counters.consumed),
        counters.published(),
        "messages consumed vs published",
    )];
    let config = json!({
        "producers": a.producers, "consumers": a.consumers, "depth": a.depth,
        "consumer_depth": consumer_depth, "size": a.payload.size.to_string(), "queues": a.queues,
        "queue_per_connection": a.queue_per_connection,
        "batch": a.consumer.batch, "wait_ms": a.consumer.wait_ms,
        "priority_mix": a.payload.priority_mix, "prefix": c.prefix,
    });
    Ok(finish(
        "queue",
        c,
        config,
        Outcome {
            finished: &f,
            primary: Primary::Consumed,
            payload_bytes: None,
            extra: Map::new(),
            checks,
        },
    ))
}

fn pubsub(a: cli::PubsubArgs) -> Result<(Value, bool), String> {
    let c = &a.common;
    check_counts(c, "--subscribers", a.subscribers)?;
    let topic = format!("{}.topic", c.prefix);
    let mix = priority_mix(a.payload.priority_mix.as_deref())?;
    let tails = vec![format!(",\"topic\":{}", json_str(&topic))];
    let mut conns: Vec<ConnSpec> = (0..a.subscribers)
        .map(|k| ConnSpec {
            depth: 1,
            role: RoleSpec::Subscriber {
                topic: topic.clone(),
                sub_id: format!("{}.sub.{k}", c.prefix),
            },
        })
        .collect();
    // Subscribers first: they are connected and subscribed before any thread starts
    // sending, so every message published counts as expected at every subscriber.
    conns.extend(producer_specs(Producers {
        count: 1,
        depth: a.depth,
        op: Op::PublishTopic,
        templates: templates(op::PUBLISH_TOPIC, "", &tails, &mix),
        payload: &a.payload,
        rate: c.rate,
    })?);
    let mut p = plan(c, conns, 1, Primary::Delivered);
    p.budget = c.messages;
    p.headline = Series::Delivery;
    p.label = "pubsub".into();
    let f = run::execute(p, c)?;
    let counters = &f.shared.counters;
    let expected = counters.published() * a.subscribers as u64;
    let delivered = Counters::get(&counters.delivered);
    let out_of_order = Counters::get(&counters.out_of_order);
    let checks = vec![
        equal_check(
            "delivered_equals_published_times_subscribers",
            delivered,
            expected,
            "pushes received",
        ),
        Check {
            name: "deliveries_in_order",
            ok: out_of_order == 0,
            detail: format!("{out_of_order} pushes repeated or out of order"),
            errors: out_of_order,
        },
    ];
    let mut extra = Map::new();
    extra.insert("expected_deliveries".into(), json!(expected));
    let config = json!({
        "subscribers": a.subscribers, "depth": a.depth, "size": a.payload.size.to_string(),
        "topic": topic, "priority_mix": a.payload.priority_mix,
    });
    Ok(finish(
        "pubsub",
        c,
        config,
        Outcome {
            finished: &f,
            primary: Primary::Delivered,
            payload_bytes: None,
            extra,
            checks,
        },
    ))
}

fn exchange(a: cli::ExchangeArgs) -> Result<(Value, bool), String> {
    let c = &a.common;
    check_counts(c, "--bindings", a.bindings)?;
    check_counts(c, "--connections", a.connections)?;
    let name = format!("{}.x", c.prefix);
    let queues: Vec<String> = (0..a.bindings)
        .map(|b| format!("{}.x.{b}", c.prefix))
        .collect();
    {
        let mut admin = control_client(c)?;
        // A leftover exchange of an earlier run would keep its bindings, and BIND appends
        // duplicates: start from a fresh one.
        let _ = admin.exchange_delete(&name);
        admin
            .exchange_declare(&name, "topic", false)
            .map_err(|e| format!("EXCHANGE_DECLARE {name}: {e}"))?;
        for (b, q) in queues.iter().enumerate() {
            admin
                .bind_queue(&name, q, &format!("r.{b}.*"), None, false)
                .map_err(|e| format!("BIND_QUEUE {q}: {e}"))?;
        }
    }
    let mix = priority_mix(a.payload.priority_mix.as_deref())?;
    let head = format!("\"exchange\":{},", json_str(&name));
    let tails: Vec<String> = (0..a.bindings)
        .map(|b| format!(",\"routing_key\":\"r.{b}.k\""))
        .collect();
    let conns = producer_specs(Producers {
        count: a.connections,
        depth: a.depth,
        op: Op::PublishExchange,
        templates: templates(op::PUBLISH_EXCHANGE, &head, &tails, &mix),
        payload: &a.payload,
        rate: c.rate,
    })?;
    let before = (!c.no_verify)
        .then(|| ready_messages(c, &queues))
        .transpose()?;
    let mut p = plan(c, conns, a.connections, Primary::Published);
    p.budget = c.messages;
    p.label = "exchange".into();
    let outcome = run::execute(p, c);
    let cleanup = control_client(c).and_then(|mut admin| {
        admin
            .exchange_delete(&name)
            .map_err(|e| format!("EXCHANGE_DELETE {name}: {e}"))
    });
    let f = outcome?;
    let mut checks = Vec::new();
    if let Some(before) = before {
        let after = ready_messages(c, &queues)?;
        checks.push(equal_check(
            "routed_equals_published",
            after.saturating_sub(before),
            f.shared.counters.published(),
            "messages STATS counts as ready in the bound queues",
        ));
    }
    if let Err(e) = cleanup {
        f.shared.error(None, &format!("cleanup: {e}"), 1);
    }
    let config = json!({
        "bindings": a.bindings, "connections": a.connections, "depth": a.depth,
        "size": a.payload.size.to_string(), "exchange": name, "priority_mix": a.payload.priority_mix,
    });
    Ok(finish(
        "exchange",
        c,
        config,
        Outcome {
            finished: &f,
            primary: Primary::Published,
            payload_bytes: None,
            extra: Map::new(),
            checks,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_check_counts_a_loss_and_a_surplus_and_passes_within() {
        let c = |got| range_check("c", got, 10, 12, "deliveries");
        assert!((c(10).ok, c(12).ok) == (true, true));
        assert_eq!((c(9).ok, c(9).errors), (false, 1), "one lost");
        assert_eq!((c(15).ok, c(15).errors), (false, 3), "three repeated");
        assert_eq!(c(15).detail, "deliveries: got 15, expected 10..=12");
    }

    #[test]
    fn priority_mixes() {
        assert_eq!(priority_mix(None).unwrap(), vec![(None, 1)]);
        let m = priority_mix(Some("0:80, 9:20")).unwrap();
        assert_eq!(m, vec![(Some(0), 80), (Some(9), 20)]);
        assert_eq!(cumulative(&m), vec![80, 100]);
        for bad in ["", "10:1", "1:0", "x", "1:2,"] {
            assert!(priority_mix(Some(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn help_mentions_the_transport_limits() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("WebSocket scenarios"), "{help}");
        for s in [
            "publish",
            "consume",
            "queue",
            "pubsub",
            "exchange",
            "chat",
            "channel",
            "reconnect",
        ] {
            assert!(help.contains(s), "{s} missing from help");
        }
    }

    #[test]
    fn every_scenario_parses_its_options() {
        let ok = |args: &str| {
            Cli::try_parse_from(std::iter::once("boltq-bench").chain(args.split_whitespace()))
                .unwrap_or_else(|e| panic!("{args}: {e}"))
        };
        ok("publish --connections 50 --depth 1 --size 100 --queues 4 --priority-mix 0:9,9:1");
        ok("consume --batch 100 --wait-ms 50 --prefill 1000 --json");
        ok("queue --producers 1 --consumers 1 --depth 64 --size 1024 --cpus 1 --warmup-secs 1");
        ok("pubsub --subscribers 10 --rate 1000 --messages 10");
        ok("exchange --bindings 100 --duration-secs 1 --max-errors 5");
        let secret = "--secret 0123456789abcdef0123456789abcdef";
        ok(&format!(
            "chat {secret} --devices 10000 --rate 10000 --kind group --group-size 4"
        ));
        ok(&format!(
            "chat {secret} --inbox --no-prime --depth 4 --url ws://h:1/ws --json"
        ));
        ok(&format!(
            "channel {secret} --listeners 1000 --senders 2 --membership-listen 127.0.0.1:1"
        ));
        ok(&format!(
            "reconnect {secret} --devices 10 --away-messages 3 --writers 2 --depth 8"
        ));
        assert!(Cli::try_parse_from(["boltq-bench", "publish", "--size", "10"]).is_err());
        assert!(
            Cli::try_parse_from(["boltq-bench", "chat"]).is_err(),
            "--secret is required"
        );
        assert!(Cli::try_parse_from(["boltq-bench", "chat", "--size", "23"]).is_err());
    }
}
