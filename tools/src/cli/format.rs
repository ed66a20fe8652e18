//! Everything `boltq-cli` prints, as pure functions. The v1 texts are reproduced exactly
//! (spec §9 and v1's `cmd/cli`); JSON is printed the way Go's `json.MarshalIndent` does.

use boltq::client::json;
use boltq::client::{ClientError, ConsumedMessage};
use serde_json::Value;

/// The program name shown in usage lines. v1 called its CLI `boltq`; here `boltq` is the
/// server binary, so the CLI's own name is used.
pub const PROGRAM: &str = "boltq-cli";

/// Top-level usage (v1's text, plus the `dlq` command and the client-certificate variables).
pub fn usage() -> String {
    format!(
        "BoltQ CLI

Usage:
  {PROGRAM} <command> [flags]

Commands:
  publish   Publish a message to a queue
  consume   Consume a message from a queue
  ack       Acknowledge a message
  nack      Negatively acknowledge a message
  stats     Show broker statistics
  health    Check server health
  dlq       Dead letters: list, read, requeue, purge
  stream-publish, stream-tail, stream-commit
            Stream topics of the messaging plane (trusted backends)

Environment:
  BOLTQ_ADDR          TCP server address (default: localhost:9091)
  BOLTQ_API_KEY       API key for authentication
  BOLTQ_TLS_ENABLED   Enable TLS (true/false)
  BOLTQ_CA_FILE       Path to CA certificate file
  BOLTQ_TLS_INSECURE  Skip TLS verification (true/false)
  BOLTQ_TLS_CERT_FILE Client certificate file, for servers that require one
  BOLTQ_TLS_KEY_FILE  Private key file of the client certificate"
    )
}

pub fn publish_usage() -> String {
    format!("usage: {PROGRAM} publish -topic <name> -payload <json>")
}

pub fn consume_usage() -> String {
    format!("usage: {PROGRAM} consume -topic <name>")
}

/// `ack` or `nack`.
pub fn id_usage(command: &str) -> String {
    format!("usage: {PROGRAM} {command} -id <message_id>")
}

pub fn dlq_usage() -> String {
    format!(
        "usage: {PROGRAM} dlq list [-queue <name>]
       {PROGRAM} dlq read -queue <name> [-offset <n>] [-limit <n>]
       {PROGRAM} dlq requeue -queue <name> [-limit <n>]
       {PROGRAM} dlq purge -queue <name>"
    )
}

pub fn server_hint() -> String {
    // v1 pointed at `boltq-server`; BoltQ's server binary is `boltq`.
    "Use 'boltq' (the BoltQ server binary) to start the server".to_string()
}

pub fn unknown_command(command: &str) -> String {
    format!("unknown command: {command}")
}

pub fn published(id: &str, topic: &str) -> String {
    format!("published: id={id} topic={topic}")
}

pub const NO_MESSAGES: &str = "no messages available";

pub fn acked(id: &str) -> String {
    format!("acked: {id}")
}

pub fn nacked(id: &str) -> String {
    format!("nacked: {id}")
}

pub const HEALTHY: &str = "healthy";

pub fn unhealthy(err: &ClientError) -> String {
    format!("unhealthy: {err}")
}

/// `<command> error: <err>`, as v1 reports a failed command (`publish error: …`).
pub fn command_error(command: &str, err: &ClientError) -> String {
    format!("{command} error: {err}")
}

/// A consumed message as v1 prints it: the Go SDK's `Message` struct through
/// `MarshalIndent`, i.e. keys `id, topic, payload, headers (only if any), timestamp, retry,
/// delivery_count`, the payload in the server's key order.
pub fn consumed(message: &ConsumedMessage) -> String {
    let mut text = String::from("{");
    text.push_str("\"id\":");
    json::write_string(&mut text, &message.id);
    text.push_str(",\"topic\":");
    json::write_string(&mut text, &message.topic);
    text.push_str(",\"payload\":");
    // The client took the payload from a validated reply, so compaction cannot fail; fall
    // back to the text as received rather than hide the message.
    let payload =
        json::compact(&message.payload_json).unwrap_or_else(|_| message.payload_json.clone());
    text.push_str(&payload);
    if !message.headers.is_empty() {
        text.push_str(",\"headers\":{");
        for (i, (k, v)) in message.headers.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            json::write_string(&mut text, k);
            text.push(':');
            json::write_string(&mut text, v);
        }
        text.push('}');
    }
    text.push_str(&format!(
        ",\"timestamp\":{},\"retry\":{},\"delivery_count\":{}}}",
        message.timestamp_ns, message.retry, message.delivery_count
    ));
    json::indent(&text)
}

/// The Stats object as v1 prints it: decoded into a Go `map[string]any`, so keys sorted.
pub fn stats(value: &Value) -> String {
    json::pretty_generic(value)
}

/// A dead-letter command's reply: keys sorted, numbers exactly as received, 2-space indent.
pub fn dlq_reply(value: &Value) -> String {
    json::indent(&value.to_string())
}

