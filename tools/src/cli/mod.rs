//! `boltq-cli`, a drop-in for v1's CLI (spec §9): same commands, flags (Go `flag` rules),
//! environment variables, output and exit codes, plus `dlq` for BoltQ's dead-letter commands and
//! `stream-publish` / `stream-tail` / `stream-commit` for its stream commands.
//!
//! Like v1 it connects before looking at the command, so every command except a bare
//! invocation (which prints the usage) needs a reachable server, `server` and `-h` included.
//! With `BOLTQ_TLS_ENABLED=true` it speaks TLS, trusting `BOLTQ_CA_FILE`'s CAs (else the
//! system's), or anything with `BOLTQ_TLS_INSECURE=true` (v1's rules, see [`settings`]).
//!
//! Exit codes: 0 success (and `-h`), 1 every failure v1 reports with 1 (no command, unknown
//! command, missing flag, command error, connection failure, unhealthy), 2 flag syntax errors
//! (Go's `flag.ExitOnError`).

mod commands;
mod dlq;
pub mod flags;
pub mod format;
pub mod settings;
mod stream;

#[cfg(test)]
mod tests;

use boltq::client::{Client, ClientCertificate, ClientError, ClientOptions, ClientTls};
use settings::{Settings, TlsSettings};
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
    let options = ClientOptions {
        api_key: settings.api_key.clone(),
        tls: settings.tls.as_ref().map(client_tls).transpose()?,
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

fn client_tls(tls: &TlsSettings) -> Result<ClientTls, String> {
    let client_certificate = match (&tls.cert_file, &tls.key_file) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(ClientCertificate {
            cert_file: cert.into(),
            key_file: key.into(),
        }),
        _ => {
            return Err(
                "BOLTQ_TLS_CERT_FILE and BOLTQ_TLS_KEY_FILE must be set together".to_string(),
            )
        }
    };
    Ok(ClientTls {
        ca_file: tls.ca_file.as_ref().map(Into::into),
        insecure: tls.insecure,
        client_certificate,
        ..ClientTls::default()
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
