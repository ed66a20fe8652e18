//! The CLI run in-process against the client's scripted fake server: exact request bytes,
//! exact stdout/stderr, exit codes.

use super::run;
use boltq::client::fake_server::{frame_bytes, FakeServer, Step};
use boltq::client::RawFrame;
use boltq::queue::protocol::frame::{op, status};
use std::collections::HashMap;

struct Ran {
    code: i32,
    out: String,
    err: String,
}

fn run_cli(args: &[&str], env: &[(&str, &str)]) -> Ran {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&args, &|k| env.get(k).cloned(), &mut out, &mut err);
    Ran {
        code,
        out: String::from_utf8(out).unwrap(),
        err: String::from_utf8(err).unwrap(),
    }
}

/// Runs the CLI against a fake server that answers each request with the next reply.
fn run_against(replies: Vec<Vec<u8>>, args: &[&str]) -> (Ran, Vec<RawFrame>) {
    let script = replies
        .into_iter()
        .flat_map(|r| [Step::Expect, Step::Send(r)])
        .collect();
    let server = FakeServer::start(script);
    let ran = run_cli(args, &[("BOLTQ_ADDR", &server.addr)]);
    (ran, server.received())
}

fn ok(payload: &str) -> Vec<u8> {
    frame_bytes(status::OK, payload)
}

fn body(f: &RawFrame) -> &str {
    std::str::from_utf8(&f.1).unwrap()
}

/// An address nothing listens on.
fn dead_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

const ID: &str = "9f86d081884c7d659a2feaa0c55ad015";

#[test]
fn no_command_prints_usage_on_stdout_without_connecting() {
    let ran = run_cli(&[], &[("BOLTQ_ADDR", &dead_addr())]);
    assert_eq!(ran.code, 1);
    assert_eq!(ran.out, format!("{}\n", super::format::usage()));
    assert_eq!(ran.err, "");
}

