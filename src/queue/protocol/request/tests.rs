use super::*;
use crate::queue::protocol::frame;

fn req(code: u8, body: &str) -> Result<Request, RequestError> {
    parse(Frame {
        code,
        payload: body.as_bytes(),
    })
}

fn err_text(code: u8, body: &str) -> String {
    match req(code, body) {
        Ok(r) => panic!("{code:#04x} {body:?} parsed as {r:?}"),
        Err(e) => e.text(),
    }
}

fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn publish(topic: &str, payload: &str) -> Publish {
    Publish {
        topic: topic.to_string(),
        payload: Bytes::copy_from_slice(payload.as_bytes()),
        headers: BTreeMap::new(),
        delay_ns: 0,
        ttl_ns: 0,
        priority: 0,
    }
}

fn consume(topic: &str) -> Request {
    Request::Consume(Consume {
        topic: topic.to_string(),
        wait_ms: 0,
        max: None,
    })
}

fn binding(exchange: &str, queue: &str, key: &str) -> Binding {
    Binding {
        exchange: exchange.to_string(),
        queue: queue.to_string(),
        binding_key: key.to_string(),
        headers: BTreeMap::new(),
        match_all: false,
    }
}

const ID: &str = "9f86d081884c7d659a2feaa0c55ad015";

// ---- spec §2.8 ------------------------------------------------------------------------

