//! The topic ACL (spec/messaging-edge.md §4): ordered rules over topic
//! patterns, evaluated per request for a [`Principal`].
//!
//! Membership (is this user in that group?) is answered by the operator's
//! service, asynchronously, so evaluation is split in two sans-IO steps:
//! [`Policy::membership_questions`] lists what the evaluation may ask, the
//! caller fetches the answers (from its cache or the service), then
//! [`Policy::authorize`] decides, pulling answers through a callback. A
//! question the caller could not answer must be answered `Err(())`: the
//! request is then denied (fail closed, §4.2).
//!
//! Placeholders (`${user}`, `${device}`, `${tenant}`) are substituted as
//! literal text inside one segment: a value can never become a wildcard or
//! span segments (§18 G30). Principals whose ids are not [`valid_id`] are
//! denied outright, so the question never even arises.

use std::borrow::Cow;
use std::fmt;

use super::principal::{valid_id, Principal, Scope, Scopes};
use crate::config::AclRuleConfig;

/// Most rules in one policy.
pub const RULES_MAX: usize = 256;
/// Longest pattern (or exception pattern), in bytes.
pub const PATTERN_BYTES_MAX: usize = 512;
/// Most `.`-separated segments in a pattern.
pub const PATTERN_SEGMENTS_MAX: usize = 32;
/// Highest `membership_segment` index a rule may name.
pub const MEMBERSHIP_SEGMENT_MAX: usize = 63;
/// Longest topic the ACL evaluates, in bytes; longer ones are denied. Valid
/// topic names are far shorter (§6.2: ≤ 200 encoded characters); this only
/// bounds the matching work for whatever reaches the ACL.
pub const TOPIC_BYTES_MAX: usize = 1024;

/// What a request does to a topic (§4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// subscribe, history, commit, watch_presence.
    Read,
    /// send, typing, presence publish.
    Write,
    /// Topic and cluster management; never requested by the gateway.
    Manage,
}

impl Action {
    pub const EVERY: [Action; 3] = [Action::Read, Action::Write, Action::Manage];

    /// The config name: `read`, `write`, `manage`.
    pub fn name(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Write => "write",
            Action::Manage => "manage",
        }
    }

    pub fn from_name(name: &str) -> Option<Action> {
        Action::EVERY.into_iter().find(|a| a.name() == name)
    }

    const fn bit(self) -> u8 {
        match self {
            Action::Read => 1,
            Action::Write => 2,
            Action::Manage => 4,
        }
    }
}

/// What a surviving rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Marks the request allowed; evaluation continues (a later deny wins).
    Allow,
    /// Denies at once.
    Deny,
}

/// The outcome of [`Policy::authorize`].
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny(Denial),
}

impl Decision {
    pub fn is_allowed(self) -> bool {
        self == Decision::Allow
    }
}

/// Why a request was denied: for logs and metrics only; the client always
/// gets a bare `forbidden` (§4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// The principal is past `exp` (no leeway, §4.2 step 2).
    Expired,
    /// The shared-key principal while `allow_anonymous` is off.
    AnonymousRefused,
    /// A user, device or tenant id that is not a [`valid_id`]; such ids could
    /// only come from a principal built around the verifier.
    BadPrincipal,
    /// Longer than [`TOPIC_BYTES_MAX`].
    TopicTooLong,
    /// The deny rule at this index (0-based, policy order) applied.
    Rule(usize),
    /// A membership lookup failed.
    MembershipUnavailable,
    /// No allow rule applied (including an empty policy).
    NoAllowRule,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denial::Expired => f.write_str("principal expired"),
            Denial::AnonymousRefused => f.write_str("anonymous access is disabled"),
            Denial::BadPrincipal => f.write_str("principal carries an invalid id"),
            Denial::TopicTooLong => f.write_str("topic too long"),
            Denial::Rule(i) => write!(f, "denied by rule {i}"),
            Denial::MembershipUnavailable => f.write_str("membership lookup failed"),
            Denial::NoAllowRule => f.write_str("no rule allows it"),
        }
    }
}

/// "Is the principal a member of `group`?", raised by a membership-gated
/// rule whose pattern matched `topic`. The caller tells direct conversations
/// (members derived from the id) from groups (the service) by the topic
/// (§18 G33).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MembershipQuestion {
    pub topic: String,
    /// The topic segment the rule names.
    pub group: String,
}

/// Whether `topic` matches `pattern` (§4.3), with no placeholder expansion
/// (`${user}` is literal text here). Both split on `.`; `*` matches exactly
/// one segment, possibly empty; `#` matches zero or more segments anywhere.
/// `#` matches every topic, including the empty one; the empty pattern
/// matches only the empty topic. Cost: O(segments × segments), no
/// backtracking blow-up however many `#` there are.
pub fn topic_matches(topic: &str, pattern: &str) -> bool {
    let pattern: Vec<Seg<'_>> = pattern.split('.').map(Seg::parse_raw).collect();
    let topic: Vec<&str> = topic.split('.').collect();
    match_segments(&pattern, &topic)
}

/// One pattern segment, ready to match.
#[derive(Debug, Clone, Copy)]
enum Seg<'a> {
    /// `*`.
    One,
    /// `#`.
    Any,
    /// Exactly this segment.
    Lit(&'a str),
}

impl<'a> Seg<'a> {
    fn parse_raw(s: &'a str) -> Seg<'a> {
        match s {
            "*" => Seg::One,
            "#" => Seg::Any,
            lit => Seg::Lit(lit),
        }
    }
}

/// Dynamic programming over pattern prefixes: `reach[j]` says whether the
/// pattern so far can consume exactly the first `j` topic segments.
fn match_segments(pattern: &[Seg<'_>], topic: &[&str]) -> bool {
    let mut reach = vec![false; topic.len() + 1];
    reach[0] = true;
    for seg in pattern {
        match seg {
            Seg::Any => {
                // Zero or more: reachable from any earlier reachable point.
                let mut seen = false;
                for r in reach.iter_mut() {
                    seen |= *r;
                    *r = seen;
                }
            }
            Seg::One | Seg::Lit(_) => {
                for j in (1..=topic.len()).rev() {
                    let fits = match seg {
                        Seg::Lit(lit) => topic[j - 1] == *lit,
                        _ => true,
                    };
                    reach[j] = reach[j - 1] && fits;
                }
                reach[0] = false;
            }
        }
    }
    reach[topic.len()]
}

/// A principal field a placeholder names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    User,
    Device,
    Tenant,
}

impl Field {
    fn of(self, p: &Principal) -> &str {
        match self {
            Field::User => &p.user_id,
            Field::Device => &p.device_id,
            Field::Tenant => &p.tenant,
        }
    }
}

/// Part of a literal pattern segment.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Placeholder(Field),
}

