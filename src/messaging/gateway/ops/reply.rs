//! An engine error as the error frame the client gets.

use crate::messaging::engine::mesh::StreamError;
use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame::{self, ErrorCode};
use crate::messaging::gateway::text;

pub(super) fn internal(c: &Connection, id: &str, e: &StreamError) {
    match e {
        StreamError::InFlight => c.send_frame(text(|o| {
            frame::error(
                o,
                id,
                ErrorCode::Conflict,
                "duplicate send in flight, retry shortly",
                true,
            )
        })),
        StreamError::Limited(m) => c.send_frame(text(|o| {
            frame::error(o, id, ErrorCode::RateLimited, m, true)
        })),
        StreamError::Invalid(m) => c.send_error(id, ErrorCode::BadRequest, m),
        StreamError::Internal(m) => {
            log::warn!("[gateway] {m}");
            c.send_error(id, ErrorCode::Internal, "internal error; retry");
        }
    }
}
