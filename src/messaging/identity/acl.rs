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
mod tests;
