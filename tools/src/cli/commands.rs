//! v1's commands: `server`, `publish`, `consume`, `ack`, `nack`, `stats`, `health`.

use super::flags::{Flag, FlagSet, Stop, Values, EXIT_FLAG_ERROR};
use super::{dlq, format, stream, Streams};
use boltq::client::{Client, PublishOptions};

const PUBLISH_FLAGS: FlagSet = FlagSet {
    name: "publish",
    flags: &[
        Flag::str("topic", "topic/queue name"),
        Flag::str("payload", "message payload (JSON string)"),
    ],
};

const CONSUME_FLAGS: FlagSet = FlagSet {
    name: "consume",
    flags: &[Flag::str("topic", "topic/queue name")],
};

const ACK_FLAGS: FlagSet = FlagSet {
    name: "ack",
    flags: &[Flag::str("id", "message ID")],
};

const NACK_FLAGS: FlagSet = FlagSet {
    name: "nack",
    flags: &[Flag::str("id", "message ID")],
};

pub(super) fn dispatch(
    command: &str,
    args: &[String],
    client: &mut Client,
    io: &mut Streams,
) -> i32 {
    match command {
        "server" => {
            io.out_line(&format::server_hint());
            0
        }
        "publish" => publish(args, client, io),
        "consume" => consume(args, client, io),
        "ack" => settle(&ACK_FLAGS, args, client, io),
        "nack" => settle(&NACK_FLAGS, args, client, io),
        // Like v1, `stats` and `health` take no flags and ignore any arguments.
        "stats" => stats(client, io),
        "health" => health(client, io),
        "dlq" => dlq::run(args, client, io),
        "stream-publish" | "stream-tail" | "stream-commit" => {
            stream::run(command, args, client, io)
        }
        other => {
            io.err_line(&format::unknown_command(other));
            // v1 prints this usage on stdout (only the first line goes to stderr).
            io.out_line(&format::usage());
            1
        }
    }
}

/// Parses a command's flags the way Go's `flag.ExitOnError` does; `Err` carries the exit
/// code after the help or error text was printed.
pub(super) fn parse_flags(set: &FlagSet, args: &[String], io: &mut Streams) -> Result<Values, i32> {
    match set.parse(args) {
        Ok(values) => Ok(values),
        Err(Stop::Help) => {
            io.err_text(&set.usage());
            Err(0)
        }
        Err(Stop::Error(message)) => {
            io.err_line(&message);
            io.err_text(&set.usage());
            Err(EXIT_FLAG_ERROR)
        }
    }
}

fn publish(args: &[String], client: &mut Client, io: &mut Streams) -> i32 {
    let flags = match parse_flags(&PUBLISH_FLAGS, args, io) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let (topic, payload) = (flags.str("topic"), flags.str("payload"));
    if topic.is_empty() || payload.is_empty() {
        io.err_line(&format::publish_usage());
        return 1;
    }
    // The client refuses a payload that is not JSON before sending, as v1 failed to marshal it.
    match client.publish(topic, payload, None, PublishOptions::default()) {
        Ok(reply) => {
            io.out_line(&format::published(&reply.id, topic));
            0
        }
        Err(e) => {
            io.err_line(&format::command_error("publish", &e));
            1
        }
    }
}

fn consume(args: &[String], client: &mut Client, io: &mut Streams) -> i32 {
    let flags = match parse_flags(&CONSUME_FLAGS, args, io) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let topic = flags.str("topic");
    if topic.is_empty() {
        io.err_line(&format::consume_usage());
        return 1;
    }
    match client.consume(topic) {
        Ok(Some(message)) => io.out_line(&format::consumed(&message)),
        Ok(None) => io.out_line(format::NO_MESSAGES),
        Err(e) => {
            io.err_line(&format::command_error("consume", &e));
            return 1;
        }
    }
    0
}

/// `ack` or `nack`, chosen by the flag set's name.
fn settle(set: &FlagSet, args: &[String], client: &mut Client, io: &mut Streams) -> i32 {
    let flags = match parse_flags(set, args, io) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let id = flags.str("id");
    if id.is_empty() {
        io.err_line(&format::id_usage(set.name));
        return 1;
    }
    let is_ack = set.name == "ack";
    let result = if is_ack {
        client.ack(id)
    } else {
        client.nack(id)
    };
    match result {
        Ok(()) if is_ack => io.out_line(&format::acked(id)),
        Ok(()) => io.out_line(&format::nacked(id)),
        Err(e) => {
            io.err_line(&format::command_error(set.name, &e));
            return 1;
        }
    }
    0
}

fn stats(client: &mut Client, io: &mut Streams) -> i32 {
    match client.stats() {
        Ok(value) => {
            io.out_line(&format::stats(&value));
            0
        }
        Err(e) => {
            io.err_line(&format::command_error("stats", &e));
            1
        }
    }
}

fn health(client: &mut Client, io: &mut Streams) -> i32 {
    match client.ping() {
        Ok(()) => {
            io.out_line(format::HEALTHY);
            0
        }
        Err(e) => {
            io.err_line(&format::unhealthy(&e));
            1
        }
    }
}
