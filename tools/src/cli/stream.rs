//! `stream-publish`, `stream-tail`, `stream-commit`: the stream commands for trusted
//! backends (TCP 0x1D, 0x1F, 0x20; `docs/stream-publishing.md`). Not in v1; flags follow
//! the v1 commands' style. One request per invocation, so scripts decide when to loop.

use super::commands::parse_flags;
use super::flags::{Flag, FlagSet, Values};
use super::{format, Streams};
use boltq::client::{
    Client, Headers, StreamAt, StreamConsumer, StreamPage, StreamPayload, StreamRecord,
};
use serde_json::{json, Value};

const TOPIC: Flag = Flag::str("topic", "stream topic name");
const KEY: Flag = Flag::str("key", "record key; also picks the partition");
const PARTITION: Flag = Flag::str("partition", "partition (default: from the key)");

const PUBLISH_FLAGS: FlagSet = FlagSet {
    name: "stream-publish",
    flags: &[
        TOPIC,
        KEY,
        PARTITION,
        Flag::str("payload", "record payload (JSON)"),
        Flag::str("data", "record payload (text, stored as its UTF-8 bytes)"),
    ],
};

/// Default `-max` of `stream-tail`: a screenful.
const TAIL_MAX_DEFAULT: &str = "10";
const TAIL_FLAGS: FlagSet = FlagSet {
    name: "stream-tail",
    flags: &[
        TOPIC,
        KEY,
        PARTITION,
        Flag::str("group", "consumer group (resumes from its cursor)"),
        Flag::str("member", "member of the group"),
        Flag::uint(
            "from",
            "0",
            "sequence to start at (0: the cursor, else the first)",
        ),
        Flag::uint("max", TAIL_MAX_DEFAULT, "most records to show"),
        Flag::uint(
            "wait-ms",
            "0",
            "wait this long for a record when there is none",
        ),
    ],
};

const COMMIT_FLAGS: FlagSet = FlagSet {
    name: "stream-commit",
    flags: &[
        TOPIC,
        KEY,
        PARTITION,
        Flag::str("group", "consumer group"),
        Flag::str("member", "member of the group"),
        Flag::uint(
            "seq",
            "0",
            "next sequence the consumer wants (a tail's `next`)",
        ),
    ],
};

pub fn usage() -> String {
    let p = format::PROGRAM;
    format!(
        "usage: {p} stream-publish -topic <name> [-key <k>] [-partition <n>] (-payload <json> | -data <text>)
       {p} stream-tail -topic <name> [-key <k>] [-partition <n>] [-group <g> [-member <m>]] [-from <seq>] [-max <n>] [-wait-ms <ms>]
       {p} stream-commit -topic <name> [-key <k>] [-partition <n>] -group <g> [-member <m>] -seq <n>"
    )
}

pub(super) fn run(command: &str, args: &[String], client: &mut Client, io: &mut Streams) -> i32 {
    let set = match command {
        "stream-publish" => &PUBLISH_FLAGS,
        "stream-tail" => &TAIL_FLAGS,
        _ => &COMMIT_FLAGS,
    };
    let flags = match parse_flags(set, args, io) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let Some(at) = target(&flags) else {
        io.err_line(&usage());
        return 1;
    };
    let result = match command {
        "stream-publish" => publish(&flags, &at, client),
        "stream-tail" => tail(&flags, &at, client),
        _ => commit(&flags, &at, client),
    };
    match result {
        Ok(Some(lines)) => {
            for l in lines {
                io.out_line(&l);
            }
            0
        }
        Ok(None) => {
            io.err_line(&usage());
            1
        }
        Err(e) => {
            io.err_line(&format::command_error(command, &e));
            1
        }
    }
}

