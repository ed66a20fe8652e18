//! Running a plan: start the loop threads, keep time (warm-up, duration, drain), print the
//! per-second progress line, and collect what the report needs.

use super::cli::Common;
use super::engine::{self, ConnSpec, Target, WorkerPlan};
use super::poll::now_ns;
use super::server_metrics::{self, Endpoint, Scrape, Window};
use super::stats::{Counters, Series, Shared};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;

/// The counter a scenario's headline rate is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Primary {
    Published,
    Consumed,
    Delivered,
}

/// What to run: `C` is one connection's description, [`ConnSpec`] for the TCP engine.
pub struct Plan<C = ConnSpec> {
    pub conns: Vec<C>,
    /// Connections that send messages (producers); consumers wait for them.
    pub senders: usize,
    pub primary: Primary,
    /// Latency series shown in the progress line.
    pub headline: Series,
    /// Bound on sends (`--messages` for sending scenarios).
    pub budget: Option<u64>,
    /// `None`: run until every connection finished (bounded by a message count or a target).
    pub duration_secs: Option<f64>,
    pub warmup_secs: f64,
    pub drain_timeout_secs: f64,
    /// Per-request bound (long-poll waits included).
    pub request_timeout_secs: f64,
    pub progress: bool,
    pub label: String,
    /// `--http`: scrape the server's `/metrics` when measuring starts and after the run.
    pub server: Option<Endpoint>,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    pub at_ns: u64,
    pub published: u64,
    pub consumed: u64,
    pub delivered: u64,
}

impl Snapshot {
    fn take(c: &Counters, at_ns: u64) -> Snapshot {
        Snapshot {
            at_ns,
            published: c.published(),
            consumed: Counters::get(&c.consumed),
            delivered: Counters::get(&c.delivered),
        }
    }

    fn primary(&self, p: Primary) -> u64 {
        match p {
            Primary::Published => self.published,
            Primary::Consumed => self.consumed,
            Primary::Delivered => self.delivered,
        }
    }
}

/// What a finished run hands to the report.
pub struct Finished {
    pub shared: Arc<Shared>,
    /// Counters when measuring started (end of warm-up) and when it ended (stop, or the
    /// moment the last connection finished).
    pub window_start: Snapshot,
    pub window_end: Snapshot,
    /// With `--http`: the server's counts around the run, or why a scrape failed.
    pub server: Option<Result<Window, String>>,
}

impl Finished {
    pub fn window_secs(&self) -> f64 {
        self.window_end
            .at_ns
            .saturating_sub(self.window_start.at_ns) as f64
            / 1e9
    }

    pub fn rate(&self, p: Primary) -> f64 {
        let secs = self.window_secs();
        if secs <= 0.0 {
            return 0.0;
        }
        (self.window_end.primary(p) - self.window_start.primary(p)) as f64 / secs
    }
}

fn secs_ns(s: f64) -> u64 {
    (s.max(0.0) * 1e9) as u64
}

/// Runs `plan` against `common.addr`; Err when setup (connect, AUTH, SUBSCRIBE) failed.
pub fn execute(plan: Plan, common: &Common) -> Result<Finished, String> {
    let target = Target {
        addr: common.addr.clone(),
        api_key: common.api_key.clone(),
        tls: super::tls_session(common)?,
    };
    execute_with(plan, common, move |wp, shared, ready, go| {
        engine::run_worker(wp, target.clone(), shared, ready, go)
    })
}

/// How a loop thread runs: set up its connections, report the outcome on the sender, wait
/// at the barrier, then drive them until every one has finished (see [`engine::run_worker`]).
pub trait Worker<C>:
    Fn(WorkerPlan<C>, Arc<Shared>, Sender<Result<(), String>>, Arc<Barrier>) + Clone + Send + 'static
{
}

impl<C, F> Worker<C> for F where
    F: Fn(WorkerPlan<C>, Arc<Shared>, Sender<Result<(), String>>, Arc<Barrier>)
        + Clone
        + Send
        + 'static
{
}

