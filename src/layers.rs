//! The layer order of the server's modules, and the test that holds the tree to it.
//!
//! ```text
//! config, http, logger,       foundations: no plane, no runtime wiring (faults: the
//! faults                      crash points and test faults a plane may check)
//!   ↑
//! cache, queue, messaging     the planes: each builds and tests without the others, except
//!                             that messaging's stream commands speak the queue plane's
//!                             TCP protocol (`queue::protocol`, its wire codec only)
//!   ↑
//! cluster                     replication of the planes' slots (Raft groups)
//!   ↑
//! admin, client               the admin API over the planes; the Rust client over their codecs
//!   ↑
//! server                      wires listeners, shards and planes together; owns ShardMsg
//! ```
//!
//! Why: a plane that imports another (or the server) cannot be built, tested or replaced
//! alone, and a cycle hides which module decides. The table below is the contract; the test
//! reads every `crate::` path in `src/` and fails on an edge the table does not allow.

/// For each top-level module, the paths it may name with `crate::`: a module, or one
/// module inside another (`queue::protocol`).
#[cfg(test)]
const ALLOWED: &[(&str, &[&str])] = &[
    ("config", &[]),
    ("logger", &[]),
    ("faults", &[]),
    ("http", &["config"]),
    ("cache", &["config", "http"]),
    ("queue", &["config", "http", "faults"]),
    (
        "messaging",
        &["config", "http", "faults", "queue::protocol"],
    ),
    ("cluster", &["config", "queue", "messaging"]),
    ("admin", &["config", "http", "cache", "queue", "messaging"]),
    ("client", &["config", "queue", "messaging"]),
    (
        "server",
        &[
            "config",
            "http",
            "logger",
            "faults",
            "cache",
            "queue",
            "messaging",
            "admin",
            "cluster",
        ],
    ),
];

#[cfg(test)]
mod tests {
    use super::ALLOWED;
    use std::path::{Path, PathBuf};

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src is readable") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The top-level module a file under `src/` belongs to (`None` for the crate roots).
    fn module_of(src: &Path, file: &Path) -> Option<String> {
        let rel = file.strip_prefix(src).expect("file under src");
        let first = rel.components().next()?.as_os_str().to_str()?;
        match first {
            "lib.rs" | "main.rs" | "layers.rs" => None,
            name => Some(name.trim_end_matches(".rs").to_string()),
        }
    }

    /// Every `crate::<module>` named in `text` (use lines and inline paths alike), with the
    /// paths inside `use crate::{a, b}` groups.
    fn named_modules(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            if let Some(group) = after.strip_prefix('{') {
                out.extend(group_heads(group));
            } else {
                out.push(leading_path(after));
            }
            rest = after;
        }
        out.retain(|n| !n.is_empty());
        out
    }

    fn leading_ident(s: &str) -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    }

    /// `module` and, when a second segment follows, `module::inner`.
    fn leading_path(s: &str) -> String {
        let first = leading_ident(s);
        let rest = &s.trim_start()[first.len()..];
        match rest.strip_prefix("::") {
            Some(inner) if !inner.starts_with('{') => {
                format!("{first}::{}", leading_ident(inner))
            }
            _ => first,
        }
    }

    /// The first segment of each item in a `{...}` group (nested groups skipped).
    fn group_heads(group: &str) -> Vec<String> {
        let mut heads = vec![leading_path(group)];
        let mut depth = 0usize;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => heads.push(leading_path(&group[i + 1..])),
                _ => {}
            }
        }
        heads
    }

    #[test]
    fn no_module_imports_one_above_it() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        files.sort();
        let mut violations = Vec::new();
        for file in &files {
            let Some(module) = module_of(&src, file) else {
                continue;
            };
            let allowed = ALLOWED
                .iter()
                .find(|(m, _)| *m == module)
                .unwrap_or_else(|| panic!("module `{module}` is missing from ALLOWED"))
                .1;
            let text = std::fs::read_to_string(file).expect("source is readable");
            for named in named_modules(&text) {
                let top = named.split("::").next().unwrap_or_default();
                let permitted = top == module || allowed.iter().any(|a| *a == top || *a == named);
                if !permitted {
                    violations.push(format!(
                        "{}: `{module}` names `crate::{named}`",
                        file.strip_prefix(&src).unwrap().display()
                    ));
                }
            }
        }
        violations.dedup();
        assert!(
            violations.is_empty(),
            "imports against the layer order (src/layers.rs):\n{}",
            violations.join("\n")
        );
    }

    #[test]
    fn the_scanner_sees_grouped_and_inline_paths() {
        let text = "use crate::{config::X, queue::{a, b},\n  http};\nlet y = crate::server::shard_main::f();";
        assert_eq!(
            named_modules(text),
            ["config::X", "queue", "http", "server::shard_main"]
        );
    }
}
