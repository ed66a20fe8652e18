//! `boltq-cli`, a drop-in for v1's CLI (spec §9): same commands, flags (Go `flag` rules),
//! environment variables, output and exit codes, plus `dlq` for BoltQ's dead-letter commands.
//!
//! Like v1 it connects before looking at the command, so every command except a bare
//! invocation (which prints the usage) needs a reachable server, `server` and `-h` included.
//! TLS (`BOLTQ_TLS_ENABLED=true`) is not supported yet: the CLI then exits 1 with a message
//! rather than silently connecting in plain text.
//!
//! Exit codes: 0 success (and `-h`), 1 every failure v1 reports with 1 (no command, unknown
//! command, missing flag, command error, connection failure, unhealthy), 2 flag syntax errors
//! (Go's `flag.ExitOnError`).

mod commands;
mod dlq;
pub mod flags;
pub mod format;
pub mod settings;

#[cfg(test)]
mod tests;

use boltq::client::{Client, ClientError, ClientOptions};
use settings::Settings;
use std::io::Write;

/// Where a command writes. Write errors are ignored, as Go's `fmt.Println` ignores them (a
/// closed stdout must not turn a successful ack into a failure).
pub struct Streams<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
}

impl Streams<'_> {
    fn out_line(&mut self, text: &str) {
        let _ = writeln!(self.out, "{text}");
    }

    fn err_line(&mut self, text: &str) {
        let _ = writeln!(self.err, "{text}");
    }

    fn err_text(&mut self, text: &str) {
        let _ = write!(self.err, "{text}");
    }

    /// Go's `log.Fatalf`: a timestamped line on stderr; the caller exits 1.
    fn fatal(&mut self, message: &str) -> i32 {
        self.err_line(&format::fatal_line(&local_timestamp(), message));
        1
    }
}

/// Runs the CLI: `args` without the program name, `env` to read variables. Returns the exit
/// code.
pub fn run(
    args: &[String],
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let mut io = Streams { out, err };
    let Some((command, rest)) = args.split_first() else {
        io.out_line(&format::usage());
        return 1;
    };
    let settings = Settings::from_env(env);
    let mut client = match connect(&settings) {
        Ok(client) => client,
        Err(message) => return io.fatal(&message),
    };
    commands::dispatch(command, rest, &mut client, &mut io)
}

fn connect(settings: &Settings) -> Result<Client, String> {
    if settings.tls.is_some() {
        return Err("TLS is not supported by this boltq-cli build yet \
             (BOLTQ_TLS_ENABLED=true); unset BOLTQ_TLS_ENABLED to connect without TLS"
            .to_string());
    }
    let options = ClientOptions {
        api_key: settings.api_key.clone(),
        ..ClientOptions::default()
    };
    Client::connect(&settings.addr, options).map_err(|e| {
        // v1 wraps dial errors as `connect: …`; AUTH refusals read `auth failed: …`.
        let detail = match &e {
            ClientError::Io(io_error) => format!("connect: {io_error}"),
            other => other.to_string(),
        };
        format!("failed to connect to {}: {detail}", settings.addr)
    })
}

/// Local time as Go's default logger prints it: `YYYY/MM/DD HH:MM:SS`.
fn local_timestamp() -> String {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as libc::time_t)
        .unwrap_or(0);
    // SAFETY: `tm` is plain data that localtime_r fully initialises on success; both
    // pointers are valid for the call and the function keeps neither.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now_s, &mut tm).is_null() {
            return String::from("0000/00/00 00:00:00");
        }
        tm
    };
    format!(
        "{:04}/{:02}/{:02} {:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}