/// [`execute`] with any engine: spreads `plan.conns` round-robin over the loop threads, each
/// running `worker`, and keeps time as described in the module doc.
pub fn execute_with<C: Send + 'static>(
    mut plan: Plan<C>,
    common: &Common,
    worker: impl Worker<C>,
) -> Result<Finished, String> {
    let cpus = common
        .cpus
        .as_ref()
        .map(|c| c.0.clone())
        .unwrap_or_default();
    if !cpus.is_empty() {
        // The reporter thread too: nothing of the generator may land on the server's core.
        super::cpus::pin_current_thread(&cpus).map_err(|e| format!("--cpus {cpus:?}: {e}"))?;
    }
    let threads = common
        .threads
        .unwrap_or(cpus.len().max(1))
        .clamp(1, plan.conns.len().max(1));
    let mut per_worker: Vec<WorkerPlan<C>> = (0..threads)
        .map(|w| WorkerPlan {
            cpu: (!cpus.is_empty()).then(|| cpus[w % cpus.len()]),
            conns: Vec::new(),
        })
        .collect();
    for (i, c) in std::mem::take(&mut plan.conns).into_iter().enumerate() {
        per_worker[i % threads].conns.push(c);
    }

    let shared = Arc::new(Shared::new(
        plan.budget,
        plan.senders,
        secs_ns(plan.request_timeout_secs),
    ));
    let go = Arc::new(Barrier::new(threads + 1));
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut handles = Vec::new();
    for (w, wp) in per_worker.into_iter().enumerate() {
        let (f, s, r, g) = (worker.clone(), shared.clone(), ready_tx.clone(), go.clone());
        let h = std::thread::Builder::new()
            .name(format!("bench-{w}"))
            .spawn(move || f(wp, s, r, g))
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        handles.push(h);
    }
    drop(ready_tx);
    let mut setup_error = None;
    for _ in 0..threads {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => setup_error = setup_error.or(Some(e)),
            Err(_) => setup_error = setup_error.or(Some("a thread died during setup".into())),
        }
    }
    let mut server_before: Result<Scrape, String> = Err("not scraped".into());
    if let (None, Some(ep)) = (&setup_error, &plan.server) {
        server_before = server_metrics::scrape(ep, now_ns());
        if let Err(e) = &server_before {
            setup_error = Some(e.clone());
        }
    }
    if let Some(e) = setup_error {
        // Deadline 0 with stop set tells every thread to leave right after the barrier.
        shared.set_stop(now_ns());
        shared.drain_deadline_ns.store(0, Ordering::Relaxed);
        go.wait();
        for h in handles {
            let _ = h.join();
        }
        return Err(e);
    }

    let start = now_ns();
    let warmup_end = start + secs_ns(plan.warmup_secs);
    shared.warmup_end_ns.store(warmup_end, Ordering::Relaxed);
    let stop_at = plan.duration_secs.map(|d| warmup_end + secs_ns(d));
    let drain_ns = secs_ns(plan.drain_timeout_secs);
    go.wait();

    let mut window_start = None;
    let mut window_end = None;
    let mut next_tick = start + 1_000_000_000;
    let mut last_tick = Snapshot::take(&shared.counters, start);
    loop {
        let now = now_ns();
        let all_done = handles.iter().all(|h| h.is_finished());
        if window_start.is_none() && (now >= warmup_end || all_done) {
            window_start = Some(Snapshot::take(&shared.counters, now.min(warmup_end)));
            if let (true, Some(ep)) = (plan.warmup_secs > 0.0 && !all_done, &plan.server) {
                // Measuring starts after the warm-up: so do the server's counts.
                server_before = server_metrics::scrape(ep, now_ns());
            }
        }
        if all_done {
            break;
        }
        if let Some(stop) = stop_at {
            if now >= stop && !shared.stopped() {
                shared.set_stop(now);
                window_end = Some(Snapshot::take(&shared.counters, now));
                shared.start_drain(now, drain_ns);
            }
        }
        if plan.senders > 0 && shared.senders_live.load(Ordering::Relaxed) == 0 {
            // Every sender is done: consumers and subscribers get the drain timeout to catch
            // up, then whatever is missing counts as errors.
            shared.start_drain(now, drain_ns);
        }
        if now >= next_tick {
            if plan.progress {
                let snap = Snapshot::take(&shared.counters, now);
                progress_line(&plan, &shared, &last_tick, &snap, start, warmup_end);
                last_tick = snap;
            }
            next_tick += 1_000_000_000;
        }
        let mut wake = next_tick.min(now + 20_000_000);
        if let Some(stop) = stop_at.filter(|_| !shared.stopped()) {
            wake = wake.min(stop);
        }
        if window_start.is_none() {
            wake = wake.min(warmup_end);
        }
        std::thread::sleep(Duration::from_nanos(wake.saturating_sub(now).max(100_000)));
    }
    for h in handles {
        if h.join().is_err() {
            shared.error(None, "generator: a thread panicked", 1);
        }
    }
    let end = now_ns();
    let window_start = window_start.unwrap_or_else(|| Snapshot::take(&shared.counters, end));
    let window_end = window_end.unwrap_or_else(|| Snapshot::take(&shared.counters, end));
    let server = plan.server.as_ref().map(|ep| {
        let before = server_before?;
        let after = server_metrics::scrape(ep, now_ns())?;
        Ok(Window { before, after })
    });
    if let Some(Err(e)) = &server {
        shared.error(None, &format!("server metrics: {e}"), 1);
    }
    Ok(Finished {
        shared,
        window_start,
        window_end,
        server,
    })
}

fn progress_line<C>(
    plan: &Plan<C>,
    shared: &Shared,
    prev: &Snapshot,
    now: &Snapshot,
    start: u64,
    warmup_end: u64,
) {
    let secs = (now.at_ns - prev.at_ns) as f64 / 1e9;
    let rate = (now.primary(plan.primary) - prev.primary(plan.primary)) as f64 / secs;
    // The max beside the p99: a second whose max jumps held a stall (the histogram is
    // cumulative, so a short one barely moves the p99).
    let (p99, max) = {
        let h = shared.hists.lock().unwrap();
        let h = h.get(plan.headline);
        if h.is_empty() {
            ("-".to_string(), "-".to_string())
        } else {
            let ms = |ns: u64| format!("{:.3} ms", ns as f64 / 1e6);
            (ms(h.value_at_quantile(0.99)), ms(h.max()))
        }
    };
    let phase = if now.at_ns < warmup_end {
        " (warm-up)"
    } else {
        ""
    };
    eprintln!(
        "[{:>6.1}s] {}: {} msg/s  {} p99 so far {}, max {}  errors {}{}",
        (now.at_ns - start) as f64 / 1e9,
        plan.label,
        thousands(rate as u64),
        plan.headline.name(),
        p99,
        max,
        shared.counters.errors_total(),
        phase
    );
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let groups: Vec<&str> = digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|g| std::str::from_utf8(g).expect("ASCII digits"))
        .collect();
    groups.join(",")
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands() {
        assert_eq!(super::thousands(0), "0");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1000), "1,000");
        assert_eq!(super::thousands(1234567), "1,234,567");
    }
}
