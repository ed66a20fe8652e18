//! A minimal stderr logger: one line per event, UTC timestamp, level, target.
//!
//! Kept in-house: the server logs little (startup, listeners, errors), and a line format we
//! own is one less dependency to keep stable for operators who grep it.

use std::io::Write;

struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let thread = std::thread::current();
        let line = format!(
            "{}.{:03} {:<5} [{}] {}\n",
            now.as_secs(),
            now.subsec_millis(),
            record.level(),
            thread.name().unwrap_or("main"),
            record.args()
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

static LOGGER: StderrLogger = StderrLogger;

/// Installs the logger at `level`. Safe to call once; later calls only change the level.
pub fn init(level: log::LevelFilter) {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}
