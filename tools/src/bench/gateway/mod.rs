//! `boltq-bench`'s WebSocket scenarios against the messaging gateway (issue 7): `chat`,
//! `channel` and `reconnect`.
//!
//! - [`topology`]: the run's users, devices and conversations (pure).
//! - [`ws`]: the client side of WebSocket; [`proto`]: gateway frames and payload stamps.
//! - [`engine`]: the event loop driving thousands of devices per thread.
//! - [`membership`]: a membership service for the run's own groups.
//!
//! Each scenario builds its topology and device list, runs them with the same timing,
//! progress line and report as the TCP scenarios ([`super::run`], [`super::report`]), and
//! checks the counts that must add up.

pub mod engine;
pub mod membership;
pub mod proto;
pub mod topology;
pub mod ws;

use super::cli::{ChannelArgs, ChatArgs, Common, ConversationKind, GatewayArgs, ReconnectArgs};
use super::poll::now_ns;
use super::report::{self, Check, ReportInput};
use super::run::{self, Finished, Plan, Primary};
use super::size_dist::SizeDist;
use super::stats::{Counters, Op, Series};
use boltq::client::TlsSession;
use boltq::messaging::identity::token::{mint_hs256, Claims};
use engine::{DeviceSpec, GwRun, ReconnectPlan};
use proto::SendTemplate;
use serde_json::{json, Map, Value};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use topology::{Conv, Kind, Names};

/// Shortest secret the server accepts for a key.
const SECRET_BYTES_MIN: usize = 32;
/// Default sends in flight per device in open loop (the schedule, not the window, sets the
/// pace; the window only bounds how far a stalled device falls behind).
const OPEN_LOOP_DEPTH_DEFAULT: usize = 16;

// ---- shared steps ------------------------------------------------------------------------------

/// What every gateway scenario needs before it can build devices.
struct Setup {
    names: Names,
    url: ws::Url,
    addr: SocketAddr,
    tls: Option<Arc<TlsSession>>,
    threads: usize,
    exp: i64,
    iat: i64,
}

fn resolve(url: &ws::Url) -> Result<SocketAddr, String> {
    (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", url.host))?
        .next()
        .ok_or_else(|| format!("no address for {}", url.host))
}

/// A `reconnect` address other than `--url` (`flag` names it in errors): plain `ws://`
/// only, and only with a plain `--url` (a run's TLS session is for one server).
fn other_endpoint(
    flag: &str,
    given: Option<&str>,
    url: &ws::Url,
) -> Result<Option<engine::Endpoint>, String> {
    let Some(given) = given else {
        return Ok(None);
    };
    let other = ws::parse_url(given).map_err(|e| format!("{flag}: {e}"))?;
    if other.tls || url.tls {
        return Err(format!("{flag} works with ws:// URLs only"));
    }
    let addr = resolve(&other).map_err(|e| format!("{flag}: {e}"))?;
    Ok(Some(engine::Endpoint { url: other, addr }))
}

fn prepare(common: &Common, gw: &GatewayArgs) -> Result<Setup, String> {
    if gw.secret.len() < SECRET_BYTES_MIN {
        return Err(format!(
            "--secret must be at least {SECRET_BYTES_MIN} bytes (the server refuses shorter keys)"
        ));
    }
    if gw.connect_concurrency == 0 {
        return Err("--connect-concurrency must be at least 1".into());
    }
    if let Some(t) = &gw.tenant {
        topology::check_id(t).map_err(|e| format!("--tenant: {e}"))?;
    }
    let run_secs = common.warmup_secs
        + common.duration_secs.unwrap_or(0.0)
        + common.drain_timeout_secs
        + common.request_timeout_secs;
    if gw.token_ttl_secs == 0 || (gw.token_ttl_secs as f64) < run_secs {
        return Err(format!(
            "--token-ttl-secs {} is shorter than the run could last ({run_secs:.0} s)",
            gw.token_ttl_secs
        ));
    }
    let run_id = gw.run_id.clone().unwrap_or_else(default_run_id);
    let names = Names::new(&common.prefix, &run_id)?;
    let url = ws::parse_url(&gw.url)?;
    let tls = url
        .tls
        .then(|| TlsSession::new(&super::tls_options(common), &url.authority()).map(Arc::new))
        .transpose()
        .map_err(|e| format!("{}: {e}", gw.url))?;
    let addr = resolve(&url)?;
    let cpus = common
        .cpus
        .as_ref()
        .map(|c| c.0.clone())
        .unwrap_or_default();
    if !cpus.is_empty() {
        // Before the membership thread starts, so it inherits the mask.
        super::cpus::pin_current_thread(&cpus).map_err(|e| format!("--cpus {cpus:?}: {e}"))?;
    }
    let threads = common.threads.unwrap_or(cpus.len().max(1)).max(1);
    let iat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs() as i64;
    Ok(Setup {
        names,
        url,
        addr,
        tls,
        threads,
        exp: iat + gw.token_ttl_secs as i64,
        iat,
    })
}

/// `r` and six hex digits of the wall clock: distinct for runs started at different times.
fn default_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let millis = (nanos / 1_000_000) as u64;
    format!(
        "r{:06x}",
        (millis ^ u64::from(std::process::id())) & 0xff_ffff
    )
}