/// A validated pattern segment, before placeholder expansion.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Template {
    One,
    Any,
    /// Text and placeholders; expands to one literal segment.
    Literal(Vec<Piece>),
}

/// A validated pattern (§4.3 plus placeholders).
///
/// Literal text is limited to `[A-Za-z0-9_@+:-]` (ids, direct-conversation
/// ids, namespaces); `*` and `#` only as whole segments; `${user}`,
/// `${device}`, `${tenant}` anywhere inside a segment; no empty segments.
/// Anything else is refused at load: a pattern that cannot match a valid
/// topic is a typo that would otherwise fail silently.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    segments: Vec<Template>,
}

impl Pattern {
    fn parse(text: &str) -> Result<Pattern, String> {
        if text.is_empty() || text.len() > PATTERN_BYTES_MAX {
            return Err(format!(
                "pattern {text:?} must be 1..={PATTERN_BYTES_MAX} bytes"
            ));
        }
        let segments = text
            .split('.')
            .map(|s| parse_template(s).map_err(|why| format!("pattern {text:?}: {why}")))
            .collect::<Result<Vec<_>, _>>()?;
        if segments.len() > PATTERN_SEGMENTS_MAX {
            return Err(format!(
                "pattern {text:?} has more than {PATTERN_SEGMENTS_MAX} segments"
            ));
        }
        Ok(Pattern { segments })
    }

    fn has_any(&self) -> bool {
        self.segments.contains(&Template::Any)
    }

    /// Matches with the principal's values substituted as literal text.
    fn matches(&self, p: &Principal, topic: &[&str]) -> bool {
        let expanded: Vec<Cow<'_, str>> = self
            .segments
            .iter()
            .map(|t| match t {
                Template::Literal(pieces) => expand(pieces, p),
                _ => Cow::Borrowed(""),
            })
            .collect();
        let segs: Vec<Seg<'_>> = self
            .segments
            .iter()
            .zip(&expanded)
            .map(|(t, text)| match t {
                Template::One => Seg::One,
                Template::Any => Seg::Any,
                Template::Literal(_) => Seg::Lit(text),
            })
            .collect();
        match_segments(&segs, topic)
    }
}

fn parse_template(s: &str) -> Result<Template, String> {
    match s {
        "*" => return Ok(Template::One),
        "#" => return Ok(Template::Any),
        "" => return Err("empty segment".into()),
        _ => {}
    }
    let mut pieces = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("${") {
            let (name, tail) = after
                .split_once('}')
                .ok_or_else(|| format!("unclosed placeholder in {s:?}"))?;
            let field = match name {
                "user" => Field::User,
                "device" => Field::Device,
                "tenant" => Field::Tenant,
                other => return Err(format!("unknown placeholder ${{{other}}}")),
            };
            pieces.push(Piece::Placeholder(field));
            rest = tail;
        } else {
            let end = rest.find("${").unwrap_or(rest.len());
            let (text, tail) = rest.split_at(end);
            if let Some(c) = text.chars().find(|c| !literal_char(*c)) {
                return Err(format!("character {c:?} not allowed in segment {s:?}"));
            }
            pieces.push(Piece::Text(text.to_string()));
            rest = tail;
        }
    }
    Ok(Template::Literal(pieces))
}

fn literal_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '@' | '+' | '-' | ':')
}

fn expand<'a>(pieces: &'a [Piece], p: &'a Principal) -> Cow<'a, str> {
    match pieces {
        [Piece::Text(t)] => Cow::Borrowed(t),
        [Piece::Placeholder(f)] => Cow::Borrowed(f.of(p)),
        _ => Cow::Owned(
            pieces
                .iter()
                .map(|piece| match piece {
                    Piece::Text(t) => t.as_str(),
                    Piece::Placeholder(f) => f.of(p),
                })
                .collect(),
        ),
    }
}

/// One ACL rule (§4.1). Built with [`Rule::new`] and the `with_*` steps, or
/// from config with [`Rule::from_config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pattern: Pattern,
    except: Option<Pattern>,
    /// Bitset of [`Action`]s; 0 = all.
    actions: u8,
    effect: Effect,
    /// Any-of; empty = no requirement.
    require_scope: Scopes,
    /// Segment index holding the group id, when membership is required.
    membership_segment: Option<usize>,
}

impl Rule {
    /// A rule on `pattern` for `actions` (empty = all actions).
    pub fn new(pattern: &str, effect: Effect, actions: &[Action]) -> Result<Rule, String> {
        Ok(Rule {
            pattern: Pattern::parse(pattern)?,
            except: None,
            actions: actions.iter().fold(0, |bits, a| bits | a.bit()),
            effect,
            require_scope: Scopes::NONE,
            membership_segment: None,
        })
    }

    /// Topics also matching `pattern` are exempt from this rule.
    pub fn with_except(mut self, pattern: &str) -> Result<Rule, String> {
        self.except = Some(Pattern::parse(pattern)?);
        Ok(self)
    }

    /// The rule applies only to principals holding any of `scopes`.
    pub fn with_scope(mut self, scopes: Scopes) -> Rule {
        self.require_scope = scopes;
        self
    }

    /// The rule applies only if the principal is a member of the group named
    /// by topic segment `segment` (0-based). Refused beyond
    /// [`MEMBERSHIP_SEGMENT_MAX`], and past the end of a pattern without `#`
    /// (such a rule could never apply).
    pub fn with_membership(mut self, segment: usize) -> Result<Rule, String> {
        let reachable = self.pattern.has_any() || segment < self.pattern.segments.len();
        if segment > MEMBERSHIP_SEGMENT_MAX || !reachable {
            return Err(format!(
                "membership_segment {segment} is outside the topics the pattern matches"
            ));
        }
        self.membership_segment = Some(segment);
        Ok(self)
    }

