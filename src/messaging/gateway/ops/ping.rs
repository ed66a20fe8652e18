//! `ping` (§2.5.8): a heartbeat of the device's presence, answered with `pong`.

use super::presence::heartbeat;
use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame;
use crate::messaging::gateway::text;

/// Refreshes presence, then answers.
pub(super) fn ping(c: &Connection, id: &str) {
    heartbeat(c);
    c.send_frame(text(|o| frame::pong(o, id)))
}