fn mint(s: &Setup, gw: &GatewayArgs, user: &str, device: &str) -> String {
    let claims = Claims {
        sub: user.to_string(),
        did: Some(device.to_string()),
        tid: gw.tenant.clone(),
        exp: Some(s.exp),
        iat: Some(s.iat),
        ..Claims::default()
    };
    mint_hs256(Some(&gw.key_id), gw.secret.as_bytes(), &claims)
}

fn templates(convs: &[Conv]) -> Vec<SendTemplate> {
    convs
        .iter()
        .map(|c| SendTemplate::new(c.kind.as_str(), &c.id))
        .collect()
}

/// Per-device interval and each sender's offset for `rate` sends/s over `senders` devices.
fn schedule(rate: Option<f64>, senders: usize) -> Result<Option<u64>, String> {
    match rate {
        Some(r) if r > 0.0 && r.is_finite() => {
            Ok(Some(((senders.max(1) as f64 * 1e9 / r) as u64).max(1)))
        }
        Some(r) => Err(format!("--rate must be positive, got {r}")),
        None => Ok(None),
    }
}

fn phase_ns(interval: Option<u64>, k: usize, senders: usize) -> u64 {
    interval.map_or(0, |iv| iv * k as u64 / senders.max(1) as u64)
}

/// A run's worth of devices and the way they run.
struct Launch<'a> {
    common: &'a Common,
    setup: &'a Setup,
    specs: Vec<DeviceSpec>,
    run: GwRun,
    senders: usize,
    duration_secs: Option<f64>,
    budget: Option<u64>,
    primary: Primary,
    headline: Series,
    label: &'static str,
}

struct Ran {
    finished: Finished,
    run: Arc<GwRun>,
    setup_secs: f64,
}

fn launch(l: Launch<'_>) -> Result<Ran, String> {
    let c = l.common;
    let plan = Plan {
        conns: l.specs,
        senders: l.senders,
        primary: l.primary,
        headline: l.headline,
        budget: l.budget,
        duration_secs: l.duration_secs,
        warmup_secs: c.warmup_secs,
        drain_timeout_secs: c.drain_timeout_secs,
        request_timeout_secs: c.request_timeout_secs,
        progress: !c.quiet,
        label: l.label.to_string(),
        server: super::server_endpoint(c),
    };
    let mut common = c.clone();
    common.threads = Some(l.setup.threads);
    let run = Arc::new(l.run);
    let shared_run = run.clone();
    let t0 = now_ns();
    let finished = run::execute_with(plan, &common, move |wp, shared, ready, go| {
        engine::run_worker(wp, shared_run.clone(), shared, ready, go)
    })?;
    let go_ns = finished
        .shared
        .warmup_end()
        .saturating_sub((c.warmup_secs.max(0.0) * 1e9) as u64);
    Ok(Ran {
        finished,
        run,
        setup_secs: go_ns.saturating_sub(t0) as f64 / 1e9,
    })
}