#[test]
fn publish_sends_v1_bytes_and_prints_the_id() {
    let reply = format!(r#"{{"id":"{ID}","topic":"jobs"}}"#);
    let (ran, got) = run_against(
        vec![ok(&reply)],
        &["publish", "-topic", "jobs", "-payload", r#"{ "n": 1 }"#],
    );
    assert_eq!((ran.code, ran.err.as_str()), (0, ""));
    assert_eq!(ran.out, format!("published: id={ID} topic=jobs\n"));
    assert_eq!(got[0].0, op::PUBLISH);
    assert_eq!(
        body(&got[0]),
        r#"{"delay":0,"headers":null,"payload":{"n":1},"priority":0,"topic":"jobs","ttl":0}"#
    );
}

#[test]
fn double_dash_and_equals_flags_work_too() {
    let reply = format!(r#"{{"id":"{ID}","topic":"jobs"}}"#);
    let (ran, got) = run_against(
        vec![ok(&reply)],
        &["publish", "--topic=jobs", "--payload", "\"x\""],
    );
    assert_eq!(ran.code, 0);
    assert!(body(&got[0]).contains(r#""payload":"x""#));
}

#[test]
fn publish_without_required_flags_prints_its_usage_line() {
    for args in [
        &["publish", "-topic", "jobs"][..],
        &["publish", "-payload", "1"],
    ] {
        let (ran, got) = run_against(vec![], args);
        assert_eq!(ran.code, 1);
        assert_eq!(
            ran.err,
            "usage: boltq-cli publish -topic <name> -payload <json>\n"
        );
        assert_eq!((ran.out.as_str(), got.len()), ("", 0));
    }
}

#[test]
fn publish_refuses_a_payload_that_is_not_json() {
    let (ran, got) = run_against(vec![], &["publish", "-topic", "jobs", "-payload", "{oops"]);
    assert_eq!(ran.code, 1);
    assert!(
        ran.err
            .starts_with("publish error: payload is not valid JSON: "),
        "{}",
        ran.err
    );
    assert!(got.is_empty(), "nothing is sent");
}

#[test]
fn publish_server_error_is_reported_with_exit_1() {
    let err = frame_bytes(status::ERROR, r#"{"error":"storage write: disk full"}"#);
    let (ran, _) = run_against(vec![err], &["publish", "-topic", "jobs", "-payload", "1"]);
    assert_eq!(ran.code, 1);
    assert_eq!(
        ran.err,
        "publish error: server error: storage write: disk full\n"
    );
}

#[test]
fn consume_prints_the_message_or_no_messages() {
    let msg = format!(
        r#"{{"id":"{ID}","topic":"jobs","payload":{{"b":1,"a":"<"}},"headers":{{"k":"v"}},"timestamp":1700000000000000001,"retry":3}}"#
    );
    let (ran, got) = run_against(vec![ok(&msg)], &["consume", "-topic", "jobs"]);
    assert_eq!(ran.code, 0);
    let want = format!(
        "{{\n  \"id\": \"{ID}\",\n  \"topic\": \"jobs\",\n  \"payload\": {{\n    \"b\": 1,\n    \"a\": \"\\u003c\"\n  }},\n  \"headers\": {{\n    \"k\": \"v\"\n  }},\n  \"timestamp\": 1700000000000000001,\n  \"retry\": 3,\n  \"delivery_count\": 0\n}}\n"
    );
    assert_eq!(ran.out, want);
    assert_eq!(got[0], (op::CONSUME, br#"{"topic":"jobs"}"#.to_vec()));

    let (ran, _) = run_against(
        vec![frame_bytes(status::EMPTY, "")],
        &["consume", "-topic", "jobs"],
    );
    assert_eq!((ran.code, ran.out.as_str()), (0, "no messages available\n"));

    let (ran, _) = run_against(vec![], &["consume"]);
    assert_eq!(
        (ran.code, ran.err.as_str()),
        (1, "usage: boltq-cli consume -topic <name>\n")
    );
}

#[test]
fn ack_and_nack_print_the_id() {
    let (ran, got) = run_against(vec![ok(r#"{"status":"acked"}"#)], &["ack", "-id", ID]);
    assert_eq!((ran.code, ran.out), (0, format!("acked: {ID}\n")));
    assert_eq!(body(&got[0]), format!(r#"{{"id":"{ID}"}}"#));
    let (ran, got) = run_against(vec![ok(r#"{"status":"nacked"}"#)], &["nack", "-id", ID]);
    assert_eq!((ran.code, ran.out), (0, format!("nacked: {ID}\n")));
    assert_eq!(got[0].0, op::NACK);
    let missing = frame_bytes(
        status::ERROR,
        &format!(r#"{{"error":"message {ID} not found in pending"}}"#),
    );
    let (ran, _) = run_against(vec![missing], &["ack", "-id", ID]);
    assert_eq!(ran.code, 1);
    assert_eq!(
        ran.err,
        format!("ack error: server error: message {ID} not found in pending\n")
    );
    let (ran, _) = run_against(vec![], &["nack"]);
    assert_eq!(
        (ran.code, ran.err.as_str()),
        (1, "usage: boltq-cli nack -id <message_id>\n")
    );
}

#[test]
fn stats_health_and_server() {
    let stats =
        r#"{"Queues":{"jobs":2},"Topics":{},"DeadLetters":{},"PendingCount":1,"DelayedCount":0}"#;
    let (ran, got) = run_against(vec![ok(stats)], &["stats", "ignored"]);
    assert_eq!(ran.code, 0);
    assert_eq!(
        ran.out,
        "{\n  \"DeadLetters\": {},\n  \"DelayedCount\": 0,\n  \"PendingCount\": 1,\n  \"Queues\": {\n    \"jobs\": 2\n  },\n  \"Topics\": {}\n}\n"
    );
    assert_eq!(got[0], (op::STATS, b"{}".to_vec()));

    let (ran, got) = run_against(vec![ok(r#"{"status":"pong"}"#)], &["health"]);
    assert_eq!((ran.code, ran.out.as_str()), (0, "healthy\n"));
    assert_eq!(got[0], (op::PING, b"{}".to_vec()));

    let sick = frame_bytes(
        status::ERROR,
        r#"{"error":"authentication required, send AUTH first"}"#,
    );
    let (ran, _) = run_against(vec![sick], &["health"]);
    assert_eq!(ran.code, 1);
    assert_eq!(
        ran.err,
        "unhealthy: server error: authentication required, send AUTH first\n"
    );

    let (ran, got) = run_against(vec![], &["server"]);
    assert_eq!((ran.code, got.len()), (0, 0));
    assert_eq!(
        ran.out,
        "Use 'boltq' (the BoltQ server binary) to start the server\n"
    );
}

#[test]
fn unknown_command_goes_to_stderr_and_usage_to_stdout() {
    let (ran, _) = run_against(vec![], &["frob"]);
    assert_eq!(ran.code, 1);
    assert_eq!(ran.err, "unknown command: frob\n");
    assert_eq!(ran.out, format!("{}\n", super::format::usage()));
}

#[test]
fn flag_errors_and_help_follow_go_flag() {
    let (ran, _) = run_against(vec![], &["publish", "-x"]);
    assert_eq!(ran.code, 2);
    assert_eq!(
        ran.err,
        "flag provided but not defined: -x\nUsage of publish:\n  -payload string\n    \tmessage payload (JSON string)\n  -topic string\n    \ttopic/queue name\n"
    );
    let (ran, _) = run_against(vec![], &["ack", "-h"]);
    assert_eq!(
        (ran.code, ran.err.as_str()),
        (0, "Usage of ack:\n  -id string\n    \tmessage ID\n")
    );
}

#[test]
fn api_key_is_sent_with_auth_before_the_command() {
    let server = FakeServer::start(vec![
        Step::Expect,
        Step::Send(ok(r#"{"status":"ok"}"#)),
        Step::Expect,
        Step::Send(ok(r#"{"status":"pong"}"#)),
    ]);
    let ran = run_cli(
        &["health"],
        &[("BOLTQ_ADDR", &server.addr), ("BOLTQ_API_KEY", "k1")],
    );
    assert_eq!(ran.code, 0);
    let got = server.received();
    assert_eq!(got[0], (op::AUTH, br#"{"api_key":"k1"}"#.to_vec()));
    assert_eq!(got[1].0, op::PING);
}

#[test]
fn refused_auth_is_a_fatal_connect_error() {
    let server = FakeServer::start(vec![
        Step::Expect,
        Step::Send(frame_bytes(status::ERROR, r#"{"error":"unauthorized"}"#)),
    ]);
    let addr = server.addr.clone();
    let ran = run_cli(
        &["stats"],
        &[("BOLTQ_ADDR", &addr), ("BOLTQ_API_KEY", "bad")],
    );
    server.received();
    assert_eq!(ran.code, 1);
    let want =
        format!("failed to connect to {addr}: auth failed: {{\"error\":\"unauthorized\"}}\n");
    assert!(ran.err.ends_with(&want), "{}", ran.err);
}

#[test]
fn connect_failure_is_fatal_with_a_timestamp() {
    let addr = dead_addr();
    let ran = run_cli(&["health"], &[("BOLTQ_ADDR", &addr)]);
    assert_eq!((ran.code, ran.out.as_str()), (1, ""));
    // `YYYY/MM/DD HH:MM:SS failed to connect to <addr>: connect: …`
    let (stamp, message) = ran.err.split_at(19);
    assert_eq!(stamp.as_bytes()[4], b'/');
    assert_eq!(stamp.as_bytes()[13], b':');
    let prefix = format!(" failed to connect to {addr}: connect: ");
    assert!(message.starts_with(&prefix), "{}", ran.err);
}

#[test]
fn tls_file_problems_are_fatal_and_name_the_file() {
    let ran = run_cli(
        &["health"],
        &[
            ("BOLTQ_ADDR", &dead_addr()),
            ("BOLTQ_TLS_ENABLED", "true"),
            ("BOLTQ_CA_FILE", "/nonexistent/ca.pem"),
        ],
    );
    assert_eq!((ran.code, ran.out.as_str()), (1, ""));
    assert!(
        ran.err.contains("cannot read CA file /nonexistent/ca.pem"),
        "{}",
        ran.err
    );
    let ran = run_cli(
        &["health"],
        &[
            ("BOLTQ_ADDR", &dead_addr()),
            ("BOLTQ_TLS_ENABLED", "true"),
            ("BOLTQ_TLS_CERT_FILE", "/c.pem"),
        ],
    );
    assert_eq!(ran.code, 1);
    assert!(
        ran.err
            .contains("BOLTQ_TLS_CERT_FILE and BOLTQ_TLS_KEY_FILE must be set together"),
        "{}",
        ran.err
    );
}

#[test]
fn tls_settings_become_client_options() {
    use super::settings::TlsSettings;
    let tls = super::client_tls(&TlsSettings {
        ca_file: Some("/ca.pem".into()),
        insecure: false,
        cert_file: Some("/c.pem".into()),
        key_file: Some("/k.pem".into()),
    })
    .unwrap();
    assert_eq!(
        tls.ca_file.as_deref(),
        Some(std::path::Path::new("/ca.pem"))
    );
    assert!(!tls.insecure);
    // The server name comes from BOLTQ_ADDR's host, as v1's Go client does.
    assert_eq!(tls.server_name, None);
    let cert = tls.client_certificate.unwrap();
    assert_eq!(
        (cert.cert_file.to_str(), cert.key_file.to_str()),
        (Some("/c.pem"), Some("/k.pem"))
    );
}

#[test]
fn dlq_commands_send_their_bytes_and_print_the_reply() {
    let reply = r#"{"queue":"jobs_dead_letter","messages":[{"id":"a"}]}"#;
    let (ran, got) = run_against(
        vec![ok(reply)],
        &["dlq", "read", "-queue", "jobs", "-limit", "5"],
    );
    assert_eq!(ran.code, 0, "{}", ran.err);
    assert_eq!(
        ran.out,
        "{\n  \"messages\": [\n    {\n      \"id\": \"a\"\n    }\n  ],\n  \"queue\": \"jobs_dead_letter\"\n}\n"
    );
    assert_eq!(
        (got[0].0, body(&got[0])),
        (0x1A, r#"{"limit":5,"offset":0,"queue":"jobs"}"#)
    );

    let cases: [(&[&str], u8, &str); 5] = [
        (&["dlq", "list"], 0x19, "{}"),
        (
            &["dlq", "list", "-queue", "jobs"],
            0x19,
            r#"{"queue":"jobs"}"#,
        ),
        (
            &["dlq", "read", "-queue", "jobs"],
            0x1A,
            r#"{"limit":10,"offset":0,"queue":"jobs"}"#,
        ),
        (
            &["dlq", "requeue", "--queue=jobs"],
            0x1B,
            r#"{"limit":100,"queue":"jobs"}"#,
        ),
        (
            &["dlq", "purge", "-queue", "jobs"],
            0x1C,
            r#"{"queue":"jobs"}"#,
        ),
    ];
    for (args, code, want) in cases {
        let (ran, got) = run_against(vec![ok(r#"{"purged":3}"#)], args);
        assert_eq!(ran.code, 0, "{args:?}: {}", ran.err);
        assert_eq!((got[0].0, body(&got[0])), (code, want), "{args:?}");
    }
}

#[test]
fn dlq_usage_errors() {
    let usage = format!("{}\n", super::format::dlq_usage());
    let (ran, _) = run_against(vec![], &["dlq"]);
    assert_eq!((ran.code, ran.err.clone()), (1, usage.clone()));
    let (ran, _) = run_against(vec![], &["dlq", "read"]);
    assert_eq!((ran.code, ran.err.clone()), (1, usage.clone()));
    let (ran, _) = run_against(vec![], &["dlq", "zap"]);
    assert_eq!(
        (ran.code, ran.err),
        (1, format!("unknown dlq command: zap\n{usage}"))
    );
    let (ran, _) = run_against(vec![], &["dlq", "read", "-queue", "q", "-limit", "-1"]);
    assert_eq!(ran.code, 2);
    assert!(ran
        .err
        .starts_with("invalid value \"-1\" for flag -limit: parse error\nUsage of dlq read:\n"));
    let err = frame_bytes(status::ERROR, r#"{"error":"queue is required"}"#);
    let (ran, _) = run_against(vec![err], &["dlq", "purge", "-queue", "q"]);
    assert_eq!(
        (ran.code, ran.err.as_str()),
        (1, "dlq error: server error: queue is required\n")
    );
}