/// The addressed partition; `None` when the topic is missing or `-partition` is not a
/// number.
fn target(flags: &Values) -> Option<StreamAt> {
    let topic = flags.str("topic");
    if topic.is_empty() {
        return None;
    }
    let mut at = StreamAt::topic(topic).key(flags.str("key"));
    match flags.str("partition") {
        "" => {}
        p => at = at.partition(p.parse().ok()?),
    }
    Some(at)
}

type Outcome = boltq::client::Result<Option<Vec<String>>>;

fn publish(flags: &Values, at: &StreamAt, client: &mut Client) -> Outcome {
    let payload = match (flags.str("payload"), flags.str("data")) {
        ("", data) => StreamPayload::Bytes(data.as_bytes()),
        (json, "") => StreamPayload::Json(json),
        _ => return Ok(None),
    };
    let p = client.stream_publish(at, &Headers::new(), payload)?;
    Ok(Some(vec![format!(
        "Published to {} partition {} at seq {}",
        p.topic, p.partition, p.seq
    )]))
}

fn consumer(flags: &Values) -> Option<StreamConsumer<'_>> {
    let group = flags.str("group");
    (!group.is_empty()).then(|| StreamConsumer {
        group,
        member: flags.str("member"),
    })
}

fn tail(flags: &Values, at: &StreamAt, client: &mut Client) -> Outcome {
    let from = Some(flags.uint("from")).filter(|f| *f > 0);
    let max = u32::try_from(flags.uint("max").clamp(1, 1000)).unwrap_or(1000);
    let page = client.stream_tail(at, consumer(flags), from, max, flags.uint("wait-ms"))?;
    Ok(Some(page_lines(&page)))
}

/// One JSON line per record (the payload as text when it is UTF-8, else base64), then
/// `next <seq>`: what to pass as `-from`, or to `stream-commit -seq`.
fn page_lines(page: &StreamPage) -> Vec<String> {
    let mut lines: Vec<String> = page.records.iter().map(record_line).collect();
    if page.gap {
        lines.push(format!(
            "gap: records before {} were removed by retention",
            page.first_seq
        ));
    }
    lines.push(format!("next {}", page.next));
    lines
}

fn record_line(r: &StreamRecord) -> String {
    let mut v = json!({"seq": r.seq, "timestamp": r.timestamp_ns, "headers": r.headers});
    if !r.key.is_empty() {
        v["key"] = Value::String(r.key.clone());
    }
    match std::str::from_utf8(&r.payload) {
        Ok(text) => v["payload"] = Value::String(text.to_string()),
        Err(_) => v["payload_base64"] = Value::String(r.payload_base64()),
    }
    v.to_string()
}

fn commit(flags: &Values, at: &StreamAt, client: &mut Client) -> Outcome {
    let (Some(c), seq) = (consumer(flags), flags.uint("seq")) else {
        return Ok(None);
    };
    if seq == 0 {
        return Ok(None);
    }
    client.stream_commit(at, c, seq)?;
    Ok(Some(vec![format!(
        "Committed {} for group {}",
        seq, c.group
    )]))
}

#[cfg(test)]
mod tests {
    use crate::cli::run;
    use boltq::client::fake_server::{frame_bytes, FakeServer, Step};
    use boltq::queue::protocol::frame::status;

