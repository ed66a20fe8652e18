//! Per-shard metrics: counters, gauges and HDR histograms.
//!
//! Each shard owns its registry, so updates are plain `Cell` writes with no
//! atomics or locks on the hot path. Handles are registered once (a map
//! lookup) and then updated directly. A scrape asks every shard for a
//! [`MetricsSnapshot`] (plain `Send` data) and merges them into one view.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

/// Largest value a histogram tracks; larger values are clamped to it. One
/// hour in microseconds, so latencies in µs and sizes up to ~3.6 GB fit.
pub const HISTOGRAM_VALUE_MAX: u64 = 3_600_000_000;

/// Significant decimal digits kept by histograms: 2 gives 1% precision in
/// ~26 KiB per series; 3 would cost ~180 KiB per series per shard.
pub const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 2;

/// Default limit on distinct series per registry, so label values chosen by
/// clients (queue names) cannot grow memory without bound.
pub const SERIES_MAX_DEFAULT: usize = 10_000;

/// Name of the counter that reports series refused because of the limit.
pub const SERIES_DROPPED_METRIC: &str = "boltq_metrics_series_dropped_total";

/// A metric name plus its labels, sorted by label name so that the same
/// labels given in another order name the same series.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MetricKey {
    /// Metric name, Prometheus style (`boltq_..._total`, units last).
    pub name: String,
    /// `(label, value)` pairs sorted by label.
    pub labels: Vec<(String, String)>,
}

impl MetricKey {
    /// Builds a key; sorts labels so the key is canonical.
    pub fn new(name: &str, labels: &[(&str, &str)]) -> Self {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        labels.sort();
        Self {
            name: name.to_owned(),
            labels,
        }
    }
}

/// A monotonically increasing count. Cloning shares the same series.
#[derive(Clone, Debug, Default)]
pub struct Counter(Rc<Cell<u64>>);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }

    /// Adds `n`; wraps rather than panics, like Prometheus counters reset.
    pub fn add(&self, n: u64) {
        self.0.set(self.0.get().wrapping_add(n));
    }

    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

/// A value that goes up and down (connections, queue depth). Signed so that
/// an add/sub imbalance shows as a negative value instead of a wrap.
#[derive(Clone, Debug, Default)]
pub struct Gauge(Rc<Cell<i64>>);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, value: i64) {
        self.0.set(value);
    }

    /// Adds `delta` (may be negative).
    pub fn add(&self, delta: i64) {
        self.0.set(self.0.get().saturating_add(delta));
    }

    /// Current value.
    pub fn get(&self) -> i64 {
        self.0.get()
    }
}

/// An HDR histogram of `u64` values in `[0, HISTOGRAM_VALUE_MAX]`.
#[derive(Clone, Debug)]
pub struct Histogram(Rc<RefCell<hdrhistogram::Histogram<u64>>>);

impl Histogram {
    fn new() -> Self {
        Self(Rc::new(RefCell::new(new_hdr())))
    }

    /// Records one value, clamping values above [`HISTOGRAM_VALUE_MAX`]
    /// rather than failing, because a metric must never break a request.
    pub fn record(&self, value: u64) {
        self.0
            .borrow_mut()
            .saturating_record(value.min(HISTOGRAM_VALUE_MAX));
    }

    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.0.borrow().len()
    }
}

fn new_hdr() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, HISTOGRAM_VALUE_MAX, HISTOGRAM_SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

#[derive(Clone, Debug)]
enum Series {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
}

impl Series {
    fn kind(&self) -> &'static str {
        match self {
            Series::Counter(_) => "counter",
            Series::Gauge(_) => "gauge",
            Series::Histogram(_) => "histogram",
        }
    }
}

/// One shard's metrics. Registration borrows a `RefCell` briefly; updates go
/// straight to the returned handles.
#[derive(Debug)]
pub struct Registry {
    series: RefCell<BTreeMap<MetricKey, Series>>,
    series_max: usize,
    series_dropped: Counter,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new(SERIES_MAX_DEFAULT)
    }
}

impl Registry {
    /// An empty registry that holds at most `series_max` series.
    pub fn new(series_max: usize) -> Self {
        assert!(series_max > 0, "series_max must be positive");
        Self {
            series: RefCell::new(BTreeMap::new()),
            series_max,
            series_dropped: Counter::default(),
        }
    }

