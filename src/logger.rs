//! The stderr logger behind the `log` facade: one line per event, an RFC 3339 UTC timestamp
//! with milliseconds, the level, where it came from (`shard-N`, `main`, …), the message.
//!
//! A small writer of our own rather than `env_logger` and friends: the server logs little
//! (startup, listeners, errors), and operators and tests grep a line format we keep stable
//! (`ready: ` in particular). The calendar arithmetic is `humantime`'s.

use std::io::Write;
use std::time::SystemTime;

struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let thread = std::thread::current();
        let line = format_line(
            SystemTime::now(),
            record.level(),
            thread.name(),
            record.args(),
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// One log line, newline included: `2026-12-05T02:15:03.123Z INFO  [shard-0] message`.
fn format_line(
    at: SystemTime,
    level: log::Level,
    thread: Option<&str>,
    message: &std::fmt::Arguments,
) -> String {
    format!(
        "{} {level:<5} [{}] {message}\n",
        humantime::format_rfc3339_millis(at),
        origin(thread)
    )
}

/// The thread a line came from, without the `boltq-` every server thread name starts with
/// (shard threads are `boltq-shard-N`).
fn origin(thread: Option<&str>) -> &str {
    let name = thread.unwrap_or("main");
    name.strip_prefix("boltq-").unwrap_or(name)
}

static LOGGER: StderrLogger = StderrLogger;

/// Installs the logger at `level`. Safe to call once; later calls only change the level.
pub fn init(level: log::LevelFilter) {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_line_starts_with_an_rfc3339_utc_timestamp_with_milliseconds() {
        // 2026-12-05T02:15:03.123456Z: the sub-millisecond part is cut, not rounded.
        let at = UNIX_EPOCH + Duration::from_micros(1_796_436_903_123_456);
        let line = format_line(
            at,
            log::Level::Info,
            Some("boltq-shard-1"),
            &format_args!("ready: {} shards", 2),
        );
        assert_eq!(
            line,
            "2026-12-05T02:15:03.123Z INFO  [shard-1] ready: 2 shards\n"
        );
    }

    #[test]
    fn level_is_padded_and_unnamed_threads_are_main() {
        let line = format_line(UNIX_EPOCH, log::Level::Warn, None, &format_args!("x"));
        assert_eq!(line, "1970-01-01T00:00:00.000Z WARN  [main] x\n");
        let line = format_line(
            UNIX_EPOCH + Duration::from_millis(5),
            log::Level::Error,
            Some("boltq-signals"),
            &format_args!("y"),
        );
        assert_eq!(line, "1970-01-01T00:00:00.005Z ERROR [signals] y\n");
    }
}
