//! Reading config files: TOML (ours, strict) and v1 JSON (lenient, v1 rules).
//!
//! Both end in the same place: a `toml::Value` deserialised into [`Config`].
//! Going through `toml::Value` (rather than `toml::from_str`) is what lets us
//! name the failing key: the value deserialiser reports the dotted path
//! (`in \`storage.fsync\``), which the text deserialiser replaces with a source
//! snippet. The text deserialiser is still consulted on error, for the line
//! number.

use std::path::Path;

use serde_json::Value as Json;

use super::duration::parse_signed_duration;
use super::{Config, ConfigError};

/// Reads `path` and parses it according to its extension.
pub(super) fn load(path: &Path) -> Result<Config, ConfigError> {
    let at_path = |e: ConfigError| match e {
        ConfigError::File {
            line, key, reason, ..
        } => ConfigError::File {
            path: Some(path.to_path_buf()),
            line,
            key,
            reason,
        },
        other => other,
    };
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let parse: fn(&str) -> Result<Config, ConfigError> = match ext.as_deref() {
        Some("toml") => parse_toml,
        Some("json") => parse_v1_json,
        _ => {
            return Err(at_path(file_error(
                None,
                None,
                "unsupported config file type: name it *.toml, or *.json for a v1 config",
            )))
        }
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| at_path(file_error(None, None, format!("cannot read: {e}"))))?;
    parse(&text).map_err(at_path)
}

fn file_error(line: Option<usize>, key: Option<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::File {
        path: None,
        line,
        key,
        reason: reason.into(),
    }
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

pub(super) fn parse_toml(text: &str) -> Result<Config, ConfigError> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        file_error(
            e.span().map(|s| line_of(text, s.start)),
            None,
            format!("invalid TOML: {}", e.message()),
        )
    })?;
    from_toml_value(toml::Value::Table(table)).map_err(|mut err| {
        // Second, text-based pass only to locate the line.
        if let ConfigError::File { line, .. } = &mut err {
            if let Err(e) = toml::from_str::<Config>(text) {
                *line = e.span().map(|s| line_of(text, s.start));
            }
        }
        err
    })
}

/// Deserialises a document tree into [`Config`], mapping serde's error onto
/// a key path and a readable reason.
fn from_toml_value(value: toml::Value) -> Result<Config, ConfigError> {
    value.try_into::<Config>().map_err(|e| {
        let (key, reason) = describe_de_error(&e);
        file_error(None, key, reason)
    })
}

/// Splits a `toml` value-deserialisation error into (dotted key, reason).
///
/// The error's `Display` is `"<message>\nin `a.b`\n"` when a path is known.
/// For an unknown field the path is the *table*, and the field is named in the
/// message, so we append it to get the full key.
fn describe_de_error(e: &toml::de::Error) -> (Option<String>, String) {
    let rendered = e.to_string();
    let table_path = rendered.rfind("\nin `").and_then(|start| {
        let rest = &rendered[start + "\nin `".len()..];
        rest.find('`').map(|end| rest[..end].to_string())
    });
    let message = e.message();
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((field, expected)) = rest.split_once('`') {
            let key = match &table_path {
                Some(p) => format!("{p}.{field}"),
                None => field.to_string(),
            };
            let expected = expected.trim_start_matches(',').trim();
            let reason = if expected.is_empty() {
                "unknown key".to_string()
            } else {
                format!("unknown key ({expected})")
            };
            return (Some(key), reason);
        }
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        if let Some((variant, expected)) = rest.split_once('`') {
            let expected = expected.trim_start_matches(',').trim();
            return (
                table_path,
                format!("unknown value \"{variant}\" ({expected})"),
            );
        }
    }
    (table_path, message.to_string())
}

/// Parses a v1 JSON config; see [`Config::from_v1_json_str`] for the rules.
pub(super) fn parse_v1_json(text: &str) -> Result<Config, ConfigError> {
    let mut root: Json = serde_json::from_str(text).map_err(|e| {
        file_error(
            Some(e.line()),
            None,
            format!("invalid JSON: {}", strip_json_position(&e.to_string())),
        )
    })?;
    if !root.is_object() {
        return Err(file_error(None, None, "a v1 config must be a JSON object"));
    }
    apply_v1_coercions(&mut root);
    let schema = serde_json::to_value(Config::default()).expect("defaults serialise");
    let key_schema =
        serde_json::to_value(super::IdentityKeyConfig::default()).expect("defaults serialise");
    let rule_schema =
        serde_json::to_value(super::AclRuleConfig::default()).expect("defaults serialise");
    drop_unknown_keys(&mut root, &schema, "", &key_schema, &rule_schema);
    let value = json_to_toml(root, "")?.unwrap_or_else(|| toml::Value::Table(Default::default()));
    from_toml_value(value)
}