    /// The counter named `name` with `labels`, created at zero if new.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> Counter {
        match self.series(name, labels, "counter", || {
            Series::Counter(Counter::default())
        }) {
            Some(Series::Counter(counter)) => counter,
            Some(_) => unreachable!("kind checked in series()"),
            None => Counter::default(),
        }
    }

    /// The gauge named `name` with `labels`, created at zero if new.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Gauge {
        match self.series(name, labels, "gauge", || Series::Gauge(Gauge::default())) {
            Some(Series::Gauge(gauge)) => gauge,
            Some(_) => unreachable!("kind checked in series()"),
            None => Gauge::default(),
        }
    }

    /// The histogram named `name` with `labels`, created empty if new.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Histogram {
        match self.series(name, labels, "histogram", || {
            Series::Histogram(Histogram::new())
        }) {
            Some(Series::Histogram(histogram)) => histogram,
            Some(_) => unreachable!("kind checked in series()"),
            None => Histogram::new(),
        }
    }

    /// Finds or creates a series of `kind`. Past `series_max` it returns `None`
    /// and the caller hands out a detached handle: updates still work but are not
    /// reported, and [`SERIES_DROPPED_METRIC`] counts the refusals. `make` runs
    /// only for a new series: an empty histogram is a few KiB to allocate and
    /// zero, so a lookup must not build one to throw away.
    fn series(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        kind: &'static str,
        make: impl FnOnce() -> Series,
    ) -> Option<Series> {
        let key = MetricKey::new(name, labels);
        let mut series = self.series.borrow_mut();
        if let Some(existing) = series.get(&key) {
            assert_eq!(
                existing.kind(),
                kind,
                "metric {key:?} registered as two kinds"
            );
            return Some(existing.clone());
        }
        if series.len() >= self.series_max {
            self.series_dropped.inc();
            return None;
        }
        let wanted = make();
        debug_assert_eq!(wanted.kind(), kind);
        series.insert(key, wanted.clone());
        Some(wanted)
    }

    /// Copies every series into plain data that can cross to another shard.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let mut snapshot = MetricsSnapshot::default();
        for (key, series) in self.series.borrow().iter() {
            match series {
                Series::Counter(c) => {
                    snapshot.counters.insert(key.clone(), c.get());
                }
                Series::Gauge(g) => {
                    snapshot.gauges.insert(key.clone(), g.get());
                }
                Series::Histogram(h) => {
                    snapshot
                        .histograms
                        .insert(key.clone(), h.0.borrow().clone());
                }
            }
        }
        let dropped = self.series_dropped.get();
        if dropped > 0 {
            snapshot
                .counters
                .insert(MetricKey::new(SERIES_DROPPED_METRIC, &[]), dropped);
        }
        snapshot
    }
}

/// Metric values at one moment, detached from the shard (it is `Send`).
#[derive(Clone, Debug, Default)]
pub struct MetricsSnapshot {
    /// Counter values by series.
    pub counters: BTreeMap<MetricKey, u64>,
    /// Gauge values by series.
    pub gauges: BTreeMap<MetricKey, i64>,
    /// Histograms by series.
    pub histograms: BTreeMap<MetricKey, hdrhistogram::Histogram<u64>>,
}

impl MetricsSnapshot {
    /// One process-wide view from per-shard snapshots: counters and gauges
    /// are summed (a gauge per shard counts a share of the total, such as
    /// connections), histograms are added.
    pub fn merge(snapshots: impl IntoIterator<Item = MetricsSnapshot>) -> MetricsSnapshot {
        let mut merged = MetricsSnapshot::default();
        for snapshot in snapshots {
            merged.absorb(snapshot);
        }
        merged
    }

    fn absorb(&mut self, other: MetricsSnapshot) {
        for (key, value) in other.counters {
            let total = self.counters.entry(key).or_insert(0);
            *total = total.wrapping_add(value);
        }
        for (key, value) in other.gauges {
            let total = self.gauges.entry(key).or_insert(0);
            *total = total.saturating_add(value);
        }
        for (key, histogram) in other.histograms {
            match self.histograms.get_mut(&key) {
                Some(total) => {
                    // Auto-resize makes addition infallible even for a
                    // histogram built elsewhere with a wider range.
                    total.auto(true);
                    total
                        .add(&histogram)
                        .expect("auto-resizing histogram addition cannot fail");
                }
                None => {
                    self.histograms.insert(key, histogram);
                }
            }
        }
    }