/// Checks and counts every gateway scenario reports.
fn common_checks(ran: &Ran, checks: &mut Vec<Check>, extra: &mut Map<String, Value>) {
    let g = &ran.run.counters;
    let duplicates = Counters::get(&g.duplicates);
    let holes = Counters::get(&g.holes);
    checks.push(Check {
        name: "records_not_repeated",
        ok: duplicates == 0,
        detail: format!("{duplicates} records arrived again on a subscription"),
        errors: duplicates,
    });
    checks.push(Check {
        name: "records_not_skipped",
        ok: holes == 0,
        detail: format!("{holes} sequence numbers were skipped within a subscription"),
        errors: holes,
    });
    extra.insert(
        "setup_secs".into(),
        json!((ran.setup_secs * 1000.0).round() / 1000.0),
    );
    for (k, v) in [
        ("echoes", &g.echoes),
        ("inbox_pointers", &g.pointers),
        ("prime_sent", &g.prime_sent),
        ("prime_acked", &g.prime_acked),
        ("prime_deliveries", &g.prime_deliveries),
        ("sent_duplicates", &g.sent_duplicates),
    ] {
        let v = Counters::get(v);
        if v > 0 {
            extra.insert(k.into(), json!(v));
        }
    }
}

fn base_config(common: &Common, gw: &GatewayArgs, names: &Names, size: &SizeDist) -> Value {
    json!({
        "url": gw.url,
        "run": names.base(),
        "size": size.to_string(),
        "http": common.http,
        "loop": match common.rate {
            Some(r) => format!("open ({r} sends/s)"),
            None => "closed".to_string(),
        },
        "cpus": common.cpus.as_ref().map(|c| c.to_string()),
        "duration_secs": common.duration_secs,
        "messages": common.messages,
        "connect_concurrency": gw.connect_concurrency,
    })
}

fn start_membership(
    gw: &GatewayArgs,
    convs: &[Conv],
) -> Result<Option<membership::Service>, String> {
    gw.membership_listen
        .as_deref()
        .map(|listen| membership::start(listen, membership::Directory::new(convs)))
        .transpose()
}

// ---- chat --------------------------------------------------------------------------------------

