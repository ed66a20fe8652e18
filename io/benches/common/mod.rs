//! A tiny timing harness shared by the storage benchmarks (no criterion: these benches
//! drive glommio executors and real disks, where a statistics framework adds nothing).
//!
//! Each benchmark produces one [`Sample`] per repetition; [`report`] prints one markdown
//! table row per benchmark with the median and the best repetition, so the output can be
//! pasted into a report as is. The median is the headline number; the best shows how much
//! of the spread is noise from the shared VM and its disk (platform.md §5).

#![allow(dead_code)] // each bench binary uses a different subset

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One repetition: how long it took, how many operations and payload bytes it covered, and
/// any benchmark-specific figures (commit rounds, phases) to report by their median.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub elapsed: Duration,
    pub ops: u64,
    pub bytes: u64,
    pub extra: Vec<(&'static str, f64)>,
}

impl Sample {
    pub fn ns_per_op(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.ops.max(1) as f64
    }

    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64() / 1e6
    }
}

/// The command-line filter (`selected`: names given as arguments select benchmarks by
/// substring; cargo's own `--bench` flag is ignored) and `BOLTQ_BENCH_*` knobs (`env_u64`)
/// are the root crate's micro-benchmark harness's, included by path so both read the
/// command line the same way.
#[path = "../../../benches/common/mod.rs"]
mod harness;
pub use harness::{env_u64, selected};

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn print_header(extra: &[&str]) {
    let mut cols = vec![
        "bench",
        "reps",
        "ns/op median",
        "ns/op best",
        "ops/s median",
        "ops/s best",
        "MB/s median",
    ];
    cols.extend_from_slice(extra);
    println!("| {} |", cols.join(" | "));
    println!("|{}", " --- |".repeat(cols.len()));
}

/// Prints one table row: median and best over the samples, then the median of each extra.
pub fn report(name: &str, samples: &[Sample]) {
    let ns: Vec<f64> = samples.iter().map(Sample::ns_per_op).collect();
    let ops: Vec<f64> = samples.iter().map(Sample::ops_per_s).collect();
    let mbs: Vec<f64> = samples.iter().map(Sample::mb_per_s).collect();
    let best_ns = ns.iter().cloned().fold(f64::INFINITY, f64::min);
    let best_ops = ops.iter().cloned().fold(0.0, f64::max);
    let mut row = vec![
        name.to_string(),
        samples.len().to_string(),
        fmt_num(median(ns)),
        fmt_num(best_ns),
        fmt_num(median(ops)),
        fmt_num(best_ops),
        format!("{:.1}", median(mbs)),
    ];
    if let Some(first) = samples.first() {
        for (i, (label, _)) in first.extra.iter().enumerate() {
            let m = median(samples.iter().map(|s| s.extra[i].1).collect());
            row.push(format!("{label}={}", fmt_num(m)));
        }
    }
    println!("| {} |", row.join(" | "));
}

/// Readable numbers: three significant digits, thousands separated.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v.abs() >= 1000.0 {
        let s = format!("{:.0}", v);
        let neg = s.starts_with('-');
        let digits: Vec<char> = s.trim_start_matches('-').chars().collect();
        let mut out = String::new();
        let lead = digits.len() % 3; // digits before the first separator (0 means 3)
        for (i, c) in digits.iter().enumerate() {
            if i > 0 && i % 3 == lead {
                out.push(',');
            }
            out.push(*c);
        }
        if neg {
            format!("-{out}")
        } else {
            out
        }
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Times `f` (which performs `ops` operations over `bytes` payload bytes per call):
/// `warmup` untimed calls, then `reps` timed ones.
pub fn time_sync(
    warmup: usize,
    reps: usize,
    ops: u64,
    bytes: u64,
    mut f: impl FnMut(),
) -> Vec<Sample> {
    for _ in 0..warmup {
        f();
    }
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            Sample {
                elapsed: t.elapsed(),
                ops,
                bytes,
                extra: Vec::new(),
            }
        })
        .collect()
}

/// A fresh directory for one run, on the real disk: `$BOLTQ_BENCH_DIR` or
/// `<workspace>/target/bench-data`. Refuses tmpfs, where glommio skips O_DIRECT and every
/// number would be meaningless for the product (platform.md §1).
pub fn bench_dir(tag: &str) -> PathBuf {
    let base = std::env::var_os("BOLTQ_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-data"));
    let dir = base.join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create bench dir");
    assert!(
        !is_tmpfs(&dir),
        "{} is on tmpfs; set BOLTQ_BENCH_DIR to a real disk",
        dir.display()
    );
    dir
}

fn is_tmpfs(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path");
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized out-parameter.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type == libc::TMPFS_MAGIC
}

/// Runs `f` on a glommio executor pinned to `$BOLTQ_BENCH_CPU` (default 0), as a shard
/// runs, and returns its output.
pub fn on_executor<T, Fut>(f: impl FnOnce() -> Fut + Send + 'static) -> T
where
    T: Send + 'static,
    Fut: Future<Output = T> + 'static,
{
    let cpu = env_u64("BOLTQ_BENCH_CPU", 0) as usize;
    glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(cpu))
        .name("bench")
        .spawn(f)
        .expect("executor")
        .join()
        .expect("join")
}
