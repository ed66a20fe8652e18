//! The ACL question every op asks before touching a topic: the policy decides, the
//! membership service (or a direct conversation's id) answers its membership questions.

use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame::ErrorCode;
use crate::messaging::gateway::GatewayCtx;
use crate::messaging::identity::acl::{Action, Decision, MembershipQuestion};
use crate::messaging::identity::principal::Principal;
use crate::messaging::{membership, topic};
use std::collections::HashMap;

/// Answers one membership question: direct conversations from their id, others from the
/// membership service (an error denies).
async fn answer(gw: &GatewayCtx, p: &Principal, q: &MembershipQuestion) -> Result<bool, ()> {
    let direct =
        q.topic.starts_with(topic::DIRECT_PREFIX) || q.topic.starts_with(topic::TYPING_PREFIX);
    if direct {
        if let Some([a, b]) = membership::direct_members(&q.group) {
            return Ok(a == p.user_id || b == p.user_id);
        }
        if q.topic.starts_with(topic::DIRECT_PREFIX) {
            return Ok(false);
        }
    }
    gw.membership
        .is_member(&p.tenant, &p.user_id, &q.group, boltq_io::store::now_ns())
        .await
        .map_err(|e| log::warn!("[gateway] membership: {e}"))
}

/// Whether the connection's principal may do `action` on `topic`.
pub async fn allowed(c: &Connection, topic_name: &str, action: Action) -> bool {
    let gw = &c.gw;
    let p = c.principal.borrow().clone();
    let now = crate::messaging::gateway::now_s();
    let questions = gw.policy.membership_questions(&p, topic_name, action, now);
    let mut answers: HashMap<(String, String), Result<bool, ()>> = HashMap::new();
    for q in questions {
        let a = answer(gw, &p, &q).await;
        answers.insert((q.topic.clone(), q.group.clone()), a);
    }
    let decision = gw.policy.authorize(
        &p,
        topic_name,
        action,
        now,
        gw.settings.allow_anonymous,
        &mut |q: &MembershipQuestion| {
            answers
                .get(&(q.topic.clone(), q.group.clone()))
                .cloned()
                .unwrap_or(Err(()))
        },
    );
    decision == Decision::Allow
}

pub(super) fn forbid(c: &Connection, id: &str) {
    c.gw.stats.borrow_mut().forbidden += 1;
    c.send_error(id, ErrorCode::Forbidden, "access denied");
}
