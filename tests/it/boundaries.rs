//! The crate's module boundaries, read from the source: every `crate::…` path names a
//! top-level module, and each module may use only the ones below it in the table of
//! ARCHITECTURE.md "Layers". Fails on an import the table does not allow, on any cycle
//! between top-level modules, and on SQL outside the store. The domain and the store are
//! crates of their own (crates/leadgate-domain, crates/leadgate-store): Cargo keeps them
//! from importing anything above them; the domain's dependency list is checked here
//! against data-and-text crates, and every workspace manifest for who depends on sqlx. And the timeline's
//! kinds: the migrations' SQL writes only `EventKind`s, and every one is written somewhere.

use leadgate::domain::EventKind;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module → the modules it may use (besides itself). Lower layers first.
/// `domain` and `store` are crates of their own (`leadgate::domain`, `leadgate::store`):
/// Cargo keeps them from importing anything above them.
const ALLOWED: &[(&str, &[&str])] = &[
    ("supervise", &[]),
    ("spool", &[]),
    ("crm", &["domain", "store"]),
    ("config", &["domain", "crm"]),
    ("metrics", &["domain", "store"]),
    ("report", &["domain", "store"]),
    ("attempt", &["config", "crm", "domain", "store"]),
    ("turns", &["domain", "store"]),
    (
        "reconcile",
        &[
            "attempt",
            "config",
            "crm",
            "domain",
            "store",
            "supervise",
            "turns",
        ],
    ),
    (
        "worker",
        &[
            "attempt",
            "config",
            "crm",
            "domain",
            "reconcile",
            "store",
            "supervise",
            "turns",
        ],
    ),
    (
        "intake",
        &["config", "crm", "domain", "metrics", "spool", "store"],
    ),
    (
        "pull",
        &["config", "domain", "intake", "store", "supervise"],
    ),
    (
        "redeliver",
        &["config", "domain", "intake", "store", "supervise"],
    ),
    ("alerts", &["config", "domain", "store", "supervise"]),
    ("feed", &["alerts", "config", "domain", "store"]),
    ("diagnose", &["crm", "domain", "store"]),
    ("tenants", &["config", "crm", "domain", "store"]),
    (
        "fleet",
        &[
            "alerts",
            "config",
            "crm",
            "domain",
            "intake",
            "pull",
            "redeliver",
            "store",
            "supervise",
            "tenants",
            "turns",
            "worker",
        ],
    ),
    ("console_web", &["config", "domain", "store", "supervise"]),
    (
        "app",
        &[
            "alerts",
            "config",
            "console_web",
            "crm",
            "domain",
            "feed",
            "fleet",
            "intake",
            "metrics",
            "pull",
            "redeliver",
            "spool",
            "store",
            "supervise",
            "worker",
        ],
    ),
    (
        "cli",
        &[
            "app",
            "config",
            "console_web",
            "crm",
            "diagnose",
            "domain",
            "feed",
            "intake",
            "metrics",
            "report",
            "store",
            "tenants",
        ],
    ),
];

/// The workspace crates whose `[dependencies]` may name `sqlx`: the store, and the test kit
/// for its scratch databases. Every other crate reaches the database through the store.
const SQL_CRATES: &[&str] = &["crates/leadgate-store", "crates/leadgate-testkit"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file belongs to: `src/intake/sources.rs` → `intake`, `src/cli.rs` → `cli`.
fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// The source without its unit tests (`#[cfg(test)]` and everything after it: the
/// crate keeps test modules at the end of a file) and without comments.
fn product_code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every top-level module named by a `crate::` path, including grouped imports
/// (`use crate::{a::b, c};`) and macro paths (`$crate::x`).
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `leadgate_crate::`, not ours
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names in the group: split at depth-0 commas.
            let mut depth = 0;
            let mut start = 0;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        found.insert(ident(group[start..j].trim()));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.insert(ident(group[start..j].trim()));
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let module = top_module(&src, &file);
        if matches!(module.as_str(), "lib" | "main") {
            continue;
        }
        let code = product_code(&std::fs::read_to_string(&file).unwrap());
        let uses = edges.entry(module.clone()).or_default();
        for used in crate_paths(&code) {
            if used != module {
                uses.insert(used);
            }
        }
    }
    edges
}

