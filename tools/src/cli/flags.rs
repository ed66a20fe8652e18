//! Flag parsing with the rules of Go's `flag` package, which v1's CLI used, so existing
//! scripts keep working:
//! - `-name value`, `-name=value`, `--name value`, `--name=value` are all the same flag;
//! - parsing stops at the first argument that is not a flag, or after `--`; what follows is
//!   ignored by every command (as in v1);
//! - a flag given twice keeps the last value; a value may itself start with `-`;
//! - `-h` / `-help` print the flag list to stderr and exit 0; an unknown flag, a flag with
//!   no value, or a bad number print the error and the flag list to stderr and exit 2.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Exit code of Go's `flag.ExitOnError` for a parse error.
pub const EXIT_FLAG_ERROR: i32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Str,
    /// Unsigned integer (Go `flag.Uint64`).
    Uint,
}

#[derive(Debug, Clone, Copy)]
pub struct Flag {
    pub name: &'static str,
    pub kind: Kind,
    /// Printed in the flag list; Go shows a non-zero default as ` (default N)`.
    pub default: &'static str,
    pub usage: &'static str,
}

impl Flag {
    pub const fn str(name: &'static str, usage: &'static str) -> Flag {
        Flag {
            name,
            kind: Kind::Str,
            default: "",
            usage,
        }
    }

    pub const fn uint(name: &'static str, default: &'static str, usage: &'static str) -> Flag {
        Flag {
            name,
            kind: Kind::Uint,
            default,
            usage,
        }
    }
}

/// A command's flags, named as Go's `flag.NewFlagSet(name, …)` (the name heads the list).
pub struct FlagSet {
    pub name: &'static str,
    pub flags: &'static [Flag],
}

/// Why parsing stopped without values.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    /// `-h` or `-help`: show the flag list, exit 0.
    Help,
    /// A parse error message (`flag provided but not defined: -x`, …): show it and the flag
    /// list, exit 2.
    Error(String),
}

/// Parsed values: every flag of the set has one (its default when not given).
#[derive(Debug)]
pub struct Values {
    values: BTreeMap<&'static str, String>,
}

impl Values {
    pub fn str(&self, name: &str) -> &str {
        self.values.get(name).map(String::as_str).unwrap_or("")
    }

    /// A `Kind::Uint` flag; its text was checked during parsing.
    pub fn uint(&self, name: &str) -> u64 {
        self.str(name).parse().unwrap_or(0)
    }
}

impl FlagSet {
    pub fn parse(&self, args: &[String]) -> Result<Values, Stop> {
        let mut values: BTreeMap<&'static str, String> = self
            .flags
            .iter()
            .map(|f| (f.name, f.default.to_string()))
            .collect();
        let mut rest = args;
        while let Some((arg, tail)) = rest.split_first() {
            rest = tail;
            let Some(body) = flag_body(arg)? else {
                break;
            };
            let (name, inline_value) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let flag = self.lookup(name)?;
            let value = match inline_value {
                Some(v) => v,
                None => {
                    let (next, tail) = rest
                        .split_first()
                        .ok_or_else(|| Stop::Error(format!("flag needs an argument: -{name}")))?;
                    rest = tail;
                    next.clone()
                }
            };
            check_value(flag, &value)?;
            values.insert(flag.name, value);
        }
        Ok(Values { values })
    }

    fn lookup(&self, name: &str) -> Result<&Flag, Stop> {
        match self.flags.iter().find(|f| f.name == name) {
            Some(flag) => Ok(flag),
            None if name == "h" || name == "help" => Err(Stop::Help),
            None => Err(Stop::Error(format!(
                "flag provided but not defined: -{name}"
            ))),
        }
    }

    /// Go's `Usage of <name>:` followed by `PrintDefaults` (flags sorted by name).
    pub fn usage(&self) -> String {
        let mut out = format!("Usage of {}:\n", self.name);
        let mut flags: Vec<&Flag> = self.flags.iter().collect();
        flags.sort_by_key(|f| f.name);
        for f in flags {
            let type_name = match f.kind {
                Kind::Str => "string",
                Kind::Uint => "uint",
            };
            let _ = write!(out, "  -{} {type_name}\n    \t{}", f.name, f.usage);
            if !is_zero_default(f) {
                let _ = write!(out, " (default {})", f.default);
            }
            out.push('\n');
        }
        out
    }
}

