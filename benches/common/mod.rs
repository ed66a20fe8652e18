//! The timing harness of the micro-benchmarks (`benches/`, and `shards/benches/` through a
//! `#[path]` include): no criterion, only std.
//!
//! A case runs [`WARMUP_REPS`] untimed repetitions, then [`reps`] timed ones; each
//! repetition gets a fresh state from `setup` (untimed) and performs `ops` operations on it
//! in `run` (timed).
//! One line per case: the median ns per operation and operations per second over the
//! repetitions, the best repetition's ns per operation, then the median of any extra figure
//! the case reports. The median is the headline; the machine is shared and noisy
//! (docs/benchmarks.md).
//!
//! A filter argument selects cases by substring (`cargo bench --bench <name> -- publish`);
//! arguments starting with `-` (cargo's `--bench`) are ignored. `BOLTQ_BENCH_REPS` sets the
//! repetitions.

#![allow(dead_code)] // each bench binary uses a different subset

use std::time::Instant;

/// Repetitions when `BOLTQ_BENCH_REPS` is not set.
pub const REPS_DEFAULT: usize = 7;
/// Untimed repetitions before the timed ones (caches, allocator, branch predictors).
pub const WARMUP_REPS: usize = 2;

/// Whether the case `name` is selected by the command line's filters (substring match).
pub fn selected(name: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
}

pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn reps() -> usize {
    env_u64("BOLTQ_BENCH_REPS", REPS_DEFAULT as u64).max(1) as usize
}

/// One timed repetition: its operations, elapsed ns, and extra figures by label.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub ops: u64,
    pub elapsed_ns: u64,
    pub extra: Vec<(&'static str, f64)>,
}

impl Sample {
    pub fn ns_per_op(&self) -> f64 {
        self.elapsed_ns as f64 / self.ops.max(1) as f64
    }
}

/// Runs the case `name` if selected: `setup` builds each repetition's state untimed, `run`
/// performs `ops` operations on it timed, and the state is dropped untimed.
pub fn bench<S>(name: &str, ops: u64, setup: impl FnMut() -> S, run: impl FnMut(&mut S)) {
    bench_with(name, ops, &[], setup, run)
}

/// [`bench`] with figures known beforehand (e.g. bytes per operation) printed after ops/s.
pub fn bench_with<S>(
    name: &str,
    ops: u64,
    extra: &[(&'static str, f64)],
    mut setup: impl FnMut() -> S,
    mut run: impl FnMut(&mut S),
) {
    if !selected(name) {
        return;
    }
    let mut samples = Vec::new();
    for rep in 0..WARMUP_REPS + reps() {
        let mut state = setup();
        let started = Instant::now();
        run(&mut state);
        let elapsed_ns = started.elapsed().as_nanos() as u64;
        drop(state);
        if rep >= WARMUP_REPS {
            samples.push(Sample {
                ops,
                elapsed_ns,
                extra: extra.to_vec(),
            });
        }
    }
    report(name, &samples);
}

/// Prints `name  ns/op  ops/s  best=<ns/op>  extra…`: medians over the samples, and the
/// fastest repetition, which shows how much of the spread is noise from other work on the
/// machine. Every sample must carry the same extras in the same order.
pub fn report(name: &str, samples: &[Sample]) {
    assert!(!samples.is_empty(), "{name}: no samples");
    let all_ns: Vec<f64> = samples.iter().map(Sample::ns_per_op).collect();
    let best_ns = all_ns.iter().cloned().fold(f64::INFINITY, f64::min);
    let ns = median(all_ns);
    let mut line = format!(
        "{name:<44} {:>10} ns/op {:>14} ops/s  best={}",
        fmt_num(ns),
        fmt_num(1e9 / ns),
        fmt_num(best_ns)
    );
    for (i, (label, _)) in samples[0].extra.iter().enumerate() {
        let m = median(samples.iter().map(|s| s.extra[i].1).collect());
        line.push_str(&format!("  {label}={}", fmt_num(m)));
    }
    println!("{line}");
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let n = v.len();
    assert!(n > 0, "median of nothing");
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Readable numbers: thousands separated from 1,000 on, one decimal from 10, else three.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v.abs() < 10.0 {
        return format!("{v:.3}");
    }
    if v.abs() < 1000.0 {
        return format!("{v:.1}");
    }
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}