    /// Value of a counter, for tests and routes that want one number.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> Option<u64> {
        self.counters.get(&MetricKey::new(name, labels)).copied()
    }

    /// Value of a gauge.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<i64> {
        self.gauges.get(&MetricKey::new(name, labels)).copied()
    }

    /// A histogram.
    pub fn histogram(
        &self,
        name: &str,
        labels: &[(&str, &str)],
    ) -> Option<&hdrhistogram::Histogram<u64>> {
        self.histograms.get(&MetricKey::new(name, labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_share_their_series() {
        let registry = Registry::default();
        let a = registry.counter("req_total", &[("op", "get"), ("code", "ok")]);
        let b = registry.counter("req_total", &[("code", "ok"), ("op", "get")]);
        a.inc();
        b.add(2);
        assert_eq!(a.get(), 3);
        let snapshot = registry.snapshot();
        assert_eq!(
            snapshot.counter("req_total", &[("op", "get"), ("code", "ok")]),
            Some(3)
        );
    }

    #[test]
    fn labels_distinguish_series() {
        let registry = Registry::default();
        registry.counter("x_total", &[("q", "a")]).inc();
        registry.counter("x_total", &[("q", "b")]).add(5);
        let snapshot = registry.snapshot();
        assert_eq!(snapshot.counter("x_total", &[("q", "a")]), Some(1));
        assert_eq!(snapshot.counter("x_total", &[("q", "b")]), Some(5));
        assert_eq!(snapshot.counter("x_total", &[]), None);
    }

    #[test]
    fn gauges_go_both_ways() {
        let registry = Registry::default();
        let g = registry.gauge("conns", &[]);
        g.add(3);
        g.add(-5);
        assert_eq!(registry.snapshot().gauge("conns", &[]), Some(-2));
        g.set(7);
        assert_eq!(registry.snapshot().gauge("conns", &[]), Some(7));
    }

    #[test]
    fn histograms_record_and_clamp() {
        let registry = Registry::default();
        let h = registry.histogram("latency_us", &[]);
        for v in 1..=100 {
            h.record(v);
        }
        h.record(u64::MAX);
        let snapshot = registry.snapshot();
        let hist = snapshot.histogram("latency_us", &[]).unwrap();
        assert_eq!(hist.len(), 101);
        assert!(hist.max() >= HISTOGRAM_VALUE_MAX / 100 * 99);
        let p50 = hist.value_at_quantile(0.5);
        assert!((49..=51).contains(&p50), "p50 {p50}");
    }

    #[test]
    #[should_panic(expected = "registered as two kinds")]
    fn one_name_cannot_be_two_kinds() {
        let registry = Registry::default();
        registry.counter("m", &[]);
        registry.gauge("m", &[]);
    }

    #[test]
    fn series_limit_detaches_and_counts() {
        let registry = Registry::new(2);
        registry.counter("a", &[]).inc();
        registry.counter("b", &[]).inc();
        let c = registry.counter("c", &[]);
        c.inc();
        assert_eq!(c.get(), 1, "detached handles still work");
        // An existing series is still found at the limit.
        registry.counter("a", &[]).inc();
        let snapshot = registry.snapshot();
        assert_eq!(snapshot.counter("a", &[]), Some(2));
        assert_eq!(snapshot.counter("c", &[]), None);
        assert_eq!(snapshot.counter(SERIES_DROPPED_METRIC, &[]), Some(1));
    }

    #[test]
    fn merge_sums_counters_gauges_and_adds_histograms() {
        let shards: Vec<Registry> = (0..3).map(|_| Registry::default()).collect();
        for (i, registry) in shards.iter().enumerate() {
            let i = i as u64;
            registry.counter("published_total", &[]).add(10 + i);
            registry.gauge("conns", &[]).set(i as i64 - 1);
            let h = registry.histogram("latency_us", &[]);
            for _ in 0..=i {
                h.record(100 * (i + 1));
            }
            if i == 2 {
                registry.counter("only_on_2_total", &[]).inc();
            }
        }
        let merged = MetricsSnapshot::merge(shards.iter().map(Registry::snapshot));
        assert_eq!(merged.counter("published_total", &[]), Some(33));
        assert_eq!(merged.gauge("conns", &[]), Some(0));
        assert_eq!(merged.counter("only_on_2_total", &[]), Some(1));
        let hist = merged.histogram("latency_us", &[]).unwrap();
        assert_eq!(hist.len(), 6);
        assert_eq!(hist.min(), 100);
        assert!(hist.max() >= 299 && hist.max() <= 303, "max {}", hist.max());
    }

    #[test]
    fn snapshot_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<MetricsSnapshot>();
    }

    #[test]
    fn merging_nothing_is_empty() {
        let merged = MetricsSnapshot::merge(Vec::new());
        assert!(merged.counters.is_empty() && merged.gauges.is_empty());
        assert!(merged.histograms.is_empty());
    }
}