/// Go's `log.Fatalf` line: `YYYY/MM/DD HH:MM:SS <message>` in local time.
pub fn fatal_line(local_timestamp: &str, message: &str) -> String {
    format!("{local_timestamp} {message}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq::client::Headers;
    use serde_json::json;

    fn message(payload: &str, headers: &[(&str, &str)]) -> ConsumedMessage {
        ConsumedMessage {
            id: "9f86d081884c7d659a2feaa0c55ad015".into(),
            topic: "jobs".into(),
            payload_json: payload.into(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Headers>(),
            timestamp_ns: 1_700_000_000_123_456_789,
            retry: 2,
            delivery_count: 0,
        }
    }

    #[test]
    fn consumed_message_prints_like_go_marshal_indent() {
        let m = message(
            r#"{"z":1,"a":{"b":[1,"<x>"]},"e":{}}"#,
            &[("trace", "t1"), ("a", "&")],
        );
        let want = r#"{
  "id": "9f86d081884c7d659a2feaa0c55ad015",
  "topic": "jobs",
  "payload": {
    "z": 1,
    "a": {
      "b": [
        1,
        "\u003cx\u003e"
      ]
    },
    "e": {}
  },
  "headers": {
    "a": "\u0026",
    "trace": "t1"
  },
  "timestamp": 1700000000123456789,
  "retry": 2,
  "delivery_count": 0
}"#;
        assert_eq!(consumed(&m), want);
    }

    #[test]
    fn consumed_message_without_headers_omits_them() {
        let want = "{\n  \"id\": \"9f86d081884c7d659a2feaa0c55ad015\",\n  \"topic\": \"jobs\",\n  \"payload\": \"hi\",\n  \"timestamp\": 1700000000123456789,\n  \"retry\": 2,\n  \"delivery_count\": 0\n}";
        assert_eq!(consumed(&message("\"hi\"", &[])), want);
        assert!(consumed(&message("null", &[])).contains("\"payload\": null,"));
    }

    #[test]
    fn stats_print_sorted_with_two_space_indent() {
        let v = json!({
            "Queues": {"jobs": 3, "emails": 0},
            "Topics": {},
            "DeadLetters": {"jobs_dead_letter": 1},
            "PendingCount": 2,
            "DelayedCount": 0
        });
        let want = r#"{
  "DeadLetters": {
    "jobs_dead_letter": 1
  },
  "DelayedCount": 0,
  "PendingCount": 2,
  "Queues": {
    "emails": 0,
    "jobs": 3
  },
  "Topics": {}
}"#;
        assert_eq!(stats(&v), want);
    }

    #[test]
    fn one_line_outputs() {
        assert_eq!(published("abc", "jobs"), "published: id=abc topic=jobs");
        assert_eq!(acked("abc"), "acked: abc");
        assert_eq!(nacked("abc"), "nacked: abc");
        assert_eq!(NO_MESSAGES, "no messages available");
        assert_eq!(HEALTHY, "healthy");
        assert_eq!(unknown_command("frob"), "unknown command: frob");
        let err = ClientError::Server("topic is required".into());
        assert_eq!(
            command_error("publish", &err),
            "publish error: server error: topic is required"
        );
        assert_eq!(
            unhealthy(&err),
            "unhealthy: server error: topic is required"
        );
        assert_eq!(
            publish_usage(),
            "usage: boltq-cli publish -topic <name> -payload <json>"
        );
        assert_eq!(consume_usage(), "usage: boltq-cli consume -topic <name>");
        assert_eq!(id_usage("ack"), "usage: boltq-cli ack -id <message_id>");
        assert_eq!(
            fatal_line("2024/01/02 03:04:05", "boom"),
            "2024/01/02 03:04:05 boom"
        );
    }

    #[test]
    fn dlq_replies_keep_numbers_exact() {
        let v =
            json!({"queue": "jobs_dead_letter", "count": 18446744073709551615u64, "messages": []});
        assert_eq!(
            dlq_reply(&v),
            "{\n  \"count\": 18446744073709551615,\n  \"messages\": [],\n  \"queue\": \"jobs_dead_letter\"\n}"
        );
    }

    #[test]
    fn usage_lists_every_command_and_variable() {
        let u = usage();
        for word in [
            "publish",
            "consume",
            "ack",
            "nack",
            "stats",
            "health",
            "dlq",
            "BOLTQ_ADDR",
            "BOLTQ_API_KEY",
            "BOLTQ_TLS_ENABLED",
            "BOLTQ_CA_FILE",
            "BOLTQ_TLS_INSECURE",
            "BOLTQ_TLS_CERT_FILE",
            "BOLTQ_TLS_KEY_FILE",
        ] {
            assert!(u.contains(word), "{word}");
        }
        assert!(u.starts_with("BoltQ CLI\n\nUsage:\n  boltq-cli <command> [flags]\n"));
    }
}