/// The flag text after its dashes, `None` when `arg` ends the flags (a non-flag or `--`).
fn flag_body(arg: &str) -> Result<Option<&str>, Stop> {
    if arg.len() < 2 || !arg.starts_with('-') {
        return Ok(None);
    }
    let body = if let Some(after) = arg.strip_prefix("--") {
        if after.is_empty() {
            return Ok(None);
        }
        after
    } else {
        &arg[1..]
    };
    if body.starts_with('-') || body.starts_with('=') {
        return Err(Stop::Error(format!("bad flag syntax: {arg}")));
    }
    Ok(Some(body))
}

fn check_value(flag: &Flag, value: &str) -> Result<(), Stop> {
    if flag.kind == Kind::Str {
        return Ok(());
    }
    let problem = match value.parse::<u64>() {
        Ok(_) => return Ok(()),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => "value out of range",
        Err(_) => "parse error",
    };
    Err(Stop::Error(format!(
        "invalid value \"{value}\" for flag -{}: {problem}",
        flag.name
    )))
}

fn is_zero_default(f: &Flag) -> bool {
    match f.kind {
        Kind::Str => f.default.is_empty(),
        Kind::Uint => f.default.is_empty() || f.default == "0",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET: FlagSet = FlagSet {
        name: "dlq read",
        flags: &[
            Flag::str("queue", "queue name"),
            Flag::uint("offset", "0", "first dead letter"),
            Flag::uint("limit", "10", "most dead letters"),
        ],
    };

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn single_and_double_dash_with_space_or_equals() {
        for form in [
            &["-queue", "q"][..],
            &["--queue", "q"],
            &["-queue=q"],
            &["--queue=q"],
        ] {
            let v = SET.parse(&args(form)).unwrap();
            assert_eq!(v.str("queue"), "q", "{form:?}");
        }
    }

    #[test]
    fn defaults_last_wins_and_dash_values() {
        let v = SET.parse(&args(&[])).unwrap();
        assert_eq!(
            (v.str("queue"), v.uint("offset"), v.uint("limit")),
            ("", 0, 10)
        );
        let v = SET
            .parse(&args(&[
                "-limit", "3", "-limit=4", "-queue", "-odd", "-offset", "0",
            ]))
            .unwrap();
        assert_eq!((v.str("queue"), v.uint("limit")), ("-odd", 4));
        let v = SET.parse(&args(&["-queue="])).unwrap();
        assert_eq!(v.str("queue"), "");
    }

    #[test]
    fn parsing_stops_at_the_first_non_flag_or_double_dash() {
        let v = SET
            .parse(&args(&["-queue", "a", "pos", "-queue", "b"]))
            .unwrap();
        assert_eq!(v.str("queue"), "a");
        let v = SET.parse(&args(&["--", "-queue", "b"])).unwrap();
        assert_eq!(v.str("queue"), "");
        let v = SET.parse(&args(&["-", "-queue", "b"])).unwrap();
        assert_eq!(v.str("queue"), "", "a lone dash is a non-flag argument");
    }

    #[test]
    fn errors_read_as_go_flag_errors() {
        let err = |list: &[&str]| SET.parse(&args(list)).unwrap_err();
        assert_eq!(
            err(&["-x"]),
            Stop::Error("flag provided but not defined: -x".into())
        );
        assert_eq!(
            err(&["-queue"]),
            Stop::Error("flag needs an argument: -queue".into())
        );
        assert_eq!(
            err(&["---queue"]),
            Stop::Error("bad flag syntax: ---queue".into())
        );
        assert_eq!(err(&["-=q"]), Stop::Error("bad flag syntax: -=q".into()));
        assert_eq!(
            err(&["-limit", "ten"]),
            Stop::Error("invalid value \"ten\" for flag -limit: parse error".into())
        );
        assert_eq!(
            err(&["-limit=99999999999999999999"]),
            Stop::Error(
                "invalid value \"99999999999999999999\" for flag -limit: value out of range".into()
            )
        );
        assert_eq!(err(&["-h"]), Stop::Help);
        assert_eq!(err(&["--help"]), Stop::Help);
    }

    #[test]
    fn usage_lists_flags_sorted_like_print_defaults() {
        assert_eq!(
            SET.usage(),
            "Usage of dlq read:\n  -limit uint\n    \tmost dead letters (default 10)\n  -offset uint\n    \tfirst dead letter\n  -queue string\n    \tqueue name\n"
        );
    }
}
