//! The repository is self-contained: no tracked file refers to a document that lives outside
//! it. The design is docs/SPEC.md and the CRM facts are docs/crm.md; a reference to a
//! bare spec file, to a "facts" file or to a `shared` folder next to the repository
//! points at something a reader of this repository does not have.

use std::path::{Path, PathBuf};
use std::process::Command;

// Spelt in pieces so that this file does not match itself.
const SHARED_DIR: &str = concat!("shared", "/");
const FACTS_FILE: &str = concat!("FACTS", ".md");
const SPEC_FILE: &str = concat!("SPEC", ".md");
/// What must come right before the spec's file name: the only spec is docs/SPEC.md.
const SPEC_DIR: &str = "docs/";

/// Files that may keep a bare spec reference, and why.
const BARE_SPEC_ALLOWED: &[(&str, &str)] = &[
    (
        "crates/leadgate-store/migrations/sqlite/0004_metric_counters.sql",
        "an applied migration: sqlx checksums it, and editing it would break every database that \
         applied it; its comment's \"Metrics\" section is docs/SPEC.md's",
    ),
    (
        "crates/leadgate-store/migrations/postgres/0004_metric_counters.sql",
        "the PostgreSQL twin of the same applied migration",
    ),
];

/// The repository's top directory: git's idea of it, else the nearest ancestor of this
/// crate holding `.git`, else the crate itself.
fn repository_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let git = Command::new("git")
        .arg("-C")
        .arg(here)
        .args(["rev-parse", "--show-toplevel"])
        .output();
    if let Ok(out) = git {
        if out.status.success() {
            let top = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if !top.is_empty() {
                return PathBuf::from(top);
            }
        }
    }
    here.ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(here)
        .to_path_buf()
}

/// The tracked files (relative paths with `/`): `git ls-files`, or, without git (a source
/// tree unpacked from an archive), every file but build output and dependencies.
fn tracked_files(root: &Path) -> Vec<String> {
    let git = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output();
    if let Ok(out) = git {
        if out.status.success() {
            return out
                .stdout
                .split(|b| *b == 0)
                .filter(|p| !p.is_empty())
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect();
        }
    }
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                let skipped = name.starts_with('.')
                    || matches!(
                        name.as_str(),
                        "target" | "node_modules" | "demo-data" | "dist" | "artifacts"
                    );
                if !skipped {
                    dirs.push(path);
                }
            } else if let Ok(rel) = path.strip_prefix(root) {
                files.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    files
}

/// Every reference to an outside document in `text`, as `(line, what)`.
fn outside_references(text: &str, bare_spec_allowed: bool) -> Vec<(usize, String)> {
    let line_of = |at: usize| text[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    for needle in [SHARED_DIR, FACTS_FILE] {
        for (at, _) in text.match_indices(needle) {
            found.push((line_of(at), format!("`{needle}`")));
        }
    }
    if !bare_spec_allowed {
        for (at, _) in text.match_indices(SPEC_FILE) {
            if !text[..at].ends_with(SPEC_DIR) {
                found.push((
                    line_of(at),
                    format!("`{SPEC_FILE}` that is not `{SPEC_DIR}{SPEC_FILE}`"),
                ));
            }
        }
    }
    found
}

#[test]
fn no_tracked_file_refers_to_documents_outside_the_repository() {
    let root = repository_root();
    let files = tracked_files(&root);
    assert!(
        files.iter().any(|f| f == "docs/SPEC.md") && files.iter().any(|f| f == "docs/crm.md"),
        "docs/SPEC.md and docs/crm.md must be in the repository (looked in {})",
        root.display()
    );
    for (allowed, why) in BARE_SPEC_ALLOWED {
        assert!(
            files.iter().any(|f| f == allowed),
            "{allowed} is allowed a bare spec reference ({why}) but is not in the repository: \
             drop it from BARE_SPEC_ALLOWED"
        );
    }
    let mut problems = Vec::new();
    for file in &files {
        let Ok(bytes) = std::fs::read(root.join(file)) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let allowed = BARE_SPEC_ALLOWED.iter().any(|(f, _)| f == file);
        for (line, what) in outside_references(&text, allowed) {
            problems.push(format!("{file}:{line}: {what}"));
        }
    }
    assert!(
        problems.is_empty(),
        "references to documents outside the repository (the design is docs/SPEC.md, the CRM \
         facts docs/crm.md):\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_check_finds_what_it_is_for() {
    let spec = format!("see {SPEC_FILE} \"Metrics\"");
    assert_eq!(outside_references(&spec, false).len(), 1);
    assert!(outside_references(&spec, true).is_empty());
    let good = format!("see {SPEC_DIR}{SPEC_FILE} and [it](../{SPEC_DIR}{SPEC_FILE})");
    assert!(outside_references(&good, false).is_empty());
    let facts = format!("a\nfrom `{SHARED_DIR}crm/{FACTS_FILE}`");
    assert_eq!(
        outside_references(&facts, true),
        vec![
            (2, format!("`{SHARED_DIR}`")),
            (2, format!("`{FACTS_FILE}`"))
        ]
    );
}
