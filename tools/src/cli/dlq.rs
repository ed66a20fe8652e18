//! `dlq list|read|requeue|purge`: BoltQ's dead-letter commands (TCP 0x19–0x1C). Not in v1;
//! flags and output follow the v1 commands' style. Replies are printed as indented JSON.

use super::commands::parse_flags;
use super::flags::{Flag, FlagSet};
use super::{format, Streams};
use boltq::client::{Client, ClientError};
use serde_json::Value;

const QUEUE_USAGE: &str = "queue whose dead letters to use";

const LIST_FLAGS: FlagSet = FlagSet {
    name: "dlq list",
    flags: &[Flag::str(
        "queue",
        "queue whose dead letters to list (all when omitted)",
    )],
};

/// Default `-limit` of `read`: a screenful.
const READ_LIMIT_DEFAULT: &str = "10";
const READ_FLAGS: FlagSet = FlagSet {
    name: "dlq read",
    flags: &[
        Flag::str("queue", QUEUE_USAGE),
        Flag::uint("offset", "0", "index of the first dead letter to show"),
        Flag::uint("limit", READ_LIMIT_DEFAULT, "most dead letters to show"),
    ],
};

/// Default `-limit` of `requeue`: bounded, so a mistaken command moves a known amount.
const REQUEUE_LIMIT_DEFAULT: &str = "100";
const REQUEUE_FLAGS: FlagSet = FlagSet {
    name: "dlq requeue",
    flags: &[
        Flag::str("queue", QUEUE_USAGE),
        Flag::uint(
            "limit",
            REQUEUE_LIMIT_DEFAULT,
            "most dead letters to move back",
        ),
    ],
};

const PURGE_FLAGS: FlagSet = FlagSet {
    name: "dlq purge",
    flags: &[Flag::str("queue", QUEUE_USAGE)],
};

pub(super) fn run(args: &[String], client: &mut Client, io: &mut Streams) -> i32 {
    let Some((sub, rest)) = args.split_first() else {
        io.err_line(&format::dlq_usage());
        return 1;
    };
    let set = match sub.as_str() {
        "list" => &LIST_FLAGS,
        "read" => &READ_FLAGS,
        "requeue" => &REQUEUE_FLAGS,
        "purge" => &PURGE_FLAGS,
        other => {
            io.err_line(&format!("unknown dlq command: {other}"));
            io.err_line(&format::dlq_usage());
            return 1;
        }
    };
    let flags = match parse_flags(set, rest, io) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let queue = flags.str("queue");
    if queue.is_empty() && sub != "list" {
        io.err_line(&format::dlq_usage());
        return 1;
    }
    let result: Result<Value, ClientError> = match sub.as_str() {
        "list" => client.dlq_list(Some(queue).filter(|q| !q.is_empty())),
        "read" => client.dlq_read(queue, flags.uint("offset"), flags.uint("limit")),
        "requeue" => client.dlq_requeue(queue, flags.uint("limit")),
        _ => client.dlq_purge(queue),
    };
    match result {
        Ok(reply) => {
            io.out_line(&format::dlq_reply(&reply));
            0
        }
        Err(e) => {
            io.err_line(&format::command_error("dlq", &e));
            1
        }
    }
}