#[test]
fn every_module_imports_only_what_its_layer_allows() {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(m, deps)| (*m, deps.iter().copied().collect()))
        .collect();
    let edges = graph();
    assert!(
        edges.contains_key("intake") && edges.contains_key("worker"),
        "{edges:?}"
    );
    let mut wrong = vec![];
    for (module, uses) in &edges {
        let Some(ok) = allowed.get(module.as_str()) else {
            wrong.push(format!(
                "`{module}` is not in the layer table (tests/it/boundaries.rs)"
            ));
            continue;
        };
        for used in uses {
            if !ok.contains(used.as_str()) {
                wrong.push(format!("`{module}` imports `{used}`"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports across the boundaries:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_cycles_between_top_level_modules() {
    let edges = graph();
    // Depth-first search with colours: grey = on the current path.
    fn visit<'a>(
        m: &'a str,
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        colour: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match colour.get(m) {
            Some(2) => return None,
            Some(1) => {
                let from = path.iter().position(|p| *p == m).unwrap();
                let mut cycle: Vec<String> = path[from..].iter().map(|s| s.to_string()).collect();
                cycle.push(m.to_owned());
                return Some(cycle);
            }
            _ => {}
        }
        colour.insert(m, 1);
        path.push(m);
        for next in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, edges, colour, path) {
                return Some(c);
            }
        }
        path.pop();
        colour.insert(m, 2);
        None
    }
    let mut colour = BTreeMap::new();
    for m in edges.keys() {
        if let Some(cycle) = visit(m, &edges, &mut colour, &mut vec![]) {
            panic!("import cycle: {}", cycle.join(" → "));
        }
    }
}

#[test]
fn only_the_store_speaks_sql() {
    // No source file of the product crate names sqlx (its `store` is leadgate-store)...
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    let speakers: Vec<String> = files
        .iter()
        .filter(|f| product_code(&std::fs::read_to_string(f).unwrap()).contains("sqlx"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        speakers.is_empty(),
        "sqlx used outside the store: {speakers:?}"
    );
    // ...and Cargo keeps it so: only the store and the test kit depend on sqlx.
    let wrong = sql_dependents(&workspace_manifests());
    assert!(
        wrong.is_empty(),
        "these crates depend on sqlx; only {SQL_CRATES:?} may (tests/it/boundaries.rs): {wrong:?}"
    );
}

/// Every workspace member's directory (relative to the root) and its manifest's text.
fn workspace_manifests() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let top: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let members = top["workspace"]["members"].as_array().unwrap();
    assert!(members.len() >= 6, "{members:?}");
    std::iter::once(".".to_owned())
        .chain(members.iter().map(|m| m.as_str().unwrap().to_owned()))
        .map(|dir| {
            let text = std::fs::read_to_string(root.join(&dir).join("Cargo.toml")).unwrap();
            (dir, text)
        })
        .collect()
}

/// The members outside `SQL_CRATES` whose product dependencies (`[dependencies]`, also
/// per target, and `[build-dependencies]`) name sqlx. Dev-dependencies may: tests poke the
/// database.
fn sql_dependents(manifests: &[(String, String)]) -> Vec<String> {
    fn names_sqlx(t: &toml::Table) -> bool {
        ["dependencies", "build-dependencies"]
            .iter()
            .filter_map(|k| t.get(*k).and_then(|d| d.as_table()))
            .any(|deps| deps.contains_key("sqlx"))
    }
    manifests
        .iter()
        .filter(|(dir, _)| !SQL_CRATES.contains(&dir.as_str()))
        .filter(|(_, text)| {
            let m: toml::Table = text.parse().expect("a Cargo.toml");
            names_sqlx(&m)
                || m.get("target")
                    .and_then(|t| t.as_table())
                    .is_some_and(|targets| {
                        targets
                            .values()
                            .filter_map(|t| t.as_table())
                            .any(names_sqlx)
                    })
        })
        .map(|(dir, _)| dir.clone())
        .collect()
}

#[test]
fn the_sql_check_catches_sqlx_in_another_crate() {
    let manifests = [
        (
            ".".to_owned(),
            "[dependencies]\nserde = \"1\"\n[dev-dependencies]\nsqlx = \"0.8\"\n".to_owned(),
        ),
        (
            "crates/leadgate-store".to_owned(),
            "[dependencies]\nsqlx = \"0.8\"\n".to_owned(),
        ),
        (
            "src-tauri".to_owned(),
            "[target.'cfg(unix)'.dependencies]\nsqlx = \"0.8\"\n".to_owned(),
        ),
        (
            "crates/leadgate-console-model".to_owned(),
            "[build-dependencies]\nsqlx = \"0.8\"\n".to_owned(),
        ),
    ];
    assert_eq!(
        sql_dependents(&manifests),
        ["src-tauri", "crates/leadgate-console-model"]
    );
}

/// What the domain crate may depend on: data and text, no runtime, network, database or
/// file system. `rand` is the backoff's jitter draw.
const DOMAIN_DEPENDENCIES: &[&str] = &[
    "chrono",
    "hex",
    "humantime",
    "humantime-serde",
    "phonenumber",
    "rand",
    "serde",
    "serde_json",
    "serde_json_canonicalizer",
    "sha2",
    "thiserror",
    // the saved diagnosis report's TypeScript twin for the console (feature `ts`)
    "ts-rs",
    // schema description for the OpenAPI document (feature `openapi`)
    "utoipa",
];

/// Names of the `[dependencies]` of a crate's manifest, wrong ones first.
fn unlisted_dependencies(manifest: &str, allowed: &[&str]) -> Vec<String> {
    let manifest: toml::Table = manifest.parse().expect("a Cargo.toml");
    manifest
        .get("dependencies")
        .and_then(|d| d.as_table())
        .map(|deps| {
            deps.keys()
                .filter(|name| !allowed.contains(&name.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_domain_crate_depends_on_data_and_text_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/leadgate-domain");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let wrong = unlisted_dependencies(&manifest, DOMAIN_DEPENDENCIES);
    assert!(
        wrong.is_empty(),
        "the domain crate depends on {wrong:?}: it does no I/O (tests/it/boundaries.rs)"
    );
    // And the standard library's I/O stays out of it too.
    let mut files = vec![];
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 10, "{files:?}");
    let io: Vec<String> = files
        .iter()
        .filter(|f| {
            let code = product_code(&std::fs::read_to_string(f).unwrap());
            [
                "std::fs",
                "std::net",
                "std::process",
                "std::io",
                "std::env",
                "std::thread",
            ]
            .iter()
            .any(|m| code.contains(m))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(io.is_empty(), "I/O in the domain: {io:?}");
}

#[test]
fn the_dependency_check_catches_a_runtime_in_the_domain() {
    let manifest = "[package]\nname = \"d\"\n[dependencies]\nserde = \"1\"\ntokio = \"1\"\n";
    assert_eq!(
        unlisted_dependencies(manifest, DOMAIN_DEPENDENCIES),
        ["tokio"]
    );
}

#[test]
fn the_path_reader_sees_grouped_and_macro_imports() {
    let code =
        "use crate::{a::b, c, d::{e, f}};\nlet x = $crate::g::h;\nuse crate::i;\nmy_crate::j";
    let found: Vec<String> = crate_paths(code).into_iter().collect();
    assert_eq!(found, ["a", "c", "d", "g", "i"]);
}

/// Splits `a, f(b, c), 'x, y'` at its top-level commas, up to the `)` that closes it.
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quoted) = (vec![], String::new(), 0i32, false);
    for ch in s.chars() {
        if ch == '\'' {
            quoted = !quoted;
        }
        if !quoted {
            match ch {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth < 0 {
                        break;
                    }
                }
                ',' if depth == 0 => {
                    out.push(cur.trim().to_owned());
                    cur.clear();
                    continue;
                }
                _ => {}
            }
        }
        cur.push(ch);
    }
    out.push(cur.trim().to_owned());
    out
}

/// The kind of every `insert into timeline (…) values (…)` / `… select …` in `sql`, and
/// the values that are not a literal (which the check cannot read).
fn sql_kinds(sql: &str) -> (Vec<String>, Vec<String>) {
    let lower = sql.to_lowercase();
    let (mut kinds, mut unreadable) = (vec![], vec![]);
    let mut from = 0;
    while let Some(at) = lower[from..].find("insert into timeline") {
        let start = from + at + "insert into timeline".len();
        from = start;
        let rest = &lower[start..];
        let Some(open) = rest.find('(') else { break };
        let Some(close) = rest.find(')') else { break };
        let columns: Vec<&str> = rest[open + 1..close].split(',').map(str::trim).collect();
        let after = rest[close + 1..].trim_start();
        let values = if let Some(v) = after.strip_prefix("values") {
            v.trim_start().strip_prefix('(').unwrap_or(v)
        } else if let Some(v) = after.strip_prefix("select") {
            // the select list ends at its `from` (or the statement's end)
            let end = v
                .match_indices("from")
                .find(|(i, _)| v[..*i].ends_with(char::is_whitespace))
                .map(|(i, _)| i)
                .or_else(|| v.find(';'))
                .unwrap_or(v.len());
            &v[..end]
        } else {
            unreadable.push(after.chars().take(40).collect());
            continue;
        };
        let values = split_top(values);
        let value = columns
            .iter()
            .position(|c| *c == "kind")
            .and_then(|i| values.get(i))
            .cloned()
            .unwrap_or_default();
        match value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
            Some(kind) => kinds.push(kind.to_owned()),
            None => unreadable.push(value),
        }
    }
    (kinds, unreadable)
}

fn migrations_kinds() -> (BTreeSet<String>, Vec<String>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/leadgate-store/migrations");
    let (mut kinds, mut unreadable) = (BTreeSet::new(), vec![]);
    for backend in ["sqlite", "postgres"] {
        for f in std::fs::read_dir(dir.join(backend)).unwrap() {
            let (k, u) = sql_kinds(&std::fs::read_to_string(f.unwrap().path()).unwrap());
            kinds.extend(k);
            unreadable.extend(u);
        }
    }
    (kinds, unreadable)
}

/// `crm_update_request` → `CrmUpdateRequest`.
fn variant(kind: EventKind) -> String {
    kind.as_str()
        .split('_')
        .map(|w| w[..1].to_uppercase() + &w[1..])
        .collect()
}

#[test]
fn the_migrations_write_only_the_event_kinds_rust_knows() {
    let (kinds, unreadable) = migrations_kinds();
    assert_eq!(
        unreadable,
        Vec::<String>::new(),
        "kinds the check cannot read"
    );
    // what the check must see, or it is blind
    assert!(
        kinds.contains("delivery") && kinds.contains("review_superseded"),
        "{kinds:?}"
    );
    let unknown: Vec<&String> = kinds
        .iter()
        .filter(|k| k.parse::<EventKind>().is_err())
        .collect();
    assert!(
        unknown.is_empty(),
        "migrations write kinds EventKind lacks: {unknown:?}"
    );
}

#[test]
fn every_event_kind_is_written_somewhere() {
    let mut files = vec![];
    for dir in [
        "src",
        "crates/leadgate-store/src",
        "crates/leadgate-console-model/src",
    ] {
        rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), &mut files);
    }
    let code: String = files
        .iter()
        .map(|f| product_code(&std::fs::read_to_string(f).unwrap()))
        .collect();
    let (in_sql, _) = migrations_kinds();
    let nowhere: Vec<&str> = EventKind::ALL
        .iter()
        .filter(|k| !code.contains(&format!("EventKind::{}", variant(**k))))
        .filter(|k| !in_sql.contains(k.as_str()))
        .map(|k| k.as_str())
        .collect();
    assert!(nowhere.is_empty(), "kinds nothing writes: {nowhere:?}");
}

#[test]
fn the_kinds_check_reads_values_and_selects() {
    let sql = "insert into timeline (operation_id, at, kind, actor) values ($1, f(a, b), 'delivery', 'x');\n\
               INSERT INTO timeline (operation_id, kind) select o.id, 'purged' from o;\n\
               insert into timeline (operation_id, kind) values ($1, v_kind);";
    assert_eq!(
        sql_kinds(sql),
        (
            vec!["delivery".to_owned(), "purged".to_owned()],
            vec!["v_kind".to_owned()]
        )
    );
}