#[test]
fn spec_worked_example_request() {
    let bytes: Vec<u8> =
        "01 22 00 00 00 7b 22 74 6f 70 69 63 22 3a 22 6a 6f 62 73 22 2c 22 70 61 79 6c \
                          6f 61 64 22 3a 7b 22 6e 22 3a 31 7d 7d"
            .split_whitespace()
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
    let (f, used) = frame::decode(&bytes).unwrap().unwrap();
    assert_eq!(used, bytes.len());
    assert_eq!(
        parse(f),
        Ok(Request::Publish(publish("jobs", r#"{"n":1}"#)))
    );
}

// ---- every v1 error text ----------------------------------------------------------------

#[test]
fn required_field_texts() {
    for code in [op::PUBLISH, op::PUBLISH_TOPIC, op::CONSUME] {
        assert_eq!(err_text(code, "{}"), "topic is required");
        assert_eq!(err_text(code, r#"{"topic":""}"#), "topic is required");
        assert_eq!(err_text(code, "null"), "topic is required");
    }
    assert_eq!(err_text(op::CONSUME, r#"{"id":"s1"}"#), "topic is required");
    for code in [op::ACK, op::NACK] {
        assert_eq!(err_text(code, "{}"), "id is required");
        assert_eq!(err_text(code, r#"{"id":""}"#), "id is required");
    }
    assert_eq!(
        err_text(op::EXCHANGE_DECLARE, r#"{"type":"fanout"}"#),
        "name is required"
    );
    assert_eq!(
        err_text(op::EXCHANGE_DELETE, r#"{"name":""}"#),
        "name is required"
    );
    for code in [op::BIND_QUEUE, op::UNBIND_QUEUE] {
        let want = "exchange and queue are required";
        assert_eq!(err_text(code, r#"{"exchange":"e"}"#), want);
        assert_eq!(err_text(code, r#"{"queue":"q"}"#), want);
        assert_eq!(err_text(code, r#"{"exchange":"","queue":"q"}"#), want);
    }
    let want = "node_id and addr are required";
    assert_eq!(err_text(op::CLUSTER_JOIN, r#"{"node_id":"n2"}"#), want);
    assert_eq!(err_text(op::CLUSTER_JOIN, r#"{"addr":"h:9100"}"#), want);
    assert_eq!(err_text(op::CLUSTER_LEAVE, "{}"), "node_id is required");
}

#[test]
fn unknown_command_text_has_two_lowercase_hex_digits() {
    assert_eq!(err_text(0x00, "{}"), "unknown command: 0x00");
    assert_eq!(err_text(0x0a, "{}"), "unknown command: 0x0a");
    assert_eq!(err_text(0x0f, ""), "unknown command: 0x0f");
    assert_eq!(err_text(0x21, "{}"), "unknown command: 0x21");
    assert_eq!(err_text(0xff, "garbage"), "unknown command: 0xff");
    assert_eq!(
        req(0xab, "").unwrap_err(),
        RequestError::UnknownCommand(0xab)
    );
}

#[test]
fn empty_payload_on_json_commands() {
    let want = "invalid json: unexpected end of JSON input";
    for code in [
        op::PUBLISH,
        op::PUBLISH_TOPIC,
        op::CONSUME,
        op::EXCHANGE_DECLARE,
        op::EXCHANGE_DELETE,
        op::BIND_QUEUE,
        op::UNBIND_QUEUE,
        op::PUBLISH_EXCHANGE,
    ] {
        assert_eq!(err_text(code, ""), want, "code {code:#04x}");
        assert_eq!(err_text(code, " \n"), want, "code {code:#04x}");
    }
}

#[test]
fn commands_with_their_own_parse_error_texts() {
    for code in [op::ACK, op::NACK, op::CLUSTER_JOIN, op::CLUSTER_LEAVE] {
        for body in ["", "{", "nope", r#"{"id":5,"node_id":5}"#, "[]"] {
            assert_eq!(err_text(code, body), "invalid json", "{code:#04x} {body:?}");
        }
    }
    for body in ["", "{", r#"{"count":"5"}"#, r#"{"count":1.5}"#, "[1]"] {
        assert_eq!(
            err_text(op::PREFETCH, body),
            "invalid prefetch payload",
            "{body:?}"
        );
    }
    for body in ["", "{", r#"{"api_key":5}"#, "[]"] {
        assert_eq!(
            req(op::AUTH, body),
            Ok(Request::Auth {
                api_key: Err(RequestError::InvalidAuthPayload)
            })
        );
    }
    assert_eq!(
        RequestError::InvalidAuthPayload.text(),
        "invalid auth payload"
    );
}

#[test]
fn payload_ignoring_commands_accept_anything() {
    for body in ["", "{}", "not json at all", "\u{0}\u{1}", "{\"a\":"] {
        assert_eq!(req(op::PING, body), Ok(Request::Ping));
        assert_eq!(req(op::STATS, body), Ok(Request::Stats));
        assert_eq!(req(op::CONFIRM_SELECT, body), Ok(Request::ConfirmSelect));
        assert_eq!(req(op::CLUSTER_STATUS, body), Ok(Request::ClusterStatus));
    }
}

#[test]
fn no_parse_error_closes_the_connection() {
    for e in [
        RequestError::UnknownCommand(0x42),
        RequestError::InvalidJsonNoDetail,
        RequestError::InvalidJson("x".into()),
        TOPIC_REQUIRED,
    ] {
        assert!(!e.closes_connection());
    }
}

// ---- Go encoding/json semantics ---------------------------------------------------------

#[test]
fn keys_match_case_insensitively() {
    assert_eq!(req(op::CONSUME, r#"{"TOPIC":"q"}"#), Ok(consume("q")));
    assert_eq!(req(op::CONSUME, r#"{"ToPiC":"q"}"#), Ok(consume("q")));
    let mut p = publish("q", "1");
    p.priority = 3;
    p.headers = headers(&[("a", "b")]);
    assert_eq!(
        req(
            op::PUBLISH,
            r#"{"Topic":"q","PAYLOAD":1,"Priority":3,"HEADERS":{"a":"b"}}"#
        ),
        Ok(Request::Publish(p))
    );
    // Go folds the Kelvin sign to 'k' and the long s to 's'.
    assert_eq!(
        req(op::AUTH, "{\"api_\u{212A}ey\":\"s\"}"),
        Ok(Request::Auth {
            api_key: Ok("s".into())
        })
    );
    assert_eq!(
        req(op::CONSUME, "{\"topic\":\"q\",\"wait_m\u{017F}\":5}"),
        Ok(Request::Consume(Consume {
            topic: "q".into(),
            wait_ms: 5,
            max: None
        }))
    );
    // Escapes in keys are resolved before matching.
    assert_eq!(req(op::CONSUME, r#"{"top\u0069c":"q"}"#), Ok(consume("q")));
}

/// Go applies members in order, so the last of several case variants wins; with the exact
/// spelling last, the exact one wins.
#[test]
fn duplicate_keys_last_one_wins() {
    assert_eq!(
        req(op::CONSUME, r#"{"Topic":"a","topic":"b"}"#),
        Ok(consume("b"))
    );
    assert_eq!(
        req(op::CONSUME, r#"{"topic":"b","Topic":"a"}"#),
        Ok(consume("a"))
    );
    assert_eq!(
        req(op::CONSUME, r#"{"topic":"a","topic":"b"}"#),
        Ok(consume("b"))
    );
}

#[test]
fn unknown_keys_are_ignored_whatever_their_value() {
    assert_eq!(
        req(
            op::CONSUME,
            r#"{"x":[1,{"y":null}],"topic":"q","z":"\u00e9","n":-1.5e3,"t":true}"#
        ),
        Ok(consume("q"))
    );
    // PUBLISH_EXCHANGE has no delay/ttl fields: any value is ignored, as in v1.
    match req(
        op::PUBLISH_EXCHANGE,
        r#"{"exchange":"","routing_key":"q","delay":"soon","ttl":[]}"#,
    ) {
        Ok(Request::PublishExchange(p)) => assert_eq!(p.routing_key, "q"),
        other => panic!("{other:?}"),
    }
    // UNBIND has no headers/match_all: ignored even with wrong types.
    assert_eq!(
        req(
            op::UNBIND_QUEUE,
            r#"{"exchange":"e","queue":"q","headers":5,"match_all":"x"}"#
        ),
        Ok(Request::UnbindQueue(binding("e", "q", "")))
    );
}

#[test]
fn null_leaves_zero_values() {
    assert_eq!(
        req(
            op::PUBLISH,
            r#"{"topic":"q","payload":null,"headers":null,"delay":null,"ttl":null,"priority":null}"#
        ),
        Ok(Request::Publish(publish("q", "null")))
    );
    // Absent payload is `null` too.
    assert_eq!(
        req(op::PUBLISH, r#"{"topic":"q"}"#),
        Ok(Request::Publish(publish("q", "null")))
    );
    // null does not overwrite an earlier value of a string field...
    assert_eq!(
        req(op::CONSUME, r#"{"topic":"a","topic":null}"#),
        Ok(consume("a"))
    );
    // ...but resets a map, and a null map value is "".
    let r = req(
        op::PUBLISH,
        r#"{"topic":"q","headers":{"a":"1"},"headers":null}"#,
    );
    assert_eq!(r, Ok(Request::Publish(publish("q", "null"))));
    let mut p = publish("q", "null");
    p.headers = headers(&[("a", ""), ("b", "2")]);
    assert_eq!(
        req(
            op::PUBLISH,
            r#"{"topic":"q","headers":{"a":null},"headers":{"b":"2"}}"#
        ),
        Ok(Request::Publish(p)),
        "Go merges a repeated map into the one already decoded"
    );
    assert_eq!(
        req(
            op::EXCHANGE_DECLARE,
            r#"{"name":"e","type":null,"durable":null}"#
        ),
        Ok(Request::ExchangeDeclare(ExchangeDeclare {
            name: "e".into(),
            kind: ExchangeKind::Direct,
            durable: false
        }))
    );
    assert_eq!(
        req(op::PREFETCH, r#"{"count":null}"#),
        Ok(Request::Prefetch { count: 0 })
    );
}

#[test]
fn wrong_types_are_invalid_json() {
    let cases = [
        (
            op::PUBLISH,
            r#"{"topic":"q","priority":"5"}"#,
            "json: cannot unmarshal string into Go struct field publishRequest.priority of type int",
        ),
        (
            op::PUBLISH,
            r#"{"topic":"q","delay":1.5}"#,
            "json: cannot unmarshal number 1.5 into Go struct field publishRequest.delay of type int64",
        ),
        (
            op::PUBLISH,
            r#"{"topic":"q","ttl":"5"}"#,
            "json: cannot unmarshal string into Go struct field publishRequest.ttl of type int64",
        ),
        (
            op::PUBLISH,
            r#"{"topic":"q","delay":1e3}"#,
            "json: cannot unmarshal number 1e3 into Go struct field publishRequest.delay of type int64",
        ),
        (
            op::PUBLISH,
            r#"{"topic":"q","delay":9223372036854775808}"#,
            "json: cannot unmarshal number 9223372036854775808 into Go struct field publishRequest.delay of type int64",
        ),
        (
            op::PUBLISH,
            r#"{"topic":5}"#,
            "json: cannot unmarshal number into Go struct field publishRequest.topic of type string",
        ),
        (
            op::PUBLISH,
            r#"{"topic":"q","headers":{"a":1}}"#,
            "json: cannot unmarshal number into Go struct field publishRequest.headers of type string",
        ),
        (
            op::PUBLISH,
            r#"{"topic":"q","headers":["a"]}"#,
            "json: cannot unmarshal array into Go struct field publishRequest.headers of type map[string]string",
        ),
        (
            op::CONSUME,
            r#"{"topic":"q","id":"s","durable":"true"}"#,
            "json: cannot unmarshal string into Go struct field consumeRequest.durable of type bool",
        ),
        (
            op::CONSUME,
            r#"{"topic":"q","wait_ms":-1}"#,
            "json: cannot unmarshal number -1 into Go struct field consumeRequest.wait_ms of type uint64",
        ),
        (
            op::BIND_QUEUE,
            r#"{"exchange":"e","queue":"q","match_all":1}"#,
            "json: cannot unmarshal number into Go struct field bindRequest.match_all of type bool",
        ),
        (
            op::PUBLISH,
            r#"["topic"]"#,
            "json: cannot unmarshal array into Go value of type main.publishRequest",
        ),
        (
            op::PUBLISH,
            r#""q""#,
            "json: cannot unmarshal string into Go value of type main.publishRequest",
        ),
    ];
    for (code, body, detail) in cases {
        assert_eq!(
            err_text(code, body),
            format!("invalid json: {detail}"),
            "{body}"
        );
    }
    // The integer fields accept any integer in range, negative ones included.
    match req(
        op::PUBLISH,
        r#"{"topic":"q","delay":-5,"priority":-9223372036854775808}"#,
    ) {
        Ok(Request::Publish(p)) => assert_eq!((p.delay_ns, p.priority), (-5, i64::MIN)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn syntax_errors_win_over_earlier_type_errors() {
    assert_eq!(
        err_text(op::PUBLISH, r#"{"priority":"5","topic":"q",}"#),
        "invalid json: invalid character '}' looking for beginning of object key string"
    );
    assert_eq!(
        err_text(op::PUBLISH, r#"{"priority":"5","topic":"q"} x"#),
        "invalid json: invalid character 'x' after top-level value"
    );
    // The first type error is the one reported.
    assert_eq!(
        err_text(op::PUBLISH, r#"{"delay":"a","ttl":true}"#),
        "invalid json: json: cannot unmarshal string into Go struct field publishRequest.delay of type int64"
    );
}

#[test]
fn nesting_depth_is_bounded() {
    let nested = |n: usize| {
        format!(
            r#"{{"topic":"q","payload":{}1{}}}"#,
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    assert!(req(op::PUBLISH, &nested(DEPTH_MAX - 1)).is_ok());
    let want = format!("invalid json: exceeded max depth of {DEPTH_MAX}");
    assert_eq!(err_text(op::PUBLISH, &nested(DEPTH_MAX)), want);
    // Deep nesting in an ignored key, and an unterminated 4 MiB-deep payload: no stack use.
    let ignored = format!(r#"{{"x":{},"topic":"q"}}"#, "{\"a\":".repeat(500));
    assert_eq!(err_text(op::CONSUME, &ignored), want);
    let huge = "[".repeat(frame::PAYLOAD_BYTES_MAX);
    assert_eq!(err_text(op::PUBLISH, &huge), want);
    let huge_obj = format!(r#"{{"topic":"q","payload":{}"#, "{\"a\":".repeat(800_000));
    assert_eq!(err_text(op::PUBLISH, &huge_obj), want);
}

#[test]
fn payload_is_kept_as_compact_json_text() {
    let cases = [
        (r#"{"topic":"q","payload":"hello"}"#, r#""hello""#),
        (r#"{"topic":"q","payload":"{\"n\":1}"}"#, r#""{\"n\":1}""#),
        (
            r#"{"topic":"q","payload": { "a" : [ 1 , 2 ] } }"#,
            r#"{"a":[1,2]}"#,
        ),
        (r#"{"topic":"q","payload":1.50e+2}"#, "1.50e+2"),
        (
            r#"{"topic":"q","payload":"\u003cb\u003e é"}"#,
            r#""\u003cb\u003e é""#,
        ),
        (r#"{"topic":"q","payload":true}"#, "true"),
        (r#"{"topic":"q","payload":[]}"#, "[]"),
        (r#"{"topic":"q","payload":1,"payload":2}"#, "2"),
    ];
    for (body, want) in cases {
        match req(op::PUBLISH, body) {
            Ok(Request::Publish(p)) => assert_eq!(&p.payload[..], want.as_bytes(), "{body}"),
            other => panic!("{body}: {other:?}"),
        }
    }
}

#[test]
fn publish_topic_type_checks_then_drops_delay_and_ttl() {
    let r = req(
        op::PUBLISH_TOPIC,
        r#"{"topic":"t","delay":5,"ttl":6,"priority":2}"#,
    );
    let mut p = publish("t", "null");
    p.priority = 2;
    assert_eq!(r, Ok(Request::PublishTopic(p)));
    assert!(
        err_text(op::PUBLISH_TOPIC, r#"{"topic":"t","delay":"5"}"#).starts_with("invalid json: ")
    );
}

// ---- BoltQ validation beyond v1 -----------------------------------------------------------

#[test]
fn exchange_types_are_validated() {
    for (t, kind) in [
        ("", ExchangeKind::Direct),
        ("direct", ExchangeKind::Direct),
        ("fanout", ExchangeKind::Fanout),
        ("topic", ExchangeKind::Topic),
        ("headers", ExchangeKind::Headers),
    ] {
        let body = format!(r#"{{"name":"e","type":"{t}","durable":true}}"#);
        assert_eq!(
            req(op::EXCHANGE_DECLARE, &body),
            Ok(Request::ExchangeDeclare(ExchangeDeclare {
                name: "e".into(),
                kind,
                durable: true
            }))
        );
        assert_eq!(kind.as_str(), if t.is_empty() { "direct" } else { t });
    }
    assert_eq!(
        err_text(op::EXCHANGE_DECLARE, r#"{"name":"e","type":"Direct"}"#),
        r#"unknown exchange type "Direct": expected direct, fanout, topic or headers"#
    );
    assert_eq!(
        err_text(op::EXCHANGE_DECLARE, r#"{"name":"e","type":"x\"y"}"#),
        r#"unknown exchange type "x\"y": expected direct, fanout, topic or headers"#
    );
    // name is checked first, as v1 checks it.
    assert_eq!(
        err_text(op::EXCHANGE_DECLARE, r#"{"type":"bogus"}"#),
        "name is required"
    );
}

#[test]
fn names_are_bounded() {
    let long = "q".repeat(NAME_BYTES_MAX + 1);
    let ok = "q".repeat(NAME_BYTES_MAX);
    assert_eq!(
        err_text(op::CONSUME, &format!(r#"{{"topic":"{long}"}}"#)),
        "topic is too long: at most 1024 bytes"
    );
    assert_eq!(
        req(op::CONSUME, &format!(r#"{{"topic":"{ok}"}}"#)),
        Ok(consume(&ok))
    );
    assert_eq!(
        err_text(op::CONSUME, &format!(r#"{{"topic":"t","id":"{long}"}}"#)),
        "id is too long: at most 1024 bytes"
    );
    assert_eq!(
        err_text(op::ACK, &format!(r#"{{"id":"{long}"}}"#)),
        "id is too long: at most 1024 bytes"
    );
    assert_eq!(
        err_text(
            op::BIND_QUEUE,
            &format!(r#"{{"exchange":"e","queue":"q","binding_key":"{long}"}}"#)
        ),
        "binding_key is too long: at most 1024 bytes"
    );
}

#[test]
fn messages_that_could_not_be_delivered_are_refused() {
    let fits = "x".repeat(reply::MESSAGE_BODY_BYTES_MAX - 2);
    let body = format!(r#"{{"topic":"q","payload":"{fits}"}}"#);
    assert!(req(op::PUBLISH, &body).is_ok());
    let over = "x".repeat(reply::MESSAGE_BODY_BYTES_MAX - 1);
    for code in [op::PUBLISH, op::PUBLISH_TOPIC] {
        let body = format!(r#"{{"topic":"q","payload":"{over}"}}"#);
        assert!(err_text(code, &body).starts_with("message too large: "));
    }
    let body = format!(r#"{{"routing_key":"q","headers":{{"h":"{over}"}}}}"#);
    assert!(err_text(op::PUBLISH_EXCHANGE, &body).starts_with("message too large: "));
}

// ---- BoltQ additions ---------------------------------------------------------------------

#[test]
fn consume_wait_and_batch_fields() {
    let c = |body: &str| match req(op::CONSUME, body) {
        Ok(Request::Consume(c)) => (c.wait_ms, c.max),
        other => panic!("{body}: {other:?}"),
    };
    assert_eq!(c(r#"{"topic":"q"}"#), (0, None));
    assert_eq!(c(r#"{"topic":"q","wait_ms":2500}"#), (2500, None));
    assert_eq!(
        c(r#"{"topic":"q","wait_ms":999999999999}"#),
        (WAIT_MS_MAX, None)
    );
    assert_eq!(c(r#"{"topic":"q","max":1}"#), (0, Some(1)));
    assert_eq!(
        c(r#"{"topic":"q","max":1000,"wait_ms":10}"#),
        (10, Some(1000))
    );
    assert_eq!(c(r#"{"topic":"q","max":5,"max":null}"#), (0, None));
    for max in ["0", "1001", "-1"] {
        let body = format!(r#"{{"topic":"q","max":{max}}}"#);
        assert_eq!(
            err_text(op::CONSUME, &body),
            "max must be between 1 and 1000"
        );
    }
    assert!(err_text(op::CONSUME, r#"{"topic":"q","max":"5"}"#).starts_with("invalid json: "));
    // `ack` (a BoltQ addition) asks for acknowledged pushes, on durable subscriptions only.
    assert_eq!(
        req(
            op::CONSUME,
            r#"{"topic":"t","id":"s","durable":true,"ack":true}"#
        ),
        Ok(Request::Subscribe(Subscribe {
            topic: "t".into(),
            id: "s".into(),
            durable: true,
            ack: true,
        }))
    );
    assert!(
        err_text(op::CONSUME, r#"{"topic":"t","id":"s","ack":true}"#)
            .starts_with("ack needs durable")
    );
    assert!(err_text(op::CONSUME, r#"{"topic":"t","id":"s","ack":1}"#).contains("ack"));
    // Subscribe ignores them (even out-of-range ones).
    assert_eq!(
        req(op::CONSUME, r#"{"topic":"t","id":"s","max":0,"wait_ms":5}"#),
        Ok(Request::Subscribe(Subscribe {
            topic: "t".into(),
            id: "s".into(),
            durable: false,
            ack: false,
        }))
    );
}

#[test]
fn dead_letter_commands() {
    use ext_op::*;
    assert_eq!(req(DLQ_LIST, ""), Ok(Request::DlqList { queue: None }));
    assert_eq!(req(DLQ_LIST, "{}"), Ok(Request::DlqList { queue: None }));
    assert_eq!(
        req(DLQ_LIST, r#"{"queue":"orders"}"#),
        Ok(Request::DlqList {
            queue: Some("orders".into())
        })
    );
    assert_eq!(
        req(DLQ_READ, r#"{"queue":"orders"}"#),
        Ok(Request::DlqRead {
            queue: "orders".into(),
            offset: 0,
            limit: DLQ_READ_LIMIT_DEFAULT
        })
    );
    assert_eq!(
        req(DLQ_READ, r#"{"queue":"orders","offset":20,"limit":10}"#),
        Ok(Request::DlqRead {
            queue: "orders".into(),
            offset: 20,
            limit: 10
        })
    );
    for limit in ["0", "1001"] {
        let body = format!(r#"{{"queue":"q","limit":{limit}}}"#);
        assert_eq!(
            err_text(DLQ_READ, &body),
            "limit must be between 1 and 1000"
        );
    }
    assert_eq!(
        req(DLQ_REQUEUE, r#"{"queue":"orders"}"#),
        Ok(Request::DlqRequeue {
            queue: "orders".into(),
            limit: None
        })
    );
    assert_eq!(
        req(DLQ_REQUEUE, r#"{"queue":"orders","limit":5}"#),
        Ok(Request::DlqRequeue {
            queue: "orders".into(),
            limit: Some(5)
        })
    );
    assert_eq!(
        err_text(DLQ_REQUEUE, r#"{"queue":"q","limit":0}"#),
        "limit must be at least 1"
    );
    assert_eq!(
        req(DLQ_PURGE, r#"{"Queue":"orders"}"#),
        Ok(Request::DlqPurge {
            queue: "orders".into()
        })
    );
    for code in [DLQ_READ, DLQ_REQUEUE, DLQ_PURGE] {
        assert_eq!(err_text(code, ""), "queue is required");
        assert_eq!(err_text(code, "{}"), "queue is required");
        assert!(err_text(code, "{").starts_with("invalid json: "));
    }
    for code in [DLQ_LIST, DLQ_READ, DLQ_REQUEUE, DLQ_PURGE] {
        assert!(code >= op::EXTENSIONS_FIRST);
    }
}

#[test]
fn request_codes_round_trip() {
    let bodies: &[(u8, &str)] = &[
        (op::PUBLISH, r#"{"topic":"q"}"#),
        (op::PUBLISH_TOPIC, r#"{"topic":"q"}"#),
        (op::CONSUME, r#"{"topic":"q"}"#),
        (op::CONSUME, r#"{"topic":"q","id":"s"}"#),
        (op::ACK, r#"{"id":"x"}"#),
        (op::NACK, r#"{"id":"x"}"#),
        (op::PING, ""),
        (op::STATS, ""),
        (op::AUTH, ""),
        (op::PREFETCH, "{}"),
        (op::CLUSTER_JOIN, r#"{"node_id":"n","addr":"a"}"#),
        (op::CLUSTER_LEAVE, r#"{"node_id":"n"}"#),
        (op::CLUSTER_STATUS, ""),
        (op::CONFIRM_SELECT, ""),
        (op::EXCHANGE_DECLARE, r#"{"name":"e"}"#),
        (op::EXCHANGE_DELETE, r#"{"name":"e"}"#),
        (op::BIND_QUEUE, r#"{"exchange":"e","queue":"q"}"#),
        (op::UNBIND_QUEUE, r#"{"exchange":"e","queue":"q"}"#),
        (op::PUBLISH_EXCHANGE, "{}"),
        (ext_op::DLQ_LIST, ""),
        (ext_op::DLQ_READ, r#"{"queue":"q"}"#),
        (ext_op::DLQ_REQUEUE, r#"{"queue":"q"}"#),
        (ext_op::DLQ_PURGE, r#"{"queue":"q"}"#),
    ];
    for &(code, body) in bodies {
        assert_eq!(req(code, body).unwrap().code(), code, "{body}");
    }
}

#[test]
fn ack_target_parses_ids() {
    let t = AckTarget { id: ID.to_string() };
    assert_eq!(t.message_id().unwrap().to_hex(), ID);
    assert_eq!(AckTarget { id: "nope".into() }.message_id(), None);
}

// ---- exact SDK request bodies (spec §10) ---------------------------------------------------

/// Go SDK: bodies are Go maps, so keys are alphabetical; payloads are `json.Marshal`ed
/// (compact, HTML-escaped), headers `null` when nil.
#[test]
fn go_sdk_bodies() {
    let mut full = publish("jobs", r#"{"html":"\u003cb\u003e","n":1}"#);
    full.headers = headers(&[("k", "v"), ("trace", "a&b")]);
    full.delay_ns = 5_000_000_000;
    full.ttl_ns = 60_000_000_000;
    full.priority = 7;
    let mut topic_pub = publish("news", r#"{"a":[1,2]}"#);
    topic_pub.priority = 2;
    let mut header_binding = binding("hx", "q2", "");
    header_binding.headers = headers(&[("format", "pdf"), ("type", "report")]);
    header_binding.match_all = true;
    let cases: Vec<(u8, &str, Request)> = vec![
        (
            op::AUTH,
            r#"{"api_key":"secret"}"#,
            Request::Auth {
                api_key: Ok("secret".into()),
            },
        ),
        (op::CONFIRM_SELECT, "{}", Request::ConfirmSelect),
        (
            op::PUBLISH,
            r#"{"delay":0,"headers":null,"payload":{"n":1},"priority":0,"topic":"jobs","ttl":0}"#,
            Request::Publish(publish("jobs", r#"{"n":1}"#)),
        ),
        (
            op::PUBLISH,
            r#"{"delay":5000000000,"headers":{"k":"v","trace":"a\u0026b"},"payload":{"html":"\u003cb\u003e","n":1},"priority":7,"topic":"jobs","ttl":60000000000}"#,
            Request::Publish(full),
        ),
        (
            op::PUBLISH,
            r#"{"delay":0,"headers":null,"payload":"hello","priority":0,"topic":"jobs","ttl":0}"#,
            Request::Publish(publish("jobs", r#""hello""#)),
        ),
        (
            op::PUBLISH_TOPIC,
            r#"{"headers":null,"payload":{"a":[1,2]},"priority":2,"topic":"news"}"#,
            Request::PublishTopic(topic_pub),
        ),
        (
            op::EXCHANGE_DECLARE,
            r#"{"durable":true,"name":"orders","type":"topic"}"#,
            Request::ExchangeDeclare(ExchangeDeclare {
                name: "orders".into(),
                kind: ExchangeKind::Topic,
                durable: true,
            }),
        ),
        (
            op::EXCHANGE_DELETE,
            r#"{"name":"orders"}"#,
            Request::ExchangeDelete {
                name: "orders".into(),
            },
        ),
        (
            op::BIND_QUEUE,
            r#"{"binding_key":"order.*","exchange":"orders","headers":null,"match_all":false,"queue":"q1"}"#,
            Request::BindQueue(binding("orders", "q1", "order.*")),
        ),
        (
            op::BIND_QUEUE,
            r#"{"binding_key":"","exchange":"hx","headers":{"format":"pdf","type":"report"},"match_all":true,"queue":"q2"}"#,
            Request::BindQueue(header_binding),
        ),
        (
            op::UNBIND_QUEUE,
            r#"{"binding_key":"order.*","exchange":"orders","queue":"q1"}"#,
            Request::UnbindQueue(binding("orders", "q1", "order.*")),
        ),
        (
            op::PUBLISH_EXCHANGE,
            r#"{"exchange":"orders","headers":null,"payload":{"n":1},"priority":0,"routing_key":"order.created"}"#,
            Request::PublishExchange(PublishExchange {
                exchange: "orders".into(),
                routing_key: "order.created".into(),
                payload: Bytes::from_static(br#"{"n":1}"#),
                headers: BTreeMap::new(),
                priority: 0,
            }),
        ),
        (op::CONSUME, r#"{"topic":"jobs"}"#, consume("jobs")),
        (
            op::CONSUME,
            r#"{"durable":false,"id":"s1","topic":"news"}"#,
            Request::Subscribe(Subscribe {
                topic: "news".into(),
                id: "s1".into(),
                durable: false,
                ack: false,
            }),
        ),
        (
            op::CONSUME,
            r#"{"durable":true,"id":"s1","topic":"news"}"#,
            Request::Subscribe(Subscribe {
                topic: "news".into(),
                id: "s1".into(),
                durable: true,
                ack: false,
            }),
        ),
        (
            op::ACK,
            r#"{"id":"9f86d081884c7d659a2feaa0c55ad015"}"#,
            Request::Ack(AckTarget { id: ID.into() }),
        ),
        (
            op::NACK,
            r#"{"id":"9f86d081884c7d659a2feaa0c55ad015"}"#,
            Request::Nack(AckTarget { id: ID.into() }),
        ),
        (op::PING, "{}", Request::Ping),
        (op::STATS, "{}", Request::Stats),
        (op::CLUSTER_STATUS, "{}", Request::ClusterStatus),
        (
            op::PREFETCH,
            r#"{"count":10}"#,
            Request::Prefetch { count: 10 },
        ),
    ];
    for (code, body, want) in cases {
        assert_eq!(req(code, body), Ok(want), "{code:#04x} {body}");
    }
}

/// Node SDK: `JSON.stringify` of object literals in source order; payloads sent as JSON
/// strings; headers `{}` by default. The old (pre-cache) file has no `priority`.
#[test]
fn node_sdk_bodies() {
    let mut full = publish("jobs", r#""hello""#);
    full.headers = headers(&[("k", "v")]);
    full.delay_ns = 5000; // Node documents ms; v1 (and BoltQ) read nanoseconds.
    full.ttl_ns = 60000;
    full.priority = 3;
    let mut header_binding = binding("hx", "q", "");
    header_binding.headers = headers(&[("x", "1")]);
    header_binding.match_all = true;
    let cases: Vec<(u8, &str, Request)> = vec![
        (
            op::AUTH,
            r#"{"api_key":"secret"}"#,
            Request::Auth {
                api_key: Ok("secret".into()),
            },
        ),
        (
            op::PUBLISH,
            r#"{"topic":"jobs","payload":"{\"n\":1}","headers":{},"delay":0,"ttl":0,"priority":0}"#,
            Request::Publish(publish("jobs", r#""{\"n\":1}""#)),
        ),
        (
            op::PUBLISH,
            r#"{"topic":"jobs","payload":"hello","headers":{"k":"v"},"delay":5000,"ttl":60000,"priority":3}"#,
            Request::Publish(full),
        ),
        (
            op::PUBLISH,
            r#"{"topic":"jobs","payload":"hello","headers":{},"delay":0,"ttl":0}"#,
            Request::Publish(publish("jobs", r#""hello""#)),
        ),
        (
            op::PUBLISH_TOPIC,
            r#"{"topic":"news","payload":"{\"a\":1}","headers":{},"delay":0,"ttl":0,"priority":0}"#,
            Request::PublishTopic(publish("news", r#""{\"a\":1}""#)),
        ),
        (op::CONSUME, r#"{"topic":"jobs"}"#, consume("jobs")),
        (
            op::ACK,
            r#"{"id":"9f86d081884c7d659a2feaa0c55ad015"}"#,
            Request::Ack(AckTarget { id: ID.into() }),
        ),
        (
            op::NACK,
            r#"{"id":"9f86d081884c7d659a2feaa0c55ad015"}"#,
            Request::Nack(AckTarget { id: ID.into() }),
        ),
        (op::PING, "{}", Request::Ping),
        (op::STATS, "{}", Request::Stats),
        (
            op::PREFETCH,
            r#"{"count":5}"#,
            Request::Prefetch { count: 5 },
        ),
        (
            op::CONSUME,
            r#"{"topic":"news","id":"s1","durable":true}"#,
            Request::Subscribe(Subscribe {
                topic: "news".into(),
                id: "s1".into(),
                durable: true,
                ack: false,
            }),
        ),
        (
            op::CONSUME,
            r#"{"topic":"news","id":"s1","durable":false}"#,
            Request::Subscribe(Subscribe {
                topic: "news".into(),
                id: "s1".into(),
                durable: false,
                ack: false,
            }),
        ),
        (op::CONFIRM_SELECT, "{}", Request::ConfirmSelect),
        (
            op::EXCHANGE_DECLARE,
            r#"{"name":"ex","type":"direct","durable":false}"#,
            Request::ExchangeDeclare(ExchangeDeclare {
                name: "ex".into(),
                kind: ExchangeKind::Direct,
                durable: false,
            }),
        ),
        (
            op::EXCHANGE_DELETE,
            r#"{"name":"ex"}"#,
            Request::ExchangeDelete { name: "ex".into() },
        ),
        (
            op::BIND_QUEUE,
            r#"{"exchange":"ex","queue":"q","binding_key":"","headers":null,"match_all":false}"#,
            Request::BindQueue(binding("ex", "q", "")),
        ),
        (
            op::BIND_QUEUE,
            r#"{"exchange":"hx","queue":"q","binding_key":"","headers":{"x":"1"},"match_all":true}"#,
            Request::BindQueue(header_binding),
        ),
        (
            op::UNBIND_QUEUE,
            r#"{"exchange":"ex","queue":"q","binding_key":""}"#,
            Request::UnbindQueue(binding("ex", "q", "")),
        ),
        (
            op::PUBLISH_EXCHANGE,
            r#"{"exchange":"ex","routing_key":"rk","payload":"{\"n\":1}","headers":{},"priority":0}"#,
            Request::PublishExchange(PublishExchange {
                exchange: "ex".into(),
                routing_key: "rk".into(),
                payload: Bytes::from_static(br#""{\"n\":1}""#),
                headers: BTreeMap::new(),
                priority: 0,
            }),
        ),
    ];
    for (code, body, want) in cases {
        assert_eq!(req(code, body), Ok(want), "{code:#04x} {body}");
    }
}

// ---- property test: random and mutated frames ----------------------------------------------

/// xorshift64* — deterministic, seedable, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

const FIELD_NAMES: &[&str] = &[
    "topic",
    "Topic",
    "TOPIC",
    "payload",
    "headers",
    "delay",
    "ttl",
    "priority",
    "id",
    "ids",
    "durable",
    "ack",
    "api_key",
    "count",
    "node_id",
    "addr",
    "name",
    "type",
    "exchange",
    "queue",
    "binding_key",
    "match_all",
    "routing_key",
    "wait_ms",
    "max",
    "offset",
    "limit",
    "x",
    "",
];

const SEED_BODIES: &[&str] = &[
    r#"{"delay":0,"headers":null,"payload":{"n":1},"priority":0,"topic":"jobs","ttl":0}"#,
    r#"{"topic":"jobs","payload":"{\"n\":1}","headers":{},"delay":0,"ttl":0,"priority":0}"#,
    r#"{"binding_key":"a.*","exchange":"e","headers":{"a":"b"},"match_all":true,"queue":"q"}"#,
    r#"{"topic":"q","id":"s","durable":true,"wait_ms":100,"max":10}"#,
    r#"{"name":"e","type":"topic","durable":false}"#,
    r#"{"queue":"q","offset":1,"limit":2}"#,
    r#"{"ids":["a","b"],"topic":"q","id":"s","durable":true,"ack":true}"#,
    r#"{"api_key":"k","count":3,"node_id":"n","addr":"a:1"}"#,
    r#"{"topic":"q","payload":[1,-2.5e3,"\u00e9\ud83d\ude00",{"a":[true,false,null]}]}"#,
];

fn random_value(rng: &mut Rng, depth: usize, out: &mut String) {
    let choice = if depth > 6 {
        rng.below(5)
    } else {
        rng.below(8)
    };
    match choice {
        0 => out.push_str(rng.pick(&["null", "true", "false"])),
        1 => out.push_str(rng.pick(&["0", "-1", "1.5", "1e3", "9223372036854775808", "42", "-0"])),
        2 | 3 => {
            let s = rng.pick(&[
                "", "q", "é", "\\n", "\\u0041", "\\ud800", "a\\\"b", "Direct",
            ]);
            out.push('"');
            out.push_str(s);
            out.push('"');
        }
        4 => out.push_str(rng.pick(&["{}", "[]"])),
        5 | 6 => {
            out.push('{');
            for i in 0..rng.below(5) {
                if i > 0 {
                    out.push(',');
                }
                out.push('"');
                out.push_str(rng.pick(FIELD_NAMES));
                out.push_str("\":");
                random_value(rng, depth + 1, out);
            }
            out.push('}');
        }
        _ => {
            out.push('[');
            for i in 0..rng.below(4) {
                if i > 0 {
                    out.push(',');
                }
                random_value(rng, depth + 1, out);
            }
            out.push(']');
        }
    }
}

fn mutate(rng: &mut Rng, body: &mut Vec<u8>) {
    const ALPHABET: &[u8] = b"{}[]:,\"\\ -01e.nutfl\x00\x1f\xff\xc3";
    for _ in 0..1 + rng.below(4) {
        let at = if body.is_empty() {
            0
        } else {
            rng.below(body.len() + 1)
        };
        match rng.below(5) {
            0 if at < body.len() => body[at] ^= 1 << rng.below(8),
            1 => body.insert(at, rng.pick(ALPHABET)),
            2 if at < body.len() => {
                body.remove(at);
            }
            3 => body.truncate(at),
            _ => {
                let tail = body[at..].to_vec();
                body.extend_from_slice(&tail);
            }
        }
    }
}

fn random_body(rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 => (0..rng.below(48)).map(|_| rng.next() as u8).collect(),
        1 => {
            let mut s = String::new();
            random_value(rng, 0, &mut s);
            s.into_bytes()
        }
        2 => {
            let mut b = rng.pick(SEED_BODIES).as_bytes().to_vec();
            mutate(rng, &mut b);
            b
        }
        _ => {
            let mut s = String::new();
            random_value(rng, 0, &mut s);
            let mut b = s.into_bytes();
            mutate(rng, &mut b);
            b
        }
    }
}

/// What `parse` promises for any input: no panic; errors carry a non-empty text; a parsed
/// payload is valid JSON (lone surrogate escapes included: kept verbatim, as v1 does, so
/// the check ignores values rather than building them); names are bounded.
fn check_parse(code: u8, body: &[u8]) {
    match parse(Frame {
        code,
        payload: body,
    }) {
        Err(e) => assert!(!e.text().is_empty()),
        Ok(Request::Publish(p) | Request::PublishTopic(p)) => {
            assert!(
                serde_json::from_slice::<serde::de::IgnoredAny>(&p.payload).is_ok(),
                "{:?}",
                String::from_utf8_lossy(&p.payload)
            );
            assert!(!p.topic.is_empty() && p.topic.len() <= NAME_BYTES_MAX);
        }
        Ok(Request::PublishExchange(p)) => {
            assert!(
                serde_json::from_slice::<serde::de::IgnoredAny>(&p.payload).is_ok(),
                "{:?}",
                String::from_utf8_lossy(&p.payload)
            );
        }
        Ok(Request::Consume(c)) => {
            assert!(c.wait_ms <= WAIT_MS_MAX);
            assert!(c.max.is_none_or(|m| (1..=BATCH_MAX).contains(&m)));
        }
        Ok(_) => {}
    }
}

/// Our reader and serde_json agree on which inputs are syntactically valid JSON (for valid
/// UTF-8 and shallow nesting, where both are defined the same way).
fn check_syntax_agrees(body: &[u8]) {
    if std::str::from_utf8(body).is_err()
        || body.iter().filter(|&&b| b == b'[' || b == b'{').count() > 64
    {
        return;
    }
    let ours = match json::decode_object(body, "t", |r, _| r.skip()) {
        Ok(()) => true,
        Err(detail) => detail.starts_with("json: cannot unmarshal"),
    };
    let serde = serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
    assert_eq!(
        ours,
        serde,
        "validity of {:?}",
        String::from_utf8_lossy(body)
    );
}

#[test]
fn random_and_mutated_frames_never_panic() {
    let seed = std::env::var("BOLTQ_PROP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    println!(
        "random_and_mutated_frames_never_panic seed={seed} (rerun with BOLTQ_PROP_SEED={seed})"
    );
    let mut rng = Rng(seed);
    for _ in 0..200_000 {
        let body = random_body(&mut rng);
        let code = match rng.below(3) {
            0 => rng.next() as u8,
            _ => rng.pick(&[
                op::PUBLISH,
                op::PUBLISH_TOPIC,
                op::CONSUME,
                op::ACK,
                op::AUTH,
                op::PREFETCH,
                op::CLUSTER_JOIN,
                op::EXCHANGE_DECLARE,
                op::BIND_QUEUE,
                op::PUBLISH_EXCHANGE,
                ext_op::DLQ_READ,
                ext_op::DLQ_REQUEUE,
            ]),
        };
        check_parse(code, &body);
        check_syntax_agrees(&body);
    }
}

/// A stored payload holds its bytes and no more: its buffer lives as long as the message,
/// so spare capacity would cost memory per message held (it used to be ~2x the payload).
#[test]
fn a_parsed_payload_holds_no_spare_capacity() {
    let long = "x".repeat(1000);
    let list = format!("[{}]", vec!["1"; 500].join(","));
    for payload in [format!("\"{long}\""), format!("{{\"a\":\"{long}\"}}"), list] {
        let body = format!(r#"{{"topic":"q","payload":{payload}}}"#);
        let Ok(Request::Publish(p)) = req(op::PUBLISH, &body) else {
            panic!("{body} did not parse as a publish");
        };
        assert_eq!(p.payload, payload.as_bytes());
        let stored = p.payload.try_into_mut().expect("the only handle");
        assert_eq!(stored.capacity(), payload.len(), "{}", &payload[..20]);
    }
}

/// ACK/NACK with `ids` (a BoltQ addition): one to 1,000 ids, not beside `id`.
#[test]
fn acks_of_several_ids() {
    let targets = |ids: &[&str]| -> Vec<AckTarget> {
        ids.iter()
            .map(|id| AckTarget { id: id.to_string() })
            .collect()
    };
    assert_eq!(
        req(op::ACK, r#"{"ids":["a","b"]}"#),
        Ok(Request::AckMany(targets(&["a", "b"])))
    );
    assert_eq!(
        req(op::NACK, r#"{"ids":["a"]}"#),
        Ok(Request::NackMany(targets(&["a"])))
    );
    assert_eq!(
        req(op::ACK, r#"{"id":"a","ids":null}"#),
        Ok(Request::Ack(AckTarget { id: "a".into() }))
    );
    for (body, text) in [
        (r#"{"ids":[]}"#, "ids is empty"),
        (r#"{"ids":[""]}"#, "ids: an id is empty"),
        (r#"{"ids":[1]}"#, "ids: "),
        (r#"{"ids":"a"}"#, "ids: "),
        (r#"{"id":"a","ids":["b"]}"#, "give either id or ids"),
    ] {
        assert!(
            err_text(op::ACK, body).starts_with(text),
            "{body}: {}",
            err_text(op::ACK, body)
        );
    }
    let ids = |n: usize| {
        let list: Vec<String> = (0..n).map(|i| format!("\"m{i}\"")).collect();
        format!(r#"{{"ids":[{}]}}"#, list.join(","))
    };
    assert!(matches!(req(op::ACK, &ids(1000)), Ok(Request::AckMany(t)) if t.len() == 1000));
    assert!(err_text(op::ACK, &ids(1001)).contains("more than 1000 ids"));
}