pub fn chat(a: ChatArgs) -> Result<(Value, bool), String> {
    let c = &a.common;
    super::check_counts(c, "--devices", a.devices)?;
    let s = prepare(c, &a.gateway)?;
    let kind = match a.kind {
        ConversationKind::Direct => Kind::Direct,
        ConversationKind::Group => Kind::Group,
    };
    let size = if kind == Kind::Direct {
        2
    } else {
        a.group_size
    };
    let count = a.conversations.unwrap_or((a.devices / size.max(1)).max(1));
    if count == 0 {
        return Err("--conversations must be at least 1".into());
    }
    let convs = match kind {
        Kind::Direct => topology::direct_conversations(&s.names, a.devices, count)?,
        Kind::Group => topology::groups(&s.names, a.devices, count, size)?,
    };
    let member_of = topology::memberships(&s.names, a.devices, &convs)?;
    let senders = member_of.iter().filter(|l| !l.is_empty()).count();
    let interval = schedule(c.rate, senders)?;
    let depth = a.depth.unwrap_or(if interval.is_some() {
        OPEN_LOOP_DEPTH_DEFAULT
    } else {
        1
    });
    if depth == 0 {
        return Err("--depth must be at least 1".into());
    }
    // The lowest-numbered member of each conversation primes it (creating its topic during
    // setup).
    let mut primes = vec![Vec::new(); a.devices];
    if !a.no_prime {
        let mut primed = vec![false; convs.len()];
        for (i, of) in member_of.iter().enumerate() {
            for &j in of {
                if !primed[j] {
                    primed[j] = true;
                    primes[i].push(j);
                }
            }
        }
    }
    let mut specs = Vec::with_capacity(a.devices);
    let mut k = 0;
    for (i, (of, prime)) in member_of.iter().zip(primes).enumerate() {
        let user = s.names.user(i);
        let device = s.names.device(i);
        let mut subs: Vec<(String, bool)> = of
            .iter()
            .map(|&j| (convs[j].topic.clone(), false))
            .collect();
        if a.inbox {
            subs.push((format!("chat.inbox.{user}"), true));
        }
        let phase = if of.is_empty() {
            0
        } else {
            phase_ns(interval, k, senders)
        };
        k += usize::from(!of.is_empty());
        specs.push(DeviceSpec {
            index: i as u32,
            token: mint(&s, &a.gateway, &user, &device),
            device,
            subs,
            targets: of.clone(),
            primes: prime,
            roams: false,
            phase_ns: phase,
        });
    }
    let service = start_membership(&a.gateway, &convs)?;
    let threads = s.threads.min(a.devices).max(1);
    let run = GwRun {
        url: s.url.clone(),
        addr: s.addr,
        tls: s.tls.clone(),
        templates: templates(&convs),
        sizes: a.payload.size.clone(),
        filler_b64: proto::filler_b64(a.payload.size.max() as usize),
        interval_ns: interval,
        depth,
        connect_concurrency: a.gateway.connect_concurrency.div_ceil(threads),
        reconnect: None,
        recipients: size as u64 - 1,
        echoes: true,
        pointers_per_send: if a.inbox && size <= 256 {
            size as u64
        } else {
            0
        },
        counters: Default::default(),
    };
    let ran = launch(Launch {
        common: c,
        setup: &s,
        specs,
        run,
        senders,
        duration_secs: super::sender_duration(c),
        budget: c.messages,
        primary: Primary::Published,
        headline: Series::Delivery,
        label: "chat",
    })?;
    let f = &ran.finished;
    let g = &ran.run.counters;
    let published = f.shared.counters.published();
    let expected = published * (size as u64 - 1);
    // A send answered with an error may still have been stored (a cluster's "outcome
    // unknown" while a leader dies): it is then delivered like an acknowledged one. Fewer
    // deliveries than acknowledged sends is a loss; more than all sends tried, a repeat.
    let unknown = f.shared.counters.publish_errors();
    let mut checks = vec![
        super::range_check(
            "delivered_covers_sends_times_recipients",
            Counters::get(&f.shared.counters.delivered),
            expected,
            (published + unknown) * (size as u64 - 1),
            "records delivered to the other members (acknowledged sends, up to every send answered with an error too)",
        ),
        super::range_check(
            "echoes_cover_sends",
            Counters::get(&g.echoes),
            published,
            published + unknown,
            "senders' own messages back on their subscriptions",
        ),
    ];
    if ran.run.pointers_per_send > 0 {
        let sends = published + Counters::get(&g.prime_acked);
        checks.push(super::equal_check(
            "pointers_equal_sends_times_members",
            Counters::get(&g.pointers),
            sends * ran.run.pointers_per_send,
            "inbox pointer records",
        ));
    }
    let mut extra = Map::new();
    extra.insert("expected_deliveries".into(), json!(expected));
    extra.insert("recipients_per_send".into(), json!(size - 1));
    common_checks(&ran, &mut checks, &mut extra);
    if let Some(svc) = &service {
        extra.insert("membership_calls".into(), json!(svc.calls()));
    }
    let mut config = base_config(c, &a.gateway, &s.names, &a.payload.size);
    config["devices"] = json!(a.devices);
    config["conversations"] = json!(convs.len());
    config["kind"] = json!(kind.as_str());
    config["members"] = json!(size);
    config["sending_devices"] = json!(senders);
    config["depth"] = json!(depth);
    config["inbox"] = json!(a.inbox);
    Ok(build(
        "chat",
        c,
        config,
        &ran,
        Primary::Published,
        extra,
        checks,
    ))
}

#[allow(clippy::too_many_arguments)]
fn build(
    scenario: &'static str,
    c: &Common,
    config: Value,
    ran: &Ran,
    primary: Primary,
    extra: Map<String, Value>,
    mut checks: Vec<Check>,
) -> (Value, bool) {
    server_check(c, &ran.finished, &mut checks);
    report::build(ReportInput {
        scenario,
        config,
        finished: &ran.finished,
        primary,
        payload_bytes: None,
        warmup_secs: c.warmup_secs,
        max_errors: c.max_errors,
        extra,
        checks,
    })
}

