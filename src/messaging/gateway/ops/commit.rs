//! `commit` (§2.5.6): moves the device's cursor on a partition.

use super::access::{allowed, forbid};
use super::reply::internal;
use super::resolve::{cursor_key, resolve};
use crate::messaging::engine::mesh::StreamError;
use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame::{self, ErrorCode};
use crate::messaging::gateway::text;
use crate::messaging::identity::acl::Action;
use std::rc::Rc;

pub(super) async fn commit(
    c: &Rc<Connection>,
    id: &str,
    topic_name: &str,
    partition: Option<u32>,
    seq: u64,
) {
    let Some((_, p)) = resolve(c, id, topic_name, partition) else {
        return;
    };
    if !allowed(c, topic_name, Action::Read).await {
        return forbid(c, id);
    }
    let Some(key) = cursor_key(c, &(topic_name.to_string(), p)) else {
        return c.send_error(id, ErrorCode::BadRequest, "invalid cursor key");
    };
    match c.gw.engine.commit(key, seq).await {
        Ok(()) => c.send_frame(text(|o| frame::ack(o, id))),
        Err(StreamError::Invalid(m)) => c.send_error(id, ErrorCode::NotFound, &m),
        Err(e) => internal(c, id, &e),
    }
}
