//! The Prometheus text exposition (format 0.0.4) that `/metrics` writes: HELP and TYPE lines
//! once per metric name, sample lines with escaped labels.
//!
//! Written here rather than with `prometheus-client`: that crate writes OpenMetrics, which
//! appends `_total` to counter names, and v1 dashboards and alerts scrape
//! `boltq_messages_published` and friends by their exact v1 names. This writer never
//! changes a name.

use std::fmt::{Display, Write};

/// The TYPE of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Summary,
    Histogram,
}

impl Kind {
    /// The type of a series known only by its name: a `_total` counts, anything else is a
    /// gauge (the v1 counters, which have no `_total`, say `Counter` explicitly).
    pub fn by_name(name: &str) -> Kind {
        if name.ends_with("_total") {
            Kind::Counter
        } else {
            Kind::Gauge
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Summary => "summary",
            Kind::Histogram => "histogram",
        }
    }
}

/// Appends exposition lines to a `String`.
pub struct TextWriter<'a> {
    out: &'a mut String,
    /// The family whose TYPE line was written last: series of one name are adjacent, so
    /// this is enough to write exactly one TYPE line per name, as strict parsers require.
    typed: String,
}

impl<'a> TextWriter<'a> {
    pub fn new(out: &'a mut String) -> TextWriter<'a> {
        TextWriter {
            out,
            typed: String::new(),
        }
    }

    /// Starts the family `name`: its HELP line (when there is help) and its TYPE line. A
    /// family started again right after itself writes nothing.
    pub fn family(&mut self, name: &str, help: Option<&str>, kind: Kind) {
        if self.typed == name {
            return;
        }
        if let Some(help) = help {
            let _ = writeln!(self.out, "# HELP {name} {help}");
        }
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
        self.typed = name.to_string();
    }

    /// One sample: `name{labels} value` (no braces without labels).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        let _ = writeln!(self.out, "{name}{} {value}", label_set(labels));
    }

    /// A family of one sample, with its help.
    pub fn single(
        &mut self,
        name: &str,
        help: &str,
        kind: Kind,
        labels: &[(&str, &str)],
        value: impl Display,
    ) {
        self.family(name, Some(help), kind);
        self.sample(name, labels, value);
    }
}

/// `{k="v",…}` with escaped values; empty without labels.
fn label_set(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_typed_once_and_names_are_kept() {
        let mut out = String::new();
        let mut w = TextWriter::new(&mut out);
        w.single(
            "boltq_messages_published",
            "Published",
            Kind::Counter,
            &[],
            5,
        );
        w.family("boltq_x_total", None, Kind::by_name("boltq_x_total"));
        w.sample("boltq_x_total", &[("queue", "a")], 1);
        w.family("boltq_x_total", None, Kind::Counter);
        w.sample("boltq_x_total", &[("queue", "b"), ("shard", "0")], 2);
        w.single("boltq_up", "Up", Kind::by_name("boltq_up"), &[], 1.5);
        assert_eq!(
            out,
            "# HELP boltq_messages_published Published\n\
             # TYPE boltq_messages_published counter\n\
             boltq_messages_published 5\n\
             # TYPE boltq_x_total counter\n\
             boltq_x_total{queue=\"a\"} 1\n\
             boltq_x_total{queue=\"b\",shard=\"0\"} 2\n\
             # HELP boltq_up Up\n\
             # TYPE boltq_up gauge\n\
             boltq_up 1.5\n"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        TextWriter::new(&mut out).sample("m", &[("q", "a\"b\\c\nd")], 0);
        assert_eq!(out, "m{q=\"a\\\"b\\\\c\\nd\"} 0\n");
    }
}