/// With `--http` and no warm-up the two scrapes enclose every measured send (setup's prime
/// sends come before the first), so the gateway's send counter must have grown by exactly
/// the sends the generator saw acknowledged.
fn server_check(c: &Common, f: &Finished, checks: &mut Vec<Check>) {
    let Some(Ok(w)) = &f.server else { return };
    let Some(theirs) = w.delta("gateway_sends").filter(|_| c.warmup_secs <= 0.0) else {
        return;
    };
    let ours = Counters::get(&f.shared.counters.acknowledged[Op::Send as usize]);
    checks.push(super::equal_check(
        "server_sends_delta_equals_acknowledged",
        theirs,
        ours,
        "/metrics gateway_sends",
    ));
}

// ---- channel -----------------------------------------------------------------------------------

pub fn channel(a: ChannelArgs) -> Result<(Value, bool), String> {
    let c = &a.common;
    super::check_counts(c, "--listeners", a.listeners)?;
    super::check_counts(c, "--senders", a.senders)?;
    let s = prepare(c, &a.gateway)?;
    let total = a.listeners + a.senders;
    if total > topology::GROUP_MEMBERS_MAX {
        return Err(format!(
            "a channel has at most {} members (listeners + senders)",
            topology::GROUP_MEMBERS_MAX
        ));
    }
    let members: Vec<String> = (0..total).map(|i| s.names.user(i)).collect();
    let convs = vec![Conv::group(format!("{}-chan", s.names.base()), members)];
    let interval = schedule(c.rate, a.senders)?;
    let depth = a.depth.unwrap_or(if interval.is_some() {
        OPEN_LOOP_DEPTH_DEFAULT
    } else {
        1
    });
    if depth == 0 {
        return Err("--depth must be at least 1".into());
    }
    let specs: Vec<DeviceSpec> = (0..total)
        .map(|i| {
            let (user, device) = (s.names.user(i), s.names.device(i));
            let sender = i >= a.listeners;
            DeviceSpec {
                index: i as u32,
                token: mint(&s, &a.gateway, &user, &device),
                device,
                subs: if sender {
                    Vec::new()
                } else {
                    vec![(convs[0].topic.clone(), false)]
                },
                targets: if sender { vec![0] } else { Vec::new() },
                primes: if i == a.listeners {
                    vec![0]
                } else {
                    Vec::new()
                },
                roams: false,
                phase_ns: if sender {
                    phase_ns(interval, i - a.listeners, a.senders)
                } else {
                    0
                },
            }
        })
        .collect();
    let service = start_membership(&a.gateway, &convs)?;
    let threads = s.threads.min(total).max(1);
    let run = GwRun {
        url: s.url.clone(),
        addr: s.addr,
        tls: s.tls.clone(),
        templates: templates(&convs),
        sizes: a.payload.size.clone(),
        filler_b64: proto::filler_b64(a.payload.size.max() as usize),
        interval_ns: interval,
        depth,
        connect_concurrency: a.gateway.connect_concurrency.div_ceil(threads),
        reconnect: None,
        recipients: a.listeners as u64,
        echoes: false,
        pointers_per_send: 0,
        counters: Default::default(),
    };
    let ran = launch(Launch {
        common: c,
        setup: &s,
        specs,
        run,
        senders: a.senders,
        duration_secs: super::sender_duration(c),
        budget: c.messages,
        primary: Primary::Delivered,
        headline: Series::Delivery,
        label: "channel",
    })?;
    let f = &ran.finished;
    let expected = f.shared.counters.published() * a.listeners as u64;
    let mut checks = vec![super::equal_check(
        "delivered_equals_sends_times_listeners",
        Counters::get(&f.shared.counters.delivered),
        expected,
        "records delivered to listeners",
    )];
    let mut extra = Map::new();
    extra.insert("expected_deliveries".into(), json!(expected));
    common_checks(&ran, &mut checks, &mut extra);
    if let Some(svc) = &service {
        extra.insert("membership_calls".into(), json!(svc.calls()));
    }
    let mut config = base_config(c, &a.gateway, &s.names, &a.payload.size);
    config["listeners"] = json!(a.listeners);
    config["senders"] = json!(a.senders);
    config["depth"] = json!(depth);
    config["group"] = json!(convs[0].id);
    Ok(build(
        "channel",
        c,
        config,
        &ran,
        Primary::Delivered,
        extra,
        checks,
    ))
}