/// serde_json appends " at line L column C"; we report the line separately.
fn strip_json_position(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(i) => &message[..i],
        None => message,
    }
}

fn get_mut<'a>(root: &'a mut Json, path: &[&str]) -> Option<&'a mut Json> {
    path.iter().try_fold(root, |v, k| v.get_mut(*k))
}

/// v1's "zero or negative means the default" rules, applied before typing so
/// that a v1 file that worked keeps working.
fn apply_v1_coercions(root: &mut Json) {
    // Integers where ≤ 0 meant "use the default": drop them so ours applies.
    for path in [
        &["queue", "max_retry"][..],
        &["queue", "capacity"],
        &["cache", "cleanup_sec"],
        &["messaging", "gateway", "max_subscriptions"],
        &["messaging", "gateway", "send_buffer"],
        &["messaging", "gateway", "read_limit"],
        &["messaging", "gateway", "history_limit"],
    ] {
        remove_if(root, path, |v| v.as_f64().is_some_and(|n| n <= 0.0));
    }
    // Integers where ≤ 0 meant "off/unlimited", which is 0 for us.
    for path in [
        &["storage", "compaction_threshold"][..],
        &["cache", "max_keys"],
        &["cache", "default_ttl_ms"],
    ] {
        if let Some(v) = get_mut(root, path) {
            if v.as_f64().is_some_and(|n| n < 0.0) {
                *v = Json::from(0);
            }
        }
    }
    // Durations where ≤ 0 meant the default. A *number* is left alone so the
    // typed pass rejects it, as v1 did for `queue.ack_timeout`.
    for path in [
        &["queue", "ack_timeout"][..],
        &["messaging", "gateway", "resume_window"],
        &["messaging", "gateway", "pong_timeout"],
    ] {
        remove_if(root, path, |v| {
            v.as_str()
                .and_then(|s| parse_signed_duration(s).ok())
                .is_some_and(|(negative, d)| negative || d.is_zero())
        });
    }
}

fn remove_if(root: &mut Json, path: &[&str], pred: impl Fn(&Json) -> bool) {
    let (last, parent) = path.split_last().expect("non-empty path");
    if let Some(Json::Object(map)) = get_mut(root, parent) {
        if map.get(*last).is_some_and(pred) {
            map.remove(*last);
        }
    }
}

/// v1 ignores keys it does not know; so do we for JSON (only). Objects are
/// filtered against the serialised defaults; arrays of tables against their
/// element schema.
fn drop_unknown_keys(
    value: &mut Json,
    schema: &Json,
    path: &str,
    key_schema: &Json,
    rule_schema: &Json,
) {
    match (value, schema) {
        (Json::Object(map), Json::Object(known)) => {
            map.retain(|k, _| {
                let keep = known.contains_key(k);
                if !keep {
                    log::warn!("ignoring unknown v1 config key {}", join(path, k));
                }
                keep
            });
            for (k, v) in map.iter_mut() {
                drop_unknown_keys(v, &known[k], &join(path, k), key_schema, rule_schema);
            }
        }
        (Json::Array(items), _) => {
            let element_schema = match path {
                "messaging.identity.keys" => key_schema,
                "messaging.identity.policy" => rule_schema,
                _ => return,
            };
            for item in items {
                drop_unknown_keys(item, element_schema, path, key_schema, rule_schema);
            }
        }
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Converts JSON to a TOML tree. `null` means "absent" (`Ok(None)`), as Go's
/// decoder leaves the field at its default.
fn json_to_toml(value: Json, path: &str) -> Result<Option<toml::Value>, ConfigError> {
    Ok(Some(match value {
        Json::Null => return Ok(None),
        Json::Bool(b) => toml::Value::Boolean(b),
        Json::String(s) => toml::Value::String(s),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                toml::Value::Integer(i)
            } else if n.is_u64() {
                return Err(file_error(
                    None,
                    Some(path.to_string()),
                    format!("{n} is out of range"),
                ));
            } else {
                toml::Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                match json_to_toml(item, &format!("{path}[{i}]"))? {
                    Some(v) => out.push(v),
                    None => {
                        return Err(file_error(
                            None,
                            Some(format!("{path}[{i}]")),
                            "null is not allowed in a list",
                        ))
                    }
                }
            }
            toml::Value::Array(out)
        }
        Json::Object(map) => {
            let mut table = toml::Table::new();
            for (k, v) in map {
                let child = join(path, &k);
                if let Some(v) = json_to_toml(v, &child)? {
                    table.insert(k, v);
                }
            }
            toml::Value::Table(table)
        }
    }))
}
