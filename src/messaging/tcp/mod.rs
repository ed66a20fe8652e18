//! The messaging plane's stream commands on the queue plane's TCP protocol (bytes
//! `0x1D`–`0x20`, BoltQ additive): trusted backends publish to, read, tail and commit on
//! stream topics over the same binary frames as queue commands.
//!
//! - `protocol/`: the commands' request parsers and reply encoders (pure, fuzzed).
//! - `run`: each parsed command against this shard's stream engine.
//!
//! The queue plane owns the frame codec and leaves these bytes to a handler the server
//! registers with its connections ([`dispatch`], through `queue::server::extra`), so the
//! queue plane does not depend on this one.

pub mod protocol;
pub mod run;

use crate::messaging::engine::Engine;
use crate::queue::protocol::reply;
use std::rc::Rc;

/// The reply to a stream command: `None` when `code` is not one; a parse error as the
/// ERROR frame every refused request gets; otherwise the engine call, run when awaited.
/// `engine` is `None` when the messaging plane is off (valid commands then answer
/// [`run::PLANE_OFF`]).
pub fn dispatch(engine: Option<Rc<Engine>>, code: u8, payload: &[u8]) -> Option<run::StreamReply> {
    Some(match protocol::parse(code, payload)? {
        Ok(req) => run::run(engine, req),
        Err(e) => {
            let mut out = Vec::new();
            reply::request_error(&e, &mut out);
            Box::pin(std::future::ready(out))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::protocol::frame::{self, status};

    fn answer(code: u8, payload: &[u8]) -> Option<serde_json::Value> {
        let out = futures_lite::future::block_on(dispatch(None, code, payload)?);
        let (f, used) = frame::decode(&out).unwrap().unwrap();
        assert_eq!((f.code, used), (status::ERROR, out.len()));
        Some(serde_json::from_slice(f.payload).unwrap())
    }

    #[test]
    fn only_stream_bytes_are_taken() {
        assert!(answer(0x1C, b"{}").is_none());
        assert!(answer(0x21, b"{}").is_none());
    }

    #[test]
    fn a_bad_request_is_refused_before_the_plane_is_asked() {
        let v = answer(0x1D, b"{}").unwrap();
        assert_eq!(v["error"], "topic is required");
        let v = answer(0x1E, br#"{"topic":"m"}"#).unwrap();
        assert_eq!(v["error"], run::PLANE_OFF);
    }
}
