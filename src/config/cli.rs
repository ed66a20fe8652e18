//! Command-line flags of the `boltq` server (highest priority source).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use clap::Parser;

use super::{Config, ConfigError, FsyncMode, StorageMode};

/// `boltq [FLAGS]`. Every flag overrides the config file and the environment.
///
/// v1 spellings `-config FILE`, `-config=FILE`, `-join ADDR` and
/// `-join=ADDR` are also accepted (see [`normalize_v1_args`]), so an existing
/// deployment's command line works unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Parser)]
#[command(
    name = "boltq",
    version,
    about = "BoltQ message server: work queues, pub/sub and a messaging plane, thread-per-core",
    long_about = None,
    after_help = "Flags override BOLTQ_* environment variables, which override the config file.\n\
                  v1 spellings -config FILE and -join ADDR are accepted too."
)]
pub struct CliArgs {
    /// Config file: *.toml, or a v1 *.json config.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Bind address of both listeners (server.host), e.g. 127.0.0.1.
    #[arg(long, value_name = "ADDR")]
    pub host: Option<String>,

    /// Data directory (storage.data_dir).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Number of shards; 0 = one per online CPU (server.shards).
    #[arg(long, value_name = "N")]
    pub shards: Option<u32>,

    /// Binary protocol port (server.tcp_port); 0 = any free port, named in the `ready:` line.
    #[arg(long, value_name = "PORT")]
    pub tcp_port: Option<u16>,

    /// HTTP admin port (server.http_port); default TCP port − 1; 0 = any free port.
    #[arg(long, value_name = "PORT")]
    pub http_port: Option<u16>,

    /// off, error, warn, info, debug or trace (server.log_level).
    #[arg(long, value_name = "LEVEL", value_parser = parse_log_level)]
    pub log_level: Option<String>,

    /// Seed node HTTP address to join, host:port; repeatable or comma-separated.
    /// Placed before every other seed (cluster.seeds).
    #[arg(long = "join", value_name = "ADDR", value_delimiter = ',')]
    pub join: Vec<String>,

    /// Where messages live (storage.mode).
    #[arg(long, value_name = "MODE", value_enum)]
    pub storage_mode: Option<StorageMode>,

    /// When an append counts as durable (storage.fsync).
    #[arg(long, value_name = "POLICY", value_enum)]
    pub fsync: Option<FsyncMode>,
}

fn parse_log_level(s: &str) -> Result<String, String> {
    s.parse::<log::LevelFilter>()
        .map(|_| s.to_ascii_lowercase())
        .map_err(|_| "must be off, error, warn, info, debug or trace".to_string())
}

impl CliArgs {
    /// Parses argv (program name first), after [`normalize_v1_args`].
    /// `--help`/`--version` come back as [`ConfigError::Cli`] with
    /// `exit_code() == 0`.
    pub fn parse_args(args: Vec<OsString>) -> Result<CliArgs, ConfigError> {
        CliArgs::try_parse_from(normalize_v1_args(args)).map_err(ConfigError::Cli)
    }

    /// Overrides `config` with every flag that was given.
    pub(super) fn apply(&self, c: &mut Config) {
        if let Some(host) = &self.host {
            c.server.host = host.clone();
        }
        if let Some(dir) = &self.data_dir {
            c.storage.data_dir = dir.clone();
        }
        if let Some(n) = self.shards {
            c.server.shards = n;
        }
        if let Some(p) = self.tcp_port {
            c.server.tcp_port = p;
        }
        if let Some(p) = self.http_port {
            c.server.http_port = Some(p);
        }
        if let Some(level) = &self.log_level {
            c.server.log_level = level.clone();
        }
        if !self.join.is_empty() {
            let mut seeds = self.join.clone();
            seeds.append(&mut c.cluster.seeds);
            c.cluster.seeds = seeds;
        }
        if let Some(mode) = self.storage_mode {
            c.storage.mode = mode;
        }
        if let Some(mode) = self.fsync {
            c.storage.fsync = mode;
        }
    }
}

/// v1 flags that Go's `flag` package spelled with one dash.
const V1_FLAGS: &[&str] = &["config", "join"];