    /// Runs the CLI against a fake server answering each request with the next reply;
    /// returns exit code, stdout, stderr and the requests (code, body).
    fn run_against(
        replies: Vec<Vec<u8>>,
        args: &[&str],
    ) -> (i32, String, String, Vec<(u8, String)>) {
        let script = replies
            .into_iter()
            .flat_map(|r| [Step::Expect, Step::Send(r)])
            .collect();
        let server = FakeServer::start(script);
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let addr = server.addr.clone();
        let env = move |k: &str| (k == "BOLTQ_ADDR").then(|| addr.clone());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(&args, &env, &mut out, &mut err);
        let got = server
            .received()
            .into_iter()
            .map(|f| (f.0, String::from_utf8(f.1).unwrap()))
            .collect();
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
            got,
        )
    }

    #[test]
    fn publish_sends_its_bytes_and_prints_where_the_record_landed() {
        let reply = frame_bytes(
            status::OK,
            r#"{"topic":"match.alice","partition":7,"seq":42,"timestamp":1}"#,
        );
        let (code, out, err, got) = run_against(
            vec![reply],
            &[
                "stream-publish",
                "-topic",
                "match.alice",
                "-key",
                "alice",
                "-data",
                "hi",
            ],
        );
        assert_eq!(code, 0, "{err}");
        assert_eq!(out, "Published to match.alice partition 7 at seq 42\n");
        assert_eq!(
            got[0],
            (
                0x1D,
                r#"{"key":"alice","payload_base64":"aGk=","topic":"match.alice"}"#.to_string()
            )
        );
        let (code, _, err, got) = run_against(
            vec![frame_bytes(status::ERROR, r#"{"error":"nope"}"#)],
            &[
                "stream-publish",
                "-topic",
                "t",
                "-partition",
                "2",
                "-payload",
                "{ \"a\": 1 }",
            ],
        );
        assert_eq!(
            (code, err.as_str()),
            (1, "stream-publish error: server error: nope\n")
        );
        assert_eq!(got[0].1, r#"{"partition":2,"topic":"t","payload":{"a":1}}"#);
    }

    #[test]
    fn tail_prints_one_line_per_record_then_next() {
        let page = r#"{"topic":"t","partition":0,"from":5,"first_seq":1,"next_seq":7,"gap":false,
            "records":[{"seq":5,"timestamp":9,"key":"k","headers":{},"payload_base64":"aGk="},
                       {"seq":6,"timestamp":10,"headers":{"h":"v"},"payload_base64":"/w=="}],"next":7,
            "group":"g","member":""}"#;
        let (code, out, err, got) = run_against(
            vec![frame_bytes(status::OK, page)],
            &[
                "stream-tail",
                "-topic",
                "t",
                "-group",
                "g",
                "-wait-ms",
                "100",
            ],
        );
        assert_eq!(code, 0, "{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(
            (first["seq"].as_u64(), first["payload"].as_str()),
            (Some(5), Some("hi"))
        );
        let second: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(second["payload_base64"], "/w==", "binary stays base64");
        assert_eq!(lines[2], "next 7");
        assert_eq!(
            got[0],
            (
                0x1F,
                r#"{"group":"g","max":10,"topic":"t","wait_ms":100}"#.to_string()
            )
        );
    }

    #[test]
    fn commit_needs_group_and_seq() {
        let reply = frame_bytes(
            status::OK,
            r#"{"topic":"t","partition":0,"group":"g","member":"w","seq":7}"#,
        );
        let (code, out, err, got) = run_against(
            vec![reply],
            &[
                "stream-commit",
                "-topic",
                "t",
                "-group",
                "g",
                "-member",
                "w",
                "-seq",
                "7",
            ],
        );
        assert_eq!(code, 0, "{err}");
        assert_eq!(out, "Committed 7 for group g\n");
        assert_eq!(
            got[0],
            (
                0x20,
                r#"{"group":"g","member":"w","seq":7,"topic":"t"}"#.to_string()
            )
        );
        let usage = format!("{}\n", super::usage());
        for args in [
            &["stream-commit", "-topic", "t", "-seq", "7"][..],
            &["stream-commit", "-topic", "t", "-group", "g"][..],
            &["stream-tail", "-partition", "x", "-topic", "t"][..],
            &[
                "stream-publish",
                "-topic",
                "t",
                "-payload",
                "1",
                "-data",
                "x",
            ][..],
            &["stream-tail"][..],
        ] {
            let (code, _, err, got) = run_against(vec![], args);
            assert_eq!((code, err.as_str()), (1, usage.as_str()), "{args:?}");
            assert!(got.is_empty(), "{args:?} sent nothing");
        }
    }
}
