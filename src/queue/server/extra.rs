//! Commands another plane serves over the queue plane's TCP protocol.
//!
//! The queue plane owns the frame codec and the command bytes below
//! [`EXTRA_CODES_FROM`]; bytes from there up belong to other planes (today the messaging
//! plane's stream commands, `0x1D`–`0x20`). The server, which knows which planes run,
//! gives each connection one [`ExtraCommands`] handler, so this plane builds and tests
//! without the others.
//!
//! [`EXTRA_CODES_FROM`]: crate::queue::protocol::request::EXTRA_CODES_FROM

use crate::queue::protocol::frame::Frame;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

/// The encoded reply frame(s) of one extra command, produced when the connection awaits
/// it (replies are awaited in request order).
pub type ExtraReply = Pin<Box<dyn Future<Output = Vec<u8>>>>;

/// Serves a frame whose command byte is at least `EXTRA_CODES_FROM`: `None` when the byte
/// is none of the handler's commands (the client then gets `unknown command`). Called only
/// after the AUTH gate, so the reply future may do the work; building it must not.
pub type ExtraCommands = Rc<dyn Fn(Frame<'_>) -> Option<ExtraReply>>;