// ---- reconnect ---------------------------------------------------------------------------------

pub fn reconnect(a: ReconnectArgs) -> Result<(Value, bool), String> {
    let c = &a.common;
    super::check_counts(c, "--devices", a.devices)?;
    super::check_counts(c, "--writers", a.writers)?;
    if a.depth == 0 {
        return Err("--depth must be at least 1".into());
    }
    if c.rate.is_some() || c.messages.is_some() || c.duration_secs.is_some() {
        return Err(
            "reconnect runs its phases to the end: --rate, --messages and --duration-secs do \
             not apply (bound it with --drain-timeout-secs)"
                .into(),
        );
    }
    if a.group_size == 0 || a.group_size > a.devices {
        return Err("--group-size must be between 1 and --devices".into());
    }
    let s = prepare(c, &a.gateway)?;
    let writer = s.names.writer_user();
    let g = a.group_size;
    // Device i is in conversation i / g: a direct one with the writer, or a group of g
    // devices and the writer.
    let convs: Vec<Conv> = (0..a.devices.div_ceil(g))
        .map(|j| {
            if g == 1 {
                return Conv::direct(&s.names.user(j), &writer);
            }
            let mut members: Vec<String> = (j * g..((j + 1) * g).min(a.devices))
                .map(|i| s.names.user(i))
                .collect();
            members.push(writer.clone());
            Conv::group(s.names.group(j), members)
        })
        .collect();
    if a.writers > convs.len() {
        return Err("--writers must not exceed the number of conversations".into());
    }
    let mut specs: Vec<DeviceSpec> = (0..a.devices)
        .map(|i| {
            let (user, device) = (s.names.user(i), s.names.device(i));
            let j = i / g;
            DeviceSpec {
                index: i as u32,
                token: mint(&s, &a.gateway, &user, &device),
                device,
                subs: vec![(convs[j].topic.clone(), false)],
                targets: Vec::new(),
                // The first device of each conversation creates it.
                primes: if i % g == 0 { vec![j] } else { Vec::new() },
                roams: true,
                phase_ns: 0,
            }
        })
        .collect();
    for k in 0..a.writers {
        let device = s.names.writer_device(k);
        specs.push(DeviceSpec {
            index: (a.devices + k) as u32,
            token: mint(&s, &a.gateway, &writer, &device),
            device,
            subs: Vec::new(),
            targets: (k..convs.len()).step_by(a.writers).collect(),
            primes: Vec::new(),
            roams: false,
            phase_ns: 0,
        });
    }
    let service = start_membership(&a.gateway, &convs)?;
    let threads = s.threads.min(specs.len()).max(1);
    let run = GwRun {
        url: s.url.clone(),
        addr: s.addr,
        tls: s.tls.clone(),
        templates: templates(&convs),
        sizes: a.payload.size.clone(),
        filler_b64: proto::filler_b64(a.payload.size.max() as usize),
        interval_ns: None,
        depth: a.depth,
        connect_concurrency: a.gateway.connect_concurrency.div_ceil(threads),
        reconnect: Some(ReconnectPlan {
            devices: a.devices as u64,
            away: a.away_messages,
            resume_at: other_endpoint("--resume-url", a.resume_url.as_deref(), &s.url)?,
            writers_at: other_endpoint("--writer-url", a.writer_url.as_deref(), &s.url)?,
            while_away_cmd: a.while_away_cmd.clone(),
        }),
        recipients: g as u64,
        echoes: false,
        pointers_per_send: 0,
        counters: Default::default(),
    };
    let ran = launch(Launch {
        common: c,
        setup: &s,
        specs,
        run,
        senders: a.writers,
        duration_secs: None,
        budget: None,
        primary: Primary::Delivered,
        headline: Series::CatchUp,
        label: "reconnect",
    })?;
    let f = &ran.finished;
    let gc = &ran.run.counters;
    let n = a.devices as u64;
    let written = f.shared.counters.published();
    // Each device expects `away` records; a write to a group reaches all its devices.
    let delivered_expected: u64 = convs
        .iter()
        .map(|cv| cv.members.len() as u64 - 1)
        .sum::<u64>()
        * a.away_messages;
    let mut checks = vec![
        super::equal_check(
            "every_write_acknowledged",
            written,
            convs.len() as u64 * a.away_messages,
            "messages written while the devices were away",
        ),
        // On another node a device starts a fresh session: every welcome then counts.
        if a.resume_url.is_some() {
            super::equal_check(
                "every_device_welcomed_back",
                Counters::get(&gc.resumed) + Counters::get(&gc.not_resumed),
                n,
                "welcomes on the --resume-url node",
            )
        } else {
            super::equal_check(
                "every_device_resumed",
                Counters::get(&gc.resumed),
                n,
                "welcomes with resumed: true",
            )
        },
        super::equal_check(
            "every_device_caught_up",
            Counters::get(&gc.caught_up),
            n,
            "devices that received everything written while away",
        ),
        super::equal_check(
            "delivered_equals_written_times_devices",
            Counters::get(&f.shared.counters.delivered),
            delivered_expected,
            "records delivered after the resume",
        ),
    ];
    let mut extra = Map::new();
    let start = Counters::get(&gc.reconnect_start_ns);
    let last = Counters::get(&gc.last_caught_up_ns);
    if start > 0 && last >= start {
        let secs = (last - start) as f64 / 1e9;
        extra.insert(
            "all_caught_up_secs".into(),
            json!((secs * 1000.0).round() / 1000.0),
        );
    }
    extra.insert(
        "disconnected".into(),
        json!(Counters::get(&gc.disconnected)),
    );
    extra.insert("resumed".into(), json!(Counters::get(&gc.resumed)));
    extra.insert("not_resumed".into(), json!(Counters::get(&gc.not_resumed)));
    extra.insert(
        "send_retries".into(),
        json!(Counters::get(&gc.send_retries)),
    );
    extra.insert("caught_up".into(), json!(Counters::get(&gc.caught_up)));
    extra.insert("expected_deliveries".into(), json!(delivered_expected));
    common_checks(&ran, &mut checks, &mut extra);
    if let Some(svc) = &service {
        extra.insert("membership_calls".into(), json!(svc.calls()));
    }
    let mut config = base_config(c, &a.gateway, &s.names, &a.payload.size);
    config["devices"] = json!(a.devices);
    config["away_messages"] = json!(a.away_messages);
    config["writers"] = json!(a.writers);
    config["group_size"] = json!(g);
    config["conversations"] = json!(convs.len());
    config["depth"] = json!(a.depth);
    Ok(build(
        "reconnect",
        c,
        config,
        &ran,
        Primary::Delivered,
        extra,
        checks,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_loop_schedule() {
        assert_eq!(schedule(None, 10).unwrap(), None);
        // 10,000 devices at 10,000 sends/s: each sends once a second.
        assert_eq!(
            schedule(Some(10_000.0), 10_000).unwrap(),
            Some(1_000_000_000)
        );
        assert!(schedule(Some(0.0), 1).is_err());
        assert!(schedule(Some(f64::NAN), 1).is_err());
        let iv = Some(1_000);
        let phases: Vec<u64> = (0..4).map(|k| phase_ns(iv, k, 4)).collect();
        assert_eq!(phases, vec![0, 250, 500, 750], "spread over one interval");
    }

    #[test]
    fn run_ids_are_valid_id_suffixes() {
        let id = default_run_id();
        assert!(topology::check_id(&id).is_ok(), "{id}");
        assert_eq!(id.len(), 7);
    }
}