    /// A rule from config (§4.1 field names). Unknown effects, actions and
    /// scope names are refused rather than ignored: an ignored scope name
    /// would silently drop a requirement and widen the rule. A
    /// `membership_segment` without `require_membership` is refused for the
    /// same reason (it reads as a gate that is not there).
    pub fn from_config(c: &AclRuleConfig) -> Result<Rule, String> {
        let effect = match c.effect.as_str() {
            "allow" => Effect::Allow,
            "deny" => Effect::Deny,
            other => return Err(format!("effect {other:?} must be \"allow\" or \"deny\"")),
        };
        let actions = c
            .actions
            .iter()
            .map(|a| Action::from_name(a).ok_or_else(|| format!("unknown action {a:?}")))
            .collect::<Result<Vec<_>, _>>()?;
        let scopes = c
            .require_scope
            .iter()
            .map(|s| Scope::from_name(s).ok_or_else(|| format!("unknown scope {s:?}")))
            .collect::<Result<Scopes, _>>()?;
        let mut rule = Rule::new(&c.pattern, effect, &actions)?.with_scope(scopes);
        if !c.except_pattern.is_empty() {
            rule = rule.with_except(&c.except_pattern)?;
        }
        if c.require_membership {
            let segment = usize::try_from(c.membership_segment).unwrap_or(usize::MAX);
            rule = rule.with_membership(segment)?;
        } else if c.membership_segment != 0 {
            return Err("membership_segment is set but require_membership is false".into());
        }
        Ok(rule)
    }

    pub fn effect(&self) -> Effect {
        self.effect
    }

    fn covers(&self, action: Action) -> bool {
        self.actions == 0 || self.actions & action.bit() != 0
    }

    /// §4.2 step 4 up to (not including) the membership check.
    fn applies(&self, p: &Principal, topic: &[&str], action: Action) -> bool {
        self.covers(action)
            && self.pattern.matches(p, topic)
            && !self.except.as_ref().is_some_and(|e| e.matches(p, topic))
            && (self.require_scope.is_empty() || p.has_any_scope(self.require_scope))
    }
}

/// An ordered rule set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    rules: Vec<Rule>,
}

impl Policy {
    /// A policy of `rules`, in order. An empty policy denies everything.
    pub fn new(rules: Vec<Rule>) -> Result<Policy, String> {
        if rules.len() > RULES_MAX {
            return Err(format!("{} ACL rules; at most {RULES_MAX}", rules.len()));
        }
        Ok(Policy { rules })
    }

    /// The built-in chat policy (§4.4) with scopes enforced (§18 G29): every
    /// read rule requires `subscribe`, every write rule `publish`, except
    /// that publishing one's presence and typing requires `presence` (§3.2
    /// defines that scope as exactly this). Rules of §4.4 covering both read
    /// and write are split in two so each half has its own scope.
    ///
    /// §18 G31 is settled on the closed side: `system.#` stays read-only for
    /// every token, admin included; system announcements come from
    /// in-process code, which does not go through the ACL.
    pub fn chat_default() -> Policy {
        use Action::{Manage, Read, Write};
        let sub = Scopes::of(Scope::Subscribe);
        let publish = Scopes::of(Scope::Publish);
        let presence = Scopes::of(Scope::Presence);
        let allow = |pattern: &str, action: Action, scope: Scopes| {
            Rule::new(pattern, Effect::Allow, &[action])
                .expect("built-in pattern")
                .with_scope(scope)
        };
        let member = |r: Rule, segment: usize| r.with_membership(segment).expect("built-in");
        let rules = vec![
            // 1: one's own inbox.
            allow("chat.inbox.${user}.#", Read, sub),
            allow("chat.inbox.${user}.#", Write, publish),
            // 2: nobody else's, whatever is added later.
            Rule::new("chat.inbox.#", Effect::Deny, &[])
                .and_then(|r| r.with_except("chat.inbox.${user}.#"))
                .expect("built-in"),
            // 3, 4: conversations one belongs to.
            member(allow("chat.direct.*.#", Read, sub), 2),
            member(allow("chat.direct.*.#", Write, publish), 2),
            member(allow("chat.group.*.#", Read, sub), 2),
            member(allow("chat.group.*.#", Write, publish), 2),
            // 5, 6: publish own presence, observe anyone's.
            allow("presence.${user}.#", Write, presence),
            allow("presence.#", Read, sub),
            // 7: typing in conversations one belongs to.
            member(allow("typing.*.#", Read, sub), 1),
            member(allow("typing.*.#", Write, presence), 1),
            // 8, 9: system topics are read-only.
            allow("system.#", Read, sub),
            Rule::new("system.#", Effect::Deny, &[Write, Manage]).expect("built-in"),
            // 10: management needs admin.
            allow("#", Manage, Scopes::of(Scope::Admin)),
        ];
        Policy::new(rules).expect("built-in policy fits")
    }

