//! The README's commands work as written (issue 16: its CLI example once named a binary
//! `cargo run` could not find). The set-up block is exactly the two commands, the second
//! is what `.ci/run` runs, and every `cargo run … --bin boltq-cli -- …` and `curl
//! localhost:9090/…` example in the text runs, with the same arguments, against a started
//! server (the CLI through this package's own build of it, pointed at the server with
//! `BOLTQ_ADDR`; the `curl` path fetched from its HTTP port).

#[allow(dead_code)] // the TLS helpers serve the bench tests
mod support;

use boltq_io::testutil::TempDir;
use std::io::{Read, Write};
use std::process::Command;
use support::{server_binary, start_server};

const README: &str = include_str!("../../README.md");
const CI_RUN: &str = include_str!("../../.ci/run");
const CLI: &str = env!("CARGO_BIN_EXE_boltq-cli");

/// The inline code spans of `text` (single backticks).
fn code_spans(text: &str) -> Vec<&str> {
    text.split("```")
        .step_by(2) // outside fenced blocks
        .flat_map(|prose| prose.split('`').skip(1).step_by(2))
        .collect()
}

/// Splits a command line the way a POSIX shell does for plain words and single quotes.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            ' ' | '\t' if in_word => {
                words.push(std::mem::take(&mut word));
                in_word = false;
            }
            ' ' | '\t' => {}
            c => {
                assert!(
                    !"\"$\\;&|<>()*?`".contains(c),
                    "README example needs a real shell ({c:?} in {line:?}); extend this test"
                );
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

#[test]
fn the_set_up_block_is_the_two_commands_and_ci_runs_the_second() {
    let block = README
        .split("## Set up on a fresh machine")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|b| b.split("```").next())
        .expect("a ```sh block under \"Set up on a fresh machine\"");
    let commands: Vec<&str> = block
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        commands,
        ["cargo run --release --bin boltq", "cargo test --workspace"]
    );
    assert!(
        CI_RUN.lines().any(|l| l.trim() == "cargo test --workspace"),
        ".ci/run must run the README's test command:\n{CI_RUN}"
    );
}

#[test]
fn every_cli_and_curl_example_in_the_readme_runs_against_a_server() {
    let dir = TempDir::new("readme");
    let server = start_server(server_binary(), dir.path(), &[]);
    let (tcp, http) = (server.tcp, server.http);

    let spans = code_spans(README);
    let cli: Vec<&str> = spans
        .iter()
        .copied()
        .filter(|s| s.starts_with("cargo run") && s.contains("--bin boltq-cli"))
        .collect();
    let curls: Vec<&str> = spans
        .iter()
        .copied()
        .filter(|s| s.starts_with("curl "))
        .collect();
    assert!(!cli.is_empty() && !curls.is_empty(), "no examples found");
    for example in cli {
        let (cargo, args) = example.split_once(" -- ").expect("cargo run … -- <args>");
        assert!(
            cargo.contains(&format!("-p {}", env!("CARGO_PKG_NAME"))),
            "{example}: boltq-cli is built by the {} package",
            env!("CARGO_PKG_NAME")
        );
        let out = Command::new(CLI)
            .args(shell_words(args))
            .env("BOLTQ_ADDR", format!("127.0.0.1:{tcp}"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{example}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for example in curls {
        let words = shell_words(example);
        let url = words.last().expect("curl <url>");
        let path = url
            .strip_prefix("localhost:9090")
            .unwrap_or_else(|| panic!("{example}: curl examples go to localhost:9090"));
        let mut c = std::net::TcpStream::connect(("127.0.0.1", http)).unwrap();
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{example}:\n{answer}");
    }
}