/// Rewrites v1's single-dash long flags (`-config FILE`, `-config=FILE`,
/// `-join ADDR`, `-join=ADDR`) to clap's `--config`/`--join`. Everything else,
/// including the program name (first element) and anything after a bare `--`,
/// passes through untouched. Works on raw bytes, so non-UTF-8 paths survive.
///
/// Needed because clap would read `-config` as the short flags `-c -o -n …`.
pub fn normalize_v1_args(args: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut args = args.into_iter();
    out.extend(args.next()); // program name
    let mut options_ended = false;
    for arg in args {
        if options_ended {
            out.push(arg);
            continue;
        }
        if arg == OsStr::new("--") {
            options_ended = true;
            out.push(arg);
            continue;
        }
        out.push(rewrite_v1_flag(arg));
    }
    out
}

fn rewrite_v1_flag(arg: OsString) -> OsString {
    let bytes = arg.as_bytes();
    let Some(rest) = bytes.strip_prefix(b"-") else {
        return arg;
    };
    for name in V1_FLAGS {
        if let Some(tail) = rest.strip_prefix(name.as_bytes()) {
            if tail.is_empty() || tail.starts_with(b"=") {
                let mut rewritten = Vec::with_capacity(bytes.len() + 1);
                rewritten.push(b'-');
                rewritten.extend_from_slice(bytes);
                return OsString::from_vec(rewritten);
            }
        }
    }
    arg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn rewrites_v1_single_dash_flags() {
        assert_eq!(
            normalize_v1_args(os(&[
                "boltq",
                "-config",
                "/etc/boltq/config.json",
                "-join",
                "10.0.0.1:9090"
            ])),
            os(&[
                "boltq",
                "--config",
                "/etc/boltq/config.json",
                "--join",
                "10.0.0.1:9090"
            ])
        );
        assert_eq!(
            normalize_v1_args(os(&["boltq", "-config=a.toml", "-join=h:1"])),
            os(&["boltq", "--config=a.toml", "--join=h:1"])
        );
    }

    #[test]
    fn leaves_everything_else_alone() {
        let untouched = os(&[
            "-config", // program name is never rewritten
            "--config",
            "x.toml",
            "-configx",
            "-joined",
            "-c",
            "--join=a:1",
            "--",
            "-config",
        ]);
        assert_eq!(normalize_v1_args(untouched.clone()), untouched);
        assert_eq!(normalize_v1_args(Vec::new()), Vec::<OsString>::new());
    }

    #[test]
    fn keeps_non_utf8_values() {
        let weird = OsString::from_vec(b"-config=/tmp/\xff.toml".to_vec());
        let out = normalize_v1_args(vec![OsString::from("boltq"), weird]);
        assert_eq!(out[1].as_bytes(), b"--config=/tmp/\xff.toml");
    }

    #[test]
    fn clap_parses_all_flags() {
        let cli = CliArgs::parse_args(os(&[
            "boltq",
            "-config",
            "c.toml",
            "--data-dir",
            "/d",
            "--shards",
            "4",
            "--tcp-port",
            "7001",
            "--http-port",
            "7000",
            "--log-level",
            "DEBUG",
            "--join",
            "a:1,b:2",
            "-join",
            "c:3",
            "--storage-mode",
            "memory",
            "--fsync",
            "interval",
        ]))
        .unwrap();
        assert_eq!(cli.config, Some(PathBuf::from("c.toml")));
        assert_eq!(cli.data_dir, Some(PathBuf::from("/d")));
        assert_eq!(cli.shards, Some(4));
        assert_eq!(cli.tcp_port, Some(7001));
        assert_eq!(cli.http_port, Some(7000));
        assert_eq!(cli.log_level.as_deref(), Some("debug"));
        assert_eq!(cli.join, vec!["a:1", "b:2", "c:3"]);
        assert_eq!(cli.storage_mode, Some(StorageMode::Memory));
        assert_eq!(cli.fsync, Some(FsyncMode::Interval));
    }

    #[test]
    fn clap_rejects_bad_flags_with_exit_code_2() {
        for bad in [
            &["boltq", "--tcp-port", "-1"][..],
            &["boltq", "--tcp-port", "70000"],
            &["boltq", "--storage-mode", "dsk"],
            &["boltq", "--fsync", "sometimes"],
            &["boltq", "--log-level", "loud"],
            &["boltq", "--no-such-flag"],
        ] {
            let err = CliArgs::parse_args(os(bad)).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
        let help = CliArgs::parse_args(os(&["boltq", "--help"])).unwrap_err();
        assert_eq!(help.exit_code(), 0);
    }
}