    /// The policy of `messaging.identity.policy` (§4.7); an empty list means
    /// the built-in [`Policy::chat_default`]. Errors name the rule index.
    pub fn from_config(rules: &[AclRuleConfig]) -> Result<Policy, String> {
        if rules.is_empty() {
            return Ok(Policy::chat_default());
        }
        let rules = rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                Rule::from_config(r).map_err(|e| format!("messaging.identity.policy[{i}]: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Policy::new(rules)
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Every membership question [`Policy::authorize`] could ask for this
    /// request, without duplicates: the caller resolves them (asynchronously)
    /// before deciding. Only membership-gated rules whose action, pattern,
    /// exception and scope checks pass contribute (lazy, §4.2), so requests
    /// no such rule matches ask nothing. Empty whenever the decision needs no
    /// rules at all (expired, anonymous, bad principal or topic).
    pub fn membership_questions(
        &self,
        p: &Principal,
        topic: &str,
        action: Action,
        now_s: i64,
    ) -> Vec<MembershipQuestion> {
        let mut out: Vec<MembershipQuestion> = Vec::new();
        if p.anonymous || precheck(p, topic, now_s).is_err() {
            return out;
        }
        let segs: Vec<&str> = topic.split('.').collect();
        for rule in &self.rules {
            let Some(i) = rule.membership_segment else {
                continue;
            };
            let Some(group) = segs.get(i) else {
                continue;
            };
            if rule.applies(p, &segs, action) && !out.iter().any(|q| q.group == *group) {
                out.push(MembershipQuestion {
                    topic: topic.to_string(),
                    group: group.to_string(),
                });
            }
        }
        out
    }

    /// Decides whether `p` may do `action` on `topic` at `now_s` (§4.2):
    /// expired ⇒ deny; anonymous ⇒ allow iff `allow_anonymous`; then the
    /// rules in order, where a surviving deny denies at once, a surviving
    /// allow marks the request allowed, and the result is allowed iff some
    /// allow survived. `answer` is asked about membership only for rules
    /// that got that far, at most once per group; `Err(())` denies the whole
    /// request at once, even if a later rule would allow.
    ///
    /// "No principal" (§4.2 step 1) cannot be expressed here: the caller
    /// holds no `Principal` for an unauthenticated connection.
    pub fn authorize(
        &self,
        p: &Principal,
        topic: &str,
        action: Action,
        now_s: i64,
        allow_anonymous: bool,
        answer: &mut dyn FnMut(&MembershipQuestion) -> Result<bool, ()>,
    ) -> Decision {
        if p.is_expired(now_s) {
            return Decision::Deny(Denial::Expired);
        }
        if p.anonymous {
            return match allow_anonymous {
                true => Decision::Allow,
                false => Decision::Deny(Denial::AnonymousRefused),
            };
        }
        if let Err(denial) = precheck(p, topic, now_s) {
            return Decision::Deny(denial);
        }
        let segs: Vec<&str> = topic.split('.').collect();
        let mut answered: Vec<(&str, bool)> = Vec::new();
        let mut allowed = false;
        for (index, rule) in self.rules.iter().enumerate() {
            if !rule.applies(p, &segs, action) {
                continue;
            }
            if let Some(i) = rule.membership_segment {
                let Some(&group) = segs.get(i) else {
                    continue; // Out of range: never grants, never denies.
                };
                let member = match answered.iter().find(|(g, _)| *g == group) {
                    Some(&(_, m)) => m,
                    None => {
                        let q = MembershipQuestion {
                            topic: topic.to_string(),
                            group: group.to_string(),
                        };
                        let Ok(m) = answer(&q) else {
                            return Decision::Deny(Denial::MembershipUnavailable);
                        };
                        answered.push((group, m));
                        m
                    }
                };
                if !member {
                    continue;
                }
            }
            match rule.effect {
                Effect::Deny => return Decision::Deny(Denial::Rule(index)),
                Effect::Allow => allowed = true,
            }
        }
        match allowed {
            true => Decision::Allow,
            false => Decision::Deny(Denial::NoAllowRule),
        }
    }
}

/// The request-independent refusals shared by both steps (anonymous
/// principals are handled by the callers, before this).
fn precheck(p: &Principal, topic: &str, now_s: i64) -> Result<(), Denial> {
    if p.is_expired(now_s) {
        return Err(Denial::Expired);
    }
    if !ids_are_safe(p) {
        return Err(Denial::BadPrincipal);
    }
    if topic.len() > TOPIC_BYTES_MAX {
        return Err(Denial::TopicTooLong);
    }
    Ok(())
}

/// A user principal needs a valid user id; device and tenant may be empty.
/// The verifier already guarantees this; checking again here keeps a
/// hand-built principal from turning placeholders into something odd.
fn ids_are_safe(p: &Principal) -> bool {
    let optional = |s: &str| s.is_empty() || valid_id(s);
    valid_id(&p.user_id) && optional(&p.device_id) && optional(&p.tenant)
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;
    use std::cell::Cell;
    use std::collections::HashSet;
    use Action::{Manage, Read, Write};

    const NOW: i64 = 1_700_000_000;

    fn user(id: &str, scopes: Scopes) -> Principal {
        Principal {
            user_id: id.into(),
            device_id: "phone".into(),
            tenant: "acme".into(),
            scopes,
            expires_at_s: Some(NOW + 3600),
            token_id: String::new(),
            anonymous: false,
        }
    }

    fn alice() -> Principal {
        user("alice", Scopes::DEFAULT)
    }

    /// alice is a member of g1 and d1 (as in §4.4's matrix); bob of nothing.
    fn directory(q: &MembershipQuestion) -> Result<bool, ()> {
        Ok(matches!(q.group.as_str(), "g1" | "d1"))
    }

    fn decide(policy: &Policy, p: &Principal, topic: &str, action: Action) -> Decision {
        policy.authorize(p, topic, action, NOW, true, &mut directory)
    }

    fn allowed(policy: &Policy, p: &Principal, topic: &str, action: Action) -> bool {
        decide(policy, p, topic, action).is_allowed()
    }

    fn rule(pattern: &str, effect: Effect, actions: &[Action]) -> Rule {
        Rule::new(pattern, effect, actions).unwrap()
    }

    fn policy(rules: Vec<Rule>) -> Policy {
        Policy::new(rules).unwrap()
    }

    #[test]
    fn topic_match_table() {
        let table = [
            ("chat.inbox.u1", "chat.inbox.*", true),
            ("chat.inbox.u1.msg", "chat.inbox.*", false),
            ("chat.inbox", "chat.inbox.#", true),
            ("chat.group.g1", "chat.group.*.#", true),
            ("chat.direct.g1", "chat.group.*.#", false),
            ("a.b.c.d.e", "a.#.e", true),
            ("a.b.c", "*.*", false),
            ("a..b", "a.*.b", true),
            ("a", "#.#.#", true),
        ];
        for (topic, pattern, want) in table {
            assert_eq!(topic_matches(topic, pattern), want, "{topic} ~ {pattern}");
        }
    }

    #[test]
    fn topic_match_edge_cases() {
        assert!(topic_matches("", "#"));
        assert!(topic_matches("anything.at.all", "#"));
        assert!(topic_matches("", ""));
        assert!(!topic_matches("a", ""));
        assert!(topic_matches("", "*"), "one empty segment");
        assert!(!topic_matches("a.b", "*"));
        assert!(topic_matches("a", "#.a"));
        assert!(topic_matches("x.y.a", "#.a"));
        assert!(!topic_matches("a.x", "#.a"));
        assert!(topic_matches("a.x.b.y.z.c", "a.#.b.#.c"));
        assert!(!topic_matches("a.x.c.y.b", "a.#.b.#.c"));
        assert!(topic_matches("a.b", "a.b.#"));
        assert!(!topic_matches("a.bc", "a.b"));
        assert!(!topic_matches("A.b", "a.b"), "case-sensitive");
        assert!(topic_matches("${user}", "${user}"), "no expansion here");
        assert!(!topic_matches("alice", "${user}"));
        assert!(!topic_matches("chat.inbox.alice", "chat.inbox.alice.*"));
    }

    /// The reference: plain recursion, exponential but obviously right.
    fn reference(pattern: &[&str], topic: &[&str]) -> bool {
        match pattern.split_first() {
            None => topic.is_empty(),
            Some((&"#", rest)) => (0..=topic.len()).any(|k| reference(rest, &topic[k..])),
            Some((&seg, rest)) => match topic.split_first() {
                Some((t, trest)) => (seg == "*" || seg == *t) && reference(rest, trest),
                None => false,
            },
        }
    }

    #[test]
    fn property_topic_matches_agrees_with_the_reference() {
        let mut rng = Rng::new(0xac10);
        let pieces = ["a", "b", "", "*", "#"];
        let gen = |rng: &mut Rng, wild: bool| {
            let n = 1 + rng.below(5) as usize;
            let span = if wild { pieces.len() } else { 3 };
            (0..n)
                .map(|_| pieces[rng.below(span as u64) as usize])
                .collect::<Vec<_>>()
        };
        for _ in 0..20_000 {
            let pattern = gen(&mut rng, true);
            let topic = gen(&mut rng, false);
            let (ps, ts) = (pattern.join("."), topic.join("."));
            // Work on the split form: "" joins back to one empty segment.
            let p: Vec<&str> = ps.split('.').collect();
            let t: Vec<&str> = ts.split('.').collect();
            assert_eq!(
                topic_matches(&ts, &ps),
                reference(&p, &t),
                "{ts:?} ~ {ps:?}"
            );
        }
    }

    #[test]
    fn matching_many_hashes_stays_cheap() {
        let pattern = vec!["#"; PATTERN_SEGMENTS_MAX].join(".") + ".z";
        let topic = vec!["a"; 500].join(".");
        assert!(!topic_matches(&topic, &pattern));
        assert!(topic_matches(&(topic + ".z"), &pattern));
    }

    #[test]
    fn placeholders_expand_to_principal_fields() {
        let p = policy(vec![
            rule("chat.${user}.${device}", Effect::Allow, &[]),
            rule("t.${tenant}.x-${user}", Effect::Allow, &[]),
        ]);
        let a = alice();
        assert!(allowed(&p, &a, "chat.alice.phone", Read));
        assert!(!allowed(&p, &a, "chat.alice.tablet", Read));
        assert!(!allowed(&p, &a, "chat.bob.phone", Read));
        assert!(allowed(&p, &a, "t.acme.x-alice", Write));
        assert!(!allowed(&p, &a, "t.other.x-alice", Write));
        assert!(!allowed(&p, &a, "t.acme.alice", Write));
    }

    /// Below the principal check: even a wildcard-shaped value expands to a
    /// literal segment, and a dotted one to a segment no topic has.
    #[test]
    fn expansion_is_literal_even_for_wildcard_values() {
        let pattern = Pattern::parse("chat.inbox.${user}.#").unwrap();
        for (id, topic, want) in [
            ("#", "chat.inbox.bob", false),
            ("#", "chat.inbox.#", true),
            ("*", "chat.inbox.bob.x", false),
            ("a.b", "chat.inbox.a.b", false),
            ("a.b", "chat.inbox.a", false),
        ] {
            let p = user(id, Scopes::ALL);
            let segs: Vec<&str> = topic.split('.').collect();
            assert_eq!(pattern.matches(&p, &segs), want, "{id:?} ~ {topic}");
        }
    }

    #[test]
    fn empty_principal_fields_match_no_real_segment() {
        let p = policy(vec![rule("chat.${user}.${device}", Effect::Allow, &[])]);
        let mut a = alice();
        a.device_id.clear();
        assert!(!allowed(&p, &a, "chat.alice.phone", Read));
        assert!(
            allowed(&p, &a, "chat.alice.", Read),
            "only the empty segment"
        );
    }

    #[test]
    fn empty_policy_denies_everything() {
        let p = policy(vec![]);
        assert_eq!(
            decide(&p, &alice(), "chat.inbox.alice", Read),
            Decision::Deny(Denial::NoAllowRule)
        );
    }

    #[test]
    fn own_inbox_only() {
        let p = Policy::chat_default();
        let a = alice();
        for action in [Read, Write] {
            assert!(allowed(&p, &a, "chat.inbox.alice", action));
            assert!(allowed(&p, &a, "chat.inbox.alice.archive", action));
            assert!(!allowed(&p, &a, "chat.inbox.bob", action));
            assert!(!allowed(&p, &a, "chat.inbox.bob.archive", action));
            assert!(!allowed(&p, &a, "chat.inbox.alicex", action));
        }
        assert!(!allowed(&p, &a, "chat.inbox", Read));
    }

    #[test]
    fn full_default_matrix() {
        let p = Policy::chat_default();
        let a = alice();
        let admin = user("alice", Scopes::DEFAULT.with(Scope::Admin));
        let no_presence = user("alice", Scopes::of(Scope::Publish).with(Scope::Subscribe));
        let rows: &[(&Principal, Action, &str, bool)] = &[
            (&a, Read, "chat.inbox.alice", true),
            (&a, Write, "chat.inbox.alice", true),
            (&a, Read, "chat.inbox.alice.archive", true),
            (&a, Read, "chat.inbox.bob", false),
            (&a, Write, "chat.inbox.bob.archive", false),
            (&a, Read, "chat.group.g1", true),
            (&a, Write, "chat.group.g1", true),
            (&a, Read, "chat.group.g2", false),
            (&a, Write, "chat.direct.d1", true),
            (&a, Write, "chat.direct.d2", false),
            (&a, Write, "presence.alice", true),
            (&a, Write, "presence.bob", false),
            (&a, Read, "presence.bob", true),
            (&no_presence, Write, "presence.alice", false),
            (&a, Write, "typing.g1", true),
            (&a, Write, "typing.g2", false),
            (&a, Read, "system.news", true),
            (&a, Write, "system.news", false),
            (&a, Manage, "chat.group.g1", false),
            (&admin, Manage, "chat.group.g1", true),
            (&a, Read, "totally.unknown.topic", false),
            (&a, Read, "match.alice", false),
        ];
        for (i, (who, action, topic, want)) in rows.iter().enumerate() {
            assert_eq!(
                allowed(&p, who, topic, *action),
                *want,
                "row {i}: {action:?} {topic}"
            );
        }
    }

    #[test]
    fn default_rules_enforce_publish_and_subscribe_scopes() {
        let p = Policy::chat_default();
        let only = |s: Scope| user("alice", Scopes::of(s));
        // A presence-only token neither reads nor writes chats (G29).
        let pr = only(Scope::Presence);
        for topic in ["chat.inbox.alice", "chat.group.g1", "chat.direct.d1"] {
            assert!(!allowed(&p, &pr, topic, Read), "{topic}");
            assert!(!allowed(&p, &pr, topic, Write), "{topic}");
        }
        assert!(allowed(&p, &pr, "presence.alice", Write));
        assert!(allowed(&p, &pr, "typing.g1", Write));
        assert!(!allowed(&p, &pr, "presence.bob", Read));
        // Subscribe-only reads but never writes.
        let sub = only(Scope::Subscribe);
        for topic in [
            "chat.inbox.alice",
            "chat.group.g1",
            "presence.bob",
            "typing.g1",
            "system.x",
        ] {
            assert!(allowed(&p, &sub, topic, Read), "{topic}");
            assert!(!allowed(&p, &sub, topic, Write), "{topic}");
        }
        // Publish-only writes conversations and its inbox but reads nothing.
        let publ = only(Scope::Publish);
        for topic in ["chat.inbox.alice", "chat.group.g1", "chat.direct.d1"] {
            assert!(allowed(&p, &publ, topic, Write), "{topic}");
            assert!(!allowed(&p, &publ, topic, Read), "{topic}");
        }
        assert!(!allowed(&p, &publ, "typing.g1", Write));
        // No scopes: nothing at all.
        let none = user("alice", Scopes::NONE);
        for topic in [
            "chat.inbox.alice",
            "chat.group.g1",
            "presence.alice",
            "system.x",
        ] {
            for action in Action::EVERY {
                assert!(!allowed(&p, &none, topic, action), "{action:?} {topic}");
            }
        }
    }

    #[test]
    fn system_is_read_only_even_for_admin() {
        let p = Policy::chat_default();
        let admin = user("root", Scopes::ALL);
        assert!(allowed(&p, &admin, "system.news", Read));
        assert_eq!(
            decide(&p, &admin, "system.news", Write),
            Decision::Deny(Denial::Rule(12))
        );
        assert!(!allowed(&p, &admin, "system.news", Manage));
        assert!(allowed(&p, &admin, "chat.group.g9", Manage));
    }

    #[test]
    fn deny_beats_a_later_or_earlier_broad_allow() {
        let deny = rule("secret.#", Effect::Deny, &[]);
        let broad = rule("#", Effect::Allow, &[]);
        for rules in [vec![broad.clone(), deny.clone()], vec![deny, broad]] {
            let p = policy(rules);
            assert!(!allowed(&p, &alice(), "secret.x", Read));
            assert!(allowed(&p, &alice(), "public.x", Read));
        }
    }

    #[test]
    fn inbox_stays_closed_when_the_policy_is_widened() {
        let mut rules = Policy::chat_default().rules().to_vec();
        rules.push(rule("#", Effect::Allow, &[Read, Write]));
        let p = policy(rules);
        assert!(!allowed(&p, &alice(), "chat.inbox.bob", Read));
        assert!(allowed(&p, &alice(), "chat.inbox.alice", Read));
        assert!(
            allowed(&p, &alice(), "match.anything", Read),
            "the widening works"
        );
    }

    #[test]
    fn except_pattern_carves_a_hole_in_a_deny_rule() {
        let p = policy(vec![
            rule("#", Effect::Allow, &[]),
            rule("a.#", Effect::Deny, &[])
                .with_except("a.open.#")
                .unwrap(),
        ]);
        assert!(!allowed(&p, &alice(), "a.closed", Read));
        assert!(allowed(&p, &alice(), "a.open", Read));
        assert!(allowed(&p, &alice(), "a.open.deeper", Read));
    }

    #[test]
    fn except_pattern_on_an_allow_rule() {
        let p = policy(vec![rule("news.#", Effect::Allow, &[])
            .with_except("news.${user}.private")
            .unwrap()]);
        assert!(allowed(&p, &alice(), "news.alice.public", Read));
        assert!(!allowed(&p, &alice(), "news.alice.private", Read));
        assert!(allowed(&p, &alice(), "news.bob.private", Read));
    }

    #[test]
    fn action_scoping_and_empty_actions_cover_all() {
        let p = policy(vec![
            rule("ro.#", Effect::Allow, &[Read]),
            rule("all.#", Effect::Allow, &[]),
        ]);
        assert!(allowed(&p, &alice(), "ro.x", Read));
        assert!(!allowed(&p, &alice(), "ro.x", Write));
        assert!(!allowed(&p, &alice(), "ro.x", Manage));
        for action in Action::EVERY {
            assert!(allowed(&p, &alice(), "all.x", action));
        }
    }

    #[test]
    fn require_scope_is_any_of() {
        let p = policy(vec![rule("x", Effect::Allow, &[])
            .with_scope(Scopes::of(Scope::Admin).with(Scope::Presence))]);
        assert!(allowed(
            &p,
            &user("u", Scopes::of(Scope::Presence)),
            "x",
            Read
        ));
        assert!(allowed(&p, &user("u", Scopes::of(Scope::Admin)), "x", Read));
        assert!(!allowed(
            &p,
            &user("u", Scopes::of(Scope::Publish)),
            "x",
            Read
        ));
    }

    #[test]
    fn membership_gating_is_rechecked_each_call() {
        let p = Policy::chat_default();
        let member = Cell::new(true);
        let mut ask = |_: &MembershipQuestion| Ok(member.get());
        let a = alice();
        assert!(p
            .authorize(&a, "chat.group.g7", Read, NOW, true, &mut ask)
            .is_allowed());
        member.set(false);
        assert!(!p
            .authorize(&a, "chat.group.g7", Read, NOW, true, &mut ask)
            .is_allowed());
    }

    #[test]
    fn membership_error_denies_even_if_a_later_rule_allows() {
        let p = policy(vec![
            rule("g.*", Effect::Allow, &[]).with_membership(1).unwrap(),
            rule("#", Effect::Allow, &[]),
        ]);
        let mut fail = |_: &MembershipQuestion| Err(());
        assert_eq!(
            p.authorize(&alice(), "g.x", Read, NOW, true, &mut fail),
            Decision::Deny(Denial::MembershipUnavailable)
        );
        // A membership rule that does not match asks nothing, so no outage.
        assert!(p
            .authorize(&alice(), "h.x", Read, NOW, true, &mut fail)
            .is_allowed());
    }

    #[test]
    fn membership_is_asked_lazily_and_once_per_group() {
        let p = policy(vec![
            rule("g.*", Effect::Allow, &[Read])
                .with_membership(1)
                .unwrap(),
            rule("g.*", Effect::Allow, &[]).with_membership(1).unwrap(),
            rule("g.*", Effect::Allow, &[])
                .with_scope(Scopes::of(Scope::Admin))
                .with_membership(1)
                .unwrap(),
        ]);
        let mut asked = Vec::new();
        let mut ask = |q: &MembershipQuestion| {
            asked.push(q.clone());
            Ok(true)
        };
        assert!(p
            .authorize(&alice(), "g.x", Read, NOW, true, &mut ask)
            .is_allowed());
        assert!(!p
            .authorize(&alice(), "other", Read, NOW, true, &mut ask)
            .is_allowed());
        assert_eq!(
            asked,
            vec![MembershipQuestion {
                topic: "g.x".into(),
                group: "x".into()
            }]
        );
    }

    #[test]
    fn membership_segment_out_of_range_is_skipped() {
        let p = policy(vec![rule("a.#", Effect::Allow, &[])
            .with_membership(3)
            .unwrap()]);
        let mut yes = |_: &MembershipQuestion| Ok(true);
        assert!(!p
            .authorize(&alice(), "a.b", Read, NOW, true, &mut yes)
            .is_allowed());
        assert!(p
            .authorize(&alice(), "a.b.c.d", Read, NOW, true, &mut yes)
            .is_allowed());
        // A deny rule out of range does not deny either.
        let p = policy(vec![
            rule("#", Effect::Allow, &[]),
            rule("a.#", Effect::Deny, &[]).with_membership(3).unwrap(),
        ]);
        assert!(p
            .authorize(&alice(), "a.b", Read, NOW, true, &mut yes)
            .is_allowed());
        assert!(!p
            .authorize(&alice(), "a.b.c.d", Read, NOW, true, &mut yes)
            .is_allowed());
    }

    #[test]
    fn expired_principals_are_denied_without_leeway() {
        let p = Policy::chat_default();
        let mut a = alice();
        a.expires_at_s = Some(NOW - 1);
        assert_eq!(
            decide(&p, &a, "chat.inbox.alice", Read),
            Decision::Deny(Denial::Expired)
        );
        a.expires_at_s = Some(NOW);
        assert!(allowed(&p, &a, "chat.inbox.alice", Read));
    }

    #[test]
    fn anonymous_bypasses_the_acl_iff_allowed() {
        let p = policy(vec![]);
        let anon = Principal::anonymous();
        let mut never = |_: &MembershipQuestion| -> Result<bool, ()> { panic!("not asked") };
        assert!(p
            .authorize(&anon, "chat.inbox.bob", Write, NOW, true, &mut never)
            .is_allowed());
        assert_eq!(
            p.authorize(&anon, "chat.inbox.bob", Read, NOW, false, &mut never),
            Decision::Deny(Denial::AnonymousRefused)
        );
        assert!(p
            .membership_questions(&anon, "chat.group.g1", Read, NOW)
            .is_empty());
    }

    #[test]
    fn over_long_topics_are_denied() {
        let p = policy(vec![rule("#", Effect::Allow, &[])]);
        let long = "a".repeat(TOPIC_BYTES_MAX + 1);
        assert_eq!(
            decide(&p, &alice(), &long, Read),
            Decision::Deny(Denial::TopicTooLong)
        );
        assert!(allowed(&p, &alice(), &long[..TOPIC_BYTES_MAX], Read));
    }

    #[test]
    fn membership_questions_list_what_authorize_may_ask() {
        let p = Policy::chat_default();
        let q = |topic: &str, group: &str| MembershipQuestion {
            topic: topic.into(),
            group: group.into(),
        };
        let a = alice();
        assert_eq!(
            p.membership_questions(&a, "chat.group.g1", Read, NOW),
            vec![q("chat.group.g1", "g1")]
        );
        assert_eq!(
            p.membership_questions(&a, "typing.alice:bob", Write, NOW),
            vec![q("typing.alice:bob", "alice:bob")]
        );
        assert!(p
            .membership_questions(&a, "chat.inbox.alice", Read, NOW)
            .is_empty());
        assert!(p
            .membership_questions(&a, "chat.group.g1", Manage, NOW)
            .is_empty());
        let none = user("alice", Scopes::NONE);
        assert!(p
            .membership_questions(&none, "chat.group.g1", Read, NOW)
            .is_empty());
        let mut expired = alice();
        expired.expires_at_s = Some(NOW - 1);
        assert!(p
            .membership_questions(&expired, "chat.group.g1", Read, NOW)
            .is_empty());
    }

    /// Random requests: `authorize` asks only questions that
    /// `membership_questions` listed, and answering from the prepared list
    /// (missing ⇒ error) gives the same decision as the live directory.
    #[test]
    fn property_questions_cover_what_authorize_asks() {
        let mut rng = Rng::new(0x9e57);
        let p = Policy::chat_default();
        let namespaces = [
            "chat.group",
            "chat.direct",
            "chat.inbox",
            "typing",
            "presence",
            "system",
        ];
        let ids = ["g1", "d1", "alice", "bob", "g2"];
        let scopes = [
            Scopes::DEFAULT,
            Scopes::ALL,
            Scopes::of(Scope::Presence),
            Scopes::NONE,
        ];
        for _ in 0..3000 {
            let ns = namespaces[rng.below(namespaces.len() as u64) as usize];
            let id = ids[rng.below(ids.len() as u64) as usize];
            let tail = ["", ".x", ".x.y"][rng.below(3) as usize];
            let topic = format!("{ns}.{id}{tail}");
            let action = Action::EVERY[rng.below(3) as usize];
            let who = user(
                ["alice", "bob"][rng.below(2) as usize],
                scopes[rng.below(scopes.len() as u64) as usize],
            );
            let questions = p.membership_questions(&who, &topic, action, NOW);
            let unique: HashSet<_> = questions.iter().collect();
            assert_eq!(unique.len(), questions.len());
            let live = p.authorize(&who, &topic, action, NOW, true, &mut |q| {
                assert!(questions.contains(q), "unlisted question {q:?}");
                directory(q)
            });
            let prepared: Vec<(MembershipQuestion, bool)> = questions
                .iter()
                .map(|q| (q.clone(), directory(q).unwrap()))
                .collect();
            let replay = p.authorize(&who, &topic, action, NOW, true, &mut |q| {
                prepared
                    .iter()
                    .find(|(k, _)| k == q)
                    .map(|(_, m)| *m)
                    .ok_or(())
            });
            assert_eq!(live, replay, "{action:?} {topic}");
        }
    }

    /// §18 G30: user ids made of wildcard and separator characters never
    /// reach another user's inbox, under the default policy and under one
    /// widened with a catch-all read/write rule; and valid random ids reach
    /// their own inbox and no other.
    #[test]
    fn property_hostile_ids_never_reach_another_inbox() {
        let mut widened = Policy::chat_default().rules().to_vec();
        widened.push(rule("#", Effect::Allow, &[Read, Write]));
        let policies = [Policy::chat_default(), policy(widened)];
        let mut rng = Rng::new(0x6a30);
        let alphabet = [
            '#', '*', '.', 'a', 'v', 'i', 'c', 't', 'm', '$', '{', '}', '-', ':',
        ];
        let victims = ["victim", "v", "a-b"];
        let mut always_member = |_: &MembershipQuestion| Ok(true);
        for round in 0..4000 {
            let len = 1 + rng.below(8) as usize;
            let id: String = (0..len)
                .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                .collect();
            let mut who = user(&id, Scopes::ALL);
            if round % 3 == 0 {
                who.device_id = id.clone();
                who.tenant = id.clone();
            }
            for p in &policies {
                for victim in victims {
                    if victim == id {
                        continue;
                    }
                    for topic in [
                        format!("chat.inbox.{victim}"),
                        format!("chat.inbox.{victim}.x"),
                    ] {
                        for action in Action::EVERY {
                            let d =
                                p.authorize(&who, &topic, action, NOW, true, &mut always_member);
                            assert!(!d.is_allowed(), "{id:?} got {action:?} on {topic}");
                        }
                    }
                }
                let own = format!("chat.inbox.{id}");
                let d = p.authorize(&who, &own, Read, NOW, true, &mut always_member);
                if valid_id(&id) {
                    assert!(d.is_allowed(), "{id:?} lost its own inbox");
                } else {
                    assert_eq!(d, Decision::Deny(Denial::BadPrincipal), "{id:?}");
                }
            }
        }
    }

    fn config_rule(pattern: &str, effect: &str) -> AclRuleConfig {
        AclRuleConfig {
            pattern: pattern.into(),
            effect: effect.into(),
            ..AclRuleConfig::default()
        }
    }

    #[test]
    fn from_config_empty_means_the_default() {
        assert_eq!(Policy::from_config(&[]).unwrap(), Policy::chat_default());
    }

    #[test]
    fn from_config_builds_every_field() {
        let rules = [
            AclRuleConfig {
                pattern: "match.${user}.#".into(),
                except_pattern: "match.${user}.private".into(),
                actions: vec!["read".into(), "write".into()],
                effect: "allow".into(),
                require_scope: vec!["subscribe".into(), "admin".into()],
                ..AclRuleConfig::default()
            },
            AclRuleConfig {
                pattern: "presence.#".into(),
                actions: vec!["read".into()],
                effect: "allow".into(),
                require_membership: true,
                membership_segment: 1,
                ..AclRuleConfig::default()
            },
        ];
        let p = Policy::from_config(&rules).unwrap();
        let a = alice();
        assert!(allowed(&p, &a, "match.alice.game", Write));
        assert!(!allowed(&p, &a, "match.alice.private", Read));
        assert!(!allowed(&p, &a, "match.bob.game", Read));
        assert!(!allowed(&p, &a, "match.alice.game", Manage));
        assert!(!allowed(
            &p,
            &user("alice", Scopes::of(Scope::Publish)),
            "match.alice.g",
            Read
        ));
        // §4.6: presence restricted to "matched" users.
        assert_eq!(
            p.membership_questions(&a, "presence.d1", Read, NOW),
            vec![MembershipQuestion {
                topic: "presence.d1".into(),
                group: "d1".into()
            }]
        );
        assert!(allowed(&p, &a, "presence.d1", Read));
        assert!(!allowed(&p, &a, "presence.bob", Read));
    }

    #[test]
    fn from_config_refuses_bad_rules_naming_the_index() {
        let bad = |r: AclRuleConfig| {
            let e = Policy::from_config(&[config_rule("ok", "allow"), r]).unwrap_err();
            assert!(e.contains("policy[1]"), "{e}");
            e
        };
        bad(config_rule("a.#", "Allow"));
        bad(config_rule("a.#", ""));
        bad(config_rule("", "allow"));
        for pattern in [
            "a b",
            "a..b",
            "a.",
            ".a",
            "a*",
            "a.b#",
            "a.${usr}",
            "a.${user",
            "a.$",
            "a.{x}",
            "a/b",
            "a.é",
            "chat.inbox.%",
        ] {
            let e = bad(config_rule(pattern, "allow"));
            assert!(e.contains("pattern"), "{pattern}: {e}");
        }
        bad(config_rule(&"a".repeat(PATTERN_BYTES_MAX + 1), "allow"));
        bad(config_rule(
            &vec!["a"; PATTERN_SEGMENTS_MAX + 1].join("."),
            "allow",
        ));
        let mut r = config_rule("a", "allow");
        r.except_pattern = "a.*b".into();
        bad(r);
        let mut r = config_rule("a", "deny");
        r.actions = vec!["delete".into()];
        bad(r);
        let mut r = config_rule("a", "allow");
        r.require_scope = vec!["admni".into()];
        assert!(bad(r).contains("admni"));
        let mut r = config_rule("chat.group.*", "allow");
        r.require_membership = true;
        r.membership_segment = 3;
        bad(r);
        let mut r = config_rule("chat.#", "allow");
        r.require_membership = true;
        r.membership_segment = (MEMBERSHIP_SEGMENT_MAX + 1) as u32;
        bad(r);
        let mut r = config_rule("chat.group.*", "allow");
        r.membership_segment = 2;
        bad(r);
        let many = vec![config_rule("a", "allow"); RULES_MAX + 1];
        assert!(Policy::from_config(&many).is_err());
    }

    #[test]
    fn from_config_accepts_the_allowed_pattern_alphabet() {
        for pattern in [
            "#",
            "*",
            "chat.direct.a:b",
            "x.A-z_0@9+.*.#",
            "${tenant}.${user}-${device}",
        ] {
            assert!(
                Policy::from_config(&[config_rule(pattern, "deny")]).is_ok(),
                "{pattern}"
            );
        }
    }

    #[test]
    fn denial_texts_are_non_empty() {
        for d in [
            Denial::Expired,
            Denial::AnonymousRefused,
            Denial::BadPrincipal,
            Denial::TopicTooLong,
            Denial::Rule(3),
            Denial::MembershipUnavailable,
            Denial::NoAllowRule,
        ] {
            assert!(!d.to_string().is_empty());
        }
        assert_eq!(Denial::Rule(3).to_string(), "denied by rule 3");
    }
}
