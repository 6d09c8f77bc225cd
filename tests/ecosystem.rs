//! What ships around the gateway, tested against the real thing (issue 21, parts 2 and 4).
//!
//! - `examples/grafana/`: the Grafana dashboard is valid JSON of the expected shape, has the
//!   console dashboard's panels, and every metric and label its PromQL uses — and every one
//!   the Prometheus alert rules use — is in the `/metrics` of a real gateway driven through
//!   a retry, a duplicate, a conflict, a paused connector and an unreachable CRM; every
//!   exported metric is on the dashboard. promtool (Debian's, unpacked by
//!   `scripts/install-ecosystem-deps.sh`) checks the rules and the dashboard's expressions,
//!   runs the rules' unit tests (`leadgate-alerts.test.yml`), and runs the rules over the
//!   series that gateway exported: the paused and the unreachable alert fire on them, no
//!   other does.
//! - `packaging/deb/` (`scripts/package-deb.sh`, `make package`): the .deb, built from this
//!   test's debug binary, is installed with `dpkg -i`, its unit checked with
//!   `systemd-analyze verify`, the installed binary run as the unit's user with the unit's
//!   command line and the shipped configuration (`migrate`, then `serve` answering
//!   `/healthz` and `/metrics`), reinstalled over a changed conffile, removed with `dpkg -r`
//!   and purged, leaving nothing behind.
//!
//! A tool that is missing fails the test with what to run (`make test` installs them);
//! `LEADGATE_SKIP_ECOSYSTEM_TOOLS=1` skips a test out loud, except under `CI=true`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use leadgate_fakes::bitrix24::Fault;
use leadgate_testkit::deb::{dpkg, MachineLock};
use leadgate_testkit::gateway::{lead, Gateway, CREATE};
use leadgate_testkit::process::{free_port, wait_healthy, Process};
use leadgate_testkit::{Backend, TestDb};
use serde_json::{json, Value};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn grafana(file: &str) -> PathBuf {
    Path::new(ROOT).join("examples/grafana").join(file)
}

/// `Ok` when the tools are there; otherwise the test fails with `why`, or — off CI, with
/// `LEADGATE_SKIP_ECOSYSTEM_TOOLS=1` — is skipped saying so.
fn tools_or_skip(test: &str, missing: &[String]) -> bool {
    if missing.is_empty() {
        return true;
    }
    let why = format!(
        "{test}: missing {}; `make test` installs it (scripts/install-ecosystem-deps.sh)",
        missing.join(", ")
    );
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if !ci && std::env::var("LEADGATE_SKIP_ECOSYSTEM_TOOLS").as_deref() == Ok("1") {
        eprintln!("SKIPPED (LEADGATE_SKIP_ECOSYSTEM_TOOLS=1): {why}");
        return false;
    }
    panic!("{why}");
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} did not start: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).unwrap()
}

fn promtool() -> Option<PathBuf> {
    let out = Command::new(Path::new(ROOT).join("scripts/install-ecosystem-deps.sh"))
        .arg("--promtool")
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    Command::new(&path)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
        .then_some(path)
}

// ---------------------------------------------------------------------------------------
// PromQL, read as far as these files need: metric names, label names, function names.

/// What an expression refers to.
#[derive(Debug, Default)]
struct Refs {
    metrics: BTreeSet<String>,
    labels: BTreeSet<String>,
    functions: BTreeSet<String>,
}

const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset"];
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
/// PromQL's aggregation operators and the functions a dashboard of counters and gauges
/// may reasonably use; anything else is a typo.
const FUNCTIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "topk",
    "bottomk",
    "quantile",
    "stddev",
    "count_values",
    "abs",
    "absent",
    "ceil",
    "clamp",
    "clamp_min",
    "clamp_max",
    "delta",
    "deriv",
    "floor",
    "idelta",
    "increase",
    "irate",
    "label_replace",
    "rate",
    "resets",
    "round",
    "scalar",
    "sort",
    "sort_desc",
    "time",
    "timestamp",
    "vector",
    "avg_over_time",
    "max_over_time",
    "min_over_time",
    "sum_over_time",
    "last_over_time",
    "changes",
];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The metric, label and function names `expr` uses.
fn promql_refs(expr: &str) -> Refs {
    let chars: Vec<char> = expr.chars().collect();
    let mut refs = Refs::default();
    let mut i = 0;
    let ident_at = |i: usize| -> (String, usize) {
        let mut j = i;
        while j < chars.len() && is_ident(chars[j]) {
            j += 1;
        }
        (chars[i..j].iter().collect(), j)
    };
    let next_non_space = |mut j: usize| -> Option<(usize, char)> {
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        chars.get(j).map(|c| (j, *c))
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != c {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            i = j + 1;
        } else if c == '[' {
            // A range or subquery duration (Grafana's $__interval included).
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c == '{' {
            // Label matchers: name op "value", …
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '}' {
                if chars[j] == '"' {
                    j += 1;
                    while j < chars.len() && chars[j] != '"' {
                        j += if chars[j] == '\\' { 2 } else { 1 };
                    }
                    j += 1;
                } else if is_ident_start(chars[j]) {
                    let (name, end) = ident_at(j);
                    refs.labels.insert(name);
                    j = end;
                } else {
                    j += 1;
                }
            }
            i = j + 1;
        } else if c == '$' {
            // A Grafana variable.
            i += 1;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            // A number (or a duration after `offset`).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if is_ident_start(c) {
            let (name, end) = ident_at(i);
            i = end;
            let next = next_non_space(end);
            if GROUPING.contains(&name.as_str()) {
                if let Some((open, '(')) = next {
                    let close = chars[open..].iter().position(|&c| c == ')').unwrap() + open;
                    let list: String = chars[open + 1..close].iter().collect();
                    for label in list.split(',').map(str::trim).filter(|l| !l.is_empty()) {
                        refs.labels.insert(label.to_owned());
                    }
                    i = close + 1;
                }
            } else if KEYWORDS.contains(&name.as_str()) {
            } else if matches!(next, Some((_, '(')))
                || next.is_some_and(|(j, c)| {
                    // An aggregation with its grouping first: `sum by (a) (…)`.
                    is_ident_start(c) && ["by", "without"].contains(&ident_at(j).0.as_str())
                })
            {
                refs.functions.insert(name);
            } else {
                refs.metrics.insert(name);
            }
        } else {
            i += 1;
        }
    }
    refs
}

#[test]
fn promql_refs_reads_names_labels_and_functions() {
    let r = promql_refs(
        r#"sum by (outcome) (max by (source, outcome) (increase(leadgate_deliveries_total{job="$job", source=~"a|b"}[$__interval]))) > bool 0 or vector(0)"#,
    );
    assert_eq!(r.metrics, ["leadgate_deliveries_total".to_owned()].into());
    assert_eq!(
        r.labels,
        ["job", "outcome", "source"].map(str::to_owned).into()
    );
    assert_eq!(
        r.functions,
        ["increase", "max", "sum", "vector"]
            .map(str::to_owned)
            .into()
    );
    let r = promql_refs("max by (job) (a_total) > max(b) * 1000 offset 5m");
    assert_eq!(r.metrics, ["a_total", "b"].map(str::to_owned).into());
}

// ---------------------------------------------------------------------------------------
// The dashboard and the rules.

/// Every expression of the dashboard: (panel title, refId, expr).
fn dashboard_exprs(dash: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                p["title"].as_str().unwrap().to_owned(),
                t["refId"].as_str().unwrap().to_owned(),
                t["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    // The job variable's query.
    let job = &dash["templating"]["list"][1];
    let q = job["definition"].as_str().unwrap();
    let inner = q
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(", job)"))
        .unwrap_or_else(|| panic!("the job variable's query: {q}"));
    out.push(("$job".into(), "job".into(), inner.to_owned()));
    // The tenant variable's query.
    let tenant = &dash["templating"]["list"][2];
    let q = tenant["definition"].as_str().unwrap();
    let inner = q
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(", tenant)"))
        .unwrap_or_else(|| panic!("the tenant variable's query: {q}"));
    out.push(("$tenant".into(), "tenant".into(), inner.to_owned()));
    out
}

/// Every rule of the alert rules file: (alert, expr). Read line by line: the file keeps
/// each `expr:` on one line (the test says so when it does not).
fn rule_exprs(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut alert = None;
    for line in text.lines().map(str::trim) {
        if let Some(a) = line.strip_prefix("- alert:") {
            alert = Some(a.trim().to_owned());
        } else if let Some(e) = line.strip_prefix("expr:") {
            let e = e.trim();
            assert!(
                !e.is_empty() && !e.starts_with('|') && !e.starts_with('>'),
                "keep each expr on its line: {line}"
            );
            out.push((
                alert.take().expect("an expr before its alert"),
                e.to_owned(),
            ));
        }
    }
    out
}

/// The Grafana variables as Prometheus would get them from a dashboard on a 24 h range.
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__interval", "5m")
        .replace("$__range", "24h")
        .replace("$job", "leadgate")
        // All tenants: also the series of a deployment without tenants, which have no
        // `tenant` label.
        .replace("$tenant", ".*")
}

#[test]
fn the_dashboard_is_grafana_json_with_the_consoles_panels() {
    let text = std::fs::read_to_string(grafana("leadgate.json")).unwrap();
    let dash: Value = serde_json::from_str(&text).expect("leadgate.json is JSON");
    assert_eq!(dash["uid"], "leadgate");
    assert_eq!(dash["title"], "Leadgate");
    assert!(dash["schemaVersion"].as_i64().unwrap() >= 36, "Grafana 9+");
    assert!(
        dash.get("id").is_none_or(Value::is_null),
        "no instance id in an export to share"
    );
    let vars = dash["templating"]["list"].as_array().unwrap();
    assert_eq!(vars[0]["name"], "datasource");
    assert_eq!(vars[0]["type"], "datasource");
    assert_eq!(vars[0]["query"], "prometheus");
    assert_eq!(vars[1]["name"], "job");
    assert_eq!(vars[1]["type"], "query");
    // Fleet mode's tenants: All by default, matching the unlabelled series of a
    // deployment without tenants too.
    assert_eq!(vars[2]["name"], "tenant");
    assert_eq!(vars[2]["type"], "query");
    assert_eq!(vars[2]["includeAll"], true);
    assert_eq!(vars[2]["allValue"], ".*");

    let panels = dash["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    let mut cells: BTreeMap<(i64, i64), String> = BTreeMap::new();
    for p in panels {
        let title = p["title"].as_str().expect("every panel has a title");
        assert!(
            ids.insert(p["id"].as_i64().unwrap()),
            "panel id twice: {title}"
        );
        let ty = p["type"].as_str().unwrap();
        assert!(
            ["row", "stat", "timeseries", "state-timeline"].contains(&ty),
            "{title}: panel type {ty}"
        );
        let g = &p["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_i64().unwrap(),
            g["y"].as_i64().unwrap(),
            g["w"].as_i64().unwrap(),
            g["h"].as_i64().unwrap(),
        );
        assert!(
            x >= 0 && w > 0 && h > 0 && x + w <= 24,
            "{title}: gridPos {g}"
        );
        for cx in x..x + w {
            for cy in y..y + h {
                if let Some(other) = cells.insert((cx, cy), title.to_owned()) {
                    panic!("{title} overlaps {other} at ({cx}, {cy})");
                }
            }
        }
        if ty == "row" {
            continue;
        }
        assert!(
            p["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{title}: a description says what the figure is"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(
                refs.insert(t["refId"].as_str().unwrap()),
                "{title}: refId twice"
            );
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            let expr = t["expr"].as_str().unwrap();
            // This process's own figures (its refusals, which come before any tenant is known;
            // its database; its spool, every tenant's) have no tenant.
            let own = [
                "leadgate_refused_requests",
                "leadgate_database_up",
                "leadgate_spool_",
            ];
            let selector = if own.iter().any(|m| expr.contains(m)) {
                "{job=\"$job\"}"
            } else {
                "{job=\"$job\",tenant=~\"$tenant\"}"
            };
            assert!(
                expr.contains(selector),
                "{title}: every query is of the chosen job and tenants: {expr}"
            );
        }
    }
    // The console's dashboard (ui/src/components/Dashboard.svelte): its cards, the CRM
    // unreachable banner, its four charts; and the connectors' state.
    let titles: BTreeSet<&str> = panels
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    for expected in [
        "Unique operations",
        "CRM entities created",
        "Duplicates absorbed",
        "Open review cases",
        "Mean time to resolve",
        "Stale in progress",
        "Unprocessed",
        "Lost",
        "Unreconstructable results",
        "Paused connectors",
        "CRM unreachable since",
        "Connector health",
        "Flow",
        "Retries by error class",
        "Review cases",
    ] {
        assert!(
            titles.contains(expected),
            "no panel {expected:?}: {titles:?}"
        );
    }
    for (title, _, expr) in dashboard_exprs(&dash) {
        let r = promql_refs(&expr);
        assert!(!r.metrics.is_empty(), "{title}: no metric in {expr}");
        for f in &r.functions {
            assert!(
                FUNCTIONS.contains(&f.as_str()),
                "{title}: unknown function {f} in {expr}"
            );
        }
    }
}

/// A scrape: sample names and the label names each carries; and the metric families
/// announced by `# TYPE` (counters as `<name>_total`).
struct Scrape {
    samples: BTreeMap<String, BTreeSet<String>>,
    families: BTreeSet<String>,
    text: String,
}

impl Scrape {
    fn parse(text: String) -> Scrape {
        let parsed = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
            .expect("valid Prometheus text");
        let mut samples: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for s in &parsed.samples {
            samples
                .entry(s.metric.clone())
                .or_default()
                .extend(s.labels.keys().cloned());
        }
        let families = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let mut w = l.split_whitespace();
                let (name, ty) = (w.next().unwrap(), w.next().unwrap());
                if ty == "counter" {
                    format!("{name}_total")
                } else {
                    name.to_owned()
                }
            })
            .collect();
        Scrape {
            samples,
            families,
            text,
        }
    }

    /// Each series as `name{labels}` → value, for promtool's input series.
    fn series(&self) -> BTreeMap<String, f64> {
        let parsed =
            prometheus_parse::Scrape::parse(self.text.lines().map(|l| Ok(l.to_owned()))).unwrap();
        parsed
            .samples
            .into_iter()
            .map(|s| {
                let mut labels: Vec<String> =
                    s.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
                labels.sort();
                let v = match s.value {
                    prometheus_parse::Value::Counter(v)
                    | prometheus_parse::Value::Gauge(v)
                    | prometheus_parse::Value::Untyped(v) => v,
                    other => panic!("unexpected {other:?}"),
                };
                (format!("{}{{{}}}", s.metric, labels.join(",")), v)
            })
            .collect()
    }
}

async fn scrape(gw: &Gateway) -> Scrape {
    let res = gw.get("/metrics").send().await.unwrap();
    assert_eq!(res.status(), 200);
    Scrape::parse(res.text().await.unwrap())
}

async fn wait_connector(
    gw: &Gateway,
    what: &str,
    pred: impl Fn(&leadgate::store::Connector) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let connectors = gw.store().connectors().await.unwrap();
        if connectors.iter().any(&pred) {
            return;
        }
        assert!(Instant::now() < deadline, "never {what}: {connectors:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A real gateway through a retry, a duplicate, a conflict, a rejected delivery and a
/// paused connector (scrape A), then, resumed, an unreachable CRM (scrape B).
async fn two_scrapes() -> (Scrape, Scrape) {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    // A spool, so that its figures are exported too.
    let spool = tempfile::tempdir().unwrap();
    let gw = Gateway::start_extended(
        &db,
        &format!(
            "[outage]\nafter_failures = 2\nprobes = [\"1h\"]\nlimit = \"24h\"\n[spool]\ndir = {:?}\n",
            spool.path().display().to_string()
        ),
    )
    .await;
    gw.fake.push_fault(
        CREATE,
        Fault::RateLimit {
            retry_after_secs: None,
        },
        1,
    );
    gw.post_json("site", &lead("g1")).await;
    gw.wait_status("site:g1", "completed").await;
    // What a contact-and-deal create commits per step (`WorkQueue::record_step`, counted by
    // migration 0016's trigger), so `leadgate_crm_steps_total` has a sample; the steps
    // themselves are tests/it/steps.rs's.
    let g1 = leadgate::domain::OperationId::new("site", "g1").unwrap();
    gw.store()
        .note(
            &g1,
            "worker",
            leadgate::store::NewEvent::new(
                leadgate::domain::EventKind::CrmStep,
                json!({"step": "contact", "entity": "contact", "crm_id": "70", "how": "created"}),
            ),
            leadgate::store::local_now(),
        )
        .await
        .unwrap();
    gw.post_json("site", &lead("g1")).await;
    let mut changed = lead("g1");
    changed["name"] = json!("Petr");
    gw.post_json("site", &changed).await;
    gw.post_json("site", &json!({"no": "key"})).await;
    gw.fake.push_fault(CREATE, Fault::ExpiredToken, 1000);
    gw.post_json("site", &lead("g2")).await;
    gw.wait_paused_and_idle("bitrix24").await;
    let a = scrape(&gw).await;

    gw.fake.reset();
    // Down for every method: the worker sends due leads together (`batch`) and looks keys
    // up (`crm.lead.list`).
    gw.fake.push_fault(
        "*",
        Fault::Error {
            status: 503,
            error: String::new(),
            error_description: "Service Unavailable".into(),
            after_execute: false,
        },
        u32::MAX,
    );
    gw.post_json("site", &lead("g3")).await;
    assert!(gw
        .store()
        .resume_connector("bitrix24", "test", leadgate::store::local_now())
        .await
        .unwrap());
    wait_connector(&gw, "unreachable", |c| {
        c.name == "bitrix24" && c.unreachable_since.is_some()
    })
    .await;
    let b = scrape(&gw).await;
    gw.stop().await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alert_rules_query_what_a_real_gateway_exports() {
    let started = Instant::now();
    let promtool = promtool();
    if !tools_or_skip(
        "dashboard and alert rules",
        &promtool
            .is_none()
            .then(|| "promtool".to_owned())
            .into_iter()
            .collect::<Vec<_>>(),
    ) {
        return;
    }
    let promtool = promtool.unwrap();
    let (a, b) = two_scrapes().await;
    assert!(
        a.text
            .contains("leadgate_connector_paused{connector=\"bitrix24\"} 1"),
        "{}",
        a.text
    );
    let since: f64 = b
        .text
        .lines()
        .find_map(|l| {
            l.strip_prefix("leadgate_connector_unreachable_since_seconds{connector=\"bitrix24\"} ")
        })
        .unwrap_or_else(|| panic!("no unreachable gauge in\n{}", b.text))
        .parse()
        .unwrap();
    assert!(since > 1.7e9, "unreachable since {since}");
    // Between them the two scrapes have a sample of every family, so a name that exists
    // only as `# TYPE` is caught too.
    let mut samples = a.samples.clone();
    for (k, v) in &b.samples {
        samples
            .entry(k.clone())
            .or_default()
            .extend(v.iter().cloned());
    }
    for f in a.families.iter().chain(&b.families) {
        assert!(
            samples.contains_key(f),
            "no sample of {f}: the scenario misses it"
        );
    }

    let dash: Value =
        serde_json::from_str(&std::fs::read_to_string(grafana("leadgate.json")).unwrap()).unwrap();
    let rules_text = std::fs::read_to_string(grafana("leadgate-alerts.yml")).unwrap();
    let rules = rule_exprs(&rules_text);
    let mut uses: Vec<(String, String)> = dashboard_exprs(&dash)
        .into_iter()
        .map(|(t, r, e)| (format!("panel {t:?} {r}"), e))
        .collect();
    uses.extend(rules.iter().map(|(a, e)| (format!("alert {a}"), e.clone())));
    let mut on_dashboard = BTreeSet::new();
    for (what, expr) in &uses {
        let r = promql_refs(expr);
        // `tenant`: a fleet's gateway labels every figure with it (tests/it/fleet.rs); this
        // one serves no tenants, and `tenant=~".*"` and `by (tenant)` take its series whole.
        let mut labels: BTreeSet<&str> = ["job", "instance", "__name__", "tenant"].into();
        for m in &r.metrics {
            let have = samples
                .get(m)
                .unwrap_or_else(|| panic!("{what}: {m} is not in /metrics ({expr})"));
            labels.extend(have.iter().map(String::as_str));
            if what.starts_with("panel") {
                on_dashboard.insert(m.clone());
            }
        }
        for l in &r.labels {
            assert!(
                labels.contains(l.as_str()),
                "{what}: no label {l} on {:?} ({expr})",
                r.metrics
            );
        }
    }
    for name in samples.keys() {
        assert!(
            on_dashboard.contains(name),
            "{name} is exported but on no panel"
        );
    }
    for required in [
        "leadgate_lost",
        "leadgate_stale_in_progress",
        "leadgate_connector_paused",
        "leadgate_connector_unreachable_since_seconds",
    ] {
        assert!(
            rules
                .iter()
                .any(|(_, e)| promql_refs(e).metrics.contains(required)),
            "no alert on {required}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    // promtool parses every dashboard expression as a recording rule's.
    let mut recorded = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (what, expr)) in uses
        .iter()
        .filter(|(w, _)| w.starts_with("panel"))
        .enumerate()
    {
        recorded += &format!(
            "      # {what}\n      - record: dashboard_expr_{i}\n        expr: {}\n",
            serde_json::to_string(&substitute(expr)).unwrap()
        );
    }
    let dash_rules = dir.path().join("dashboard-rules.yml");
    std::fs::write(&dash_rules, recorded).unwrap();
    let out = stdout(
        Command::new(&promtool)
            .arg("check")
            .arg("rules")
            .arg(&dash_rules),
    );
    assert!(out.contains("SUCCESS"), "{out}");
    let out = stdout(
        Command::new(&promtool)
            .arg("check")
            .arg("rules")
            .arg(grafana("leadgate-alerts.yml")),
    );
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "{out}"
    );
    let out = stdout(
        Command::new(&promtool)
            .current_dir(grafana(""))
            .arg("test")
            .arg("rules")
            .arg("leadgate-alerts.test.yml"),
    );
    assert!(out.contains("SUCCESS"), "{out}");

    // The rules over what the gateway exported: scrape A for 10 minutes, then scrape B,
    // from two instances of one job (both report the same database's figures).
    let (sa, sb) = (a.series(), b.series());
    let keys: BTreeSet<&String> = sa.keys().chain(sb.keys()).collect();
    let mut input = String::new();
    for key in keys {
        let value =
            |m: &BTreeMap<String, f64>| m.get(key).map_or("_".to_owned(), |v| format!("{v}"));
        let (name, labels) = key.split_once('{').unwrap();
        let labels = labels.trim_end_matches('}');
        for instance in ["gw1:8080", "gw2:8080"] {
            let sep = if labels.is_empty() { "" } else { "," };
            input += &format!(
                "      - series: '{name}{{{labels}{sep}job=\"leadgate\",instance=\"{instance}\"}}'\n        values: '{}x9 {}x10'\n",
                value(&sa),
                value(&sb)
            );
        }
    }
    // Without annotations and labels: this is about which alerts fire, on which series;
    // leadgate-alerts.test.yml checks the texts.
    let mut bare = String::new();
    let mut skip_deeper_than = None;
    for line in rules_text.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(d) = skip_deeper_than {
            if line.trim().is_empty() || indent > d {
                continue;
            }
            skip_deeper_than = None;
        }
        if ["annotations:", "labels:"].contains(&line.trim()) {
            skip_deeper_than = Some(indent);
            continue;
        }
        bare += line;
        bare += "\n";
    }
    std::fs::write(dir.path().join("bare.yml"), &bare).unwrap();
    let expect = |at: &str, firing: &[(&str, &str)]| {
        let mut s = String::new();
        for (alert, _) in &rules {
            let connector = firing.iter().find(|(a, _)| a == alert).map(|(_, c)| *c);
            s += &format!(
                "      - eval_time: {at}\n        alertname: {alert}\n        exp_alerts:"
            );
            match connector {
                Some(c) => {
                    s += &format!("\n          - exp_labels: {{job: leadgate, connector: {c}}}\n")
                }
                None => s += " []\n",
            }
        }
        s
    };
    let test = format!(
        "rule_files: [bare.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{input}    alert_rule_test:\n{}{}",
        expect("8m", &[("LeadgateConnectorPaused", "bitrix24")]),
        expect("15m", &[("LeadgateCrmUnreachable", "bitrix24")]),
    );
    std::fs::write(dir.path().join("real.test.yml"), &test).unwrap();
    let out = Command::new(&promtool)
        .current_dir(dir.path())
        .args(["test", "rules", "real.test.yml"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the rules over the real scrapes:\n{}\n{}\n{test}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "dashboard: {} panels, {} queries; {} alert rules; {:.1} s",
        dash["panels"].as_array().unwrap().len(),
        uses.len() - rules.len(),
        rules.len(),
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------
// The .deb.

/// The version this test builds: a leftover of a killed run is recognised by it.
const TEST_VERSION: &str = "0.0.0~packaging-test";

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c").arg(script);
    c
}

/// `dpkg-query`'s status and version of leadgate, if dpkg knows it.
fn package_state() -> Option<(String, String)> {
    leadgate_testkit::deb::state("leadgate")
}

fn exists(path: &str) -> bool {
    Path::new(path).symlink_metadata().is_ok()
}

/// `stat`'s mode, owner and group of `path`.
fn stat(path: &str) -> String {
    stdout(Command::new("stat").args(["-c", "%a %U %G", path]))
        .trim()
        .to_owned()
}

fn purge() {
    dpkg(&["--purge", "leadgate"]);
}

/// Purges what this test installed, however it ends.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        if package_state().is_some() {
            let _ = Command::new("dpkg").args(["--purge", "leadgate"]).status();
        }
    }
}

/// The value of `key=` in the unit's [Service] section.
fn unit_value(unit: &str, key: &str) -> String {
    unit.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in the unit"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deb_installs_runs_as_its_user_and_purges_clean() {
    let started = Instant::now();
    let mut missing: Vec<String> = [
        "dpkg",
        "dpkg-deb",
        "dpkg-shlibdeps",
        "dpkg-statoverride",
        "systemd-analyze",
        "setpriv",
        "flock",
        "strip",
        "adduser",
    ]
    .iter()
    .filter(|t| {
        !sh(&format!("command -v {t}"))
            .output()
            .unwrap()
            .status
            .success()
    })
    .map(|t| t.to_string())
    .collect();
    let root = stdout(Command::new("id").arg("-u")).trim() == "0";
    if !root {
        missing.push("root (dpkg -i installs on this machine)".into());
    }
    if !tools_or_skip("the .deb", &missing) {
        return;
    }
    let _lock = MachineLock::take("/tmp/leadgate-packaging-test.lock");
    match package_state() {
        Some((_, v)) if v == TEST_VERSION => purge(), // a killed run's leftover
        Some((s, v)) => panic!(
            "leadgate {v} ({s}) is installed on this machine, not by this test: \
             it would be replaced and purged; remove it first"
        ),
        None => {}
    }
    assert!(
        !sh("getent passwd leadgate")
            .output()
            .unwrap()
            .status
            .success(),
        "a user leadgate exists without the package: this test would delete it"
    );

    // Build it from this test's debug binary, uncompressed (seconds, not minutes).
    let out_dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let deb = stdout(
        Command::new(Path::new(ROOT).join("scripts/package-deb.sh"))
            .arg("--binary")
            .arg(env!("CARGO_BIN_EXE_leadgate"))
            .args(["--version", TEST_VERSION, "--compress", "none", "--out"])
            .arg(out_dir.path()),
    );
    let deb = deb.lines().last().unwrap().trim().to_owned();
    let build_secs = t.elapsed().as_secs_f64();
    let size = std::fs::metadata(&deb).unwrap().len();
    let info = stdout(Command::new("dpkg-deb").args(["--info", &deb]));
    for field in [
        "Package: leadgate",
        &format!("Version: {TEST_VERSION}"),
        "Depends: libc6",
        "adduser",
    ] {
        assert!(info.contains(field), "{field} not in\n{info}");
    }
    let contents = stdout(Command::new("dpkg-deb").args(["--contents", &deb]));
    for path in [
        "./usr/bin/leadgate",
        "./lib/systemd/system/leadgate.service",
        "./etc/leadgate/leadgate.toml",
        "./etc/default/leadgate",
        "./usr/share/doc/leadgate/copyright",
    ] {
        assert!(contents.contains(path), "{path} not in\n{contents}");
    }
    // Install.
    let installed = Installed;
    dpkg(&["--install", &deb]);
    let (status, version) = package_state().unwrap();
    assert_eq!((status.as_str(), version.as_str()), ("ii", TEST_VERSION));
    let conffiles = stdout(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", "leadgate"]));
    for c in ["/etc/leadgate/leadgate.toml", "/etc/default/leadgate"] {
        assert!(conffiles.contains(c), "{c} is not a conffile: {conffiles}");
    }
    let passwd = stdout(&mut sh("getent passwd leadgate"));
    let fields: Vec<&str> = passwd.trim().split(':').collect();
    assert!(
        fields[2].parse::<u32>().unwrap() < 1000,
        "a system user: {passwd}"
    );
    assert_eq!(fields[5], "/var/lib/leadgate");
    assert_eq!(fields[6], "/usr/sbin/nologin");
    assert_eq!(stat("/var/lib/leadgate"), "750 leadgate leadgate");
    assert_eq!(stat("/etc/leadgate"), "750 root leadgate");
    assert_eq!(stat("/etc/leadgate/leadgate.toml"), "640 root leadgate");
    assert_eq!(stat("/etc/default/leadgate"), "600 root root");
    assert_eq!(stat("/usr/bin/leadgate"), "755 root root");

    // The unit, offline: systemd-analyze loads it as systemd would (User=, ExecStart's
    // binary, every directive) without systemd running.
    let unit_path = "/lib/systemd/system/leadgate.service";
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no", unit_path])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(verify.status.success(), "systemd-analyze verify:\n{said}");
    assert!(
        !said.contains("leadgate.service"),
        "systemd-analyze verify has something to say about the unit:\n{said}"
    );
    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager", unit_path])
        .output()
        .unwrap();
    let security = String::from_utf8_lossy(&security.stdout).into_owned();
    let exposure = security
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("systemd-analyze security said:\n{security}"))
        .to_owned();

    // The installed binary, as the unit runs it: its user, its command line, the shipped
    // configuration. On its own port, with a read token from the environment (as
    // /etc/default/leadgate would give it).
    let unit = std::fs::read_to_string(unit_path).unwrap();
    let user = unit_value(&unit, "User");
    let exec: Vec<String> = unit_value(&unit, "ExecStart")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        exec[..2],
        ["/usr/bin/leadgate".to_owned(), "serve".to_owned()]
    );
    let config = exec
        .iter()
        .skip_while(|a| *a != "--config")
        .nth(1)
        .expect("ExecStart names the configuration")
        .clone();
    assert_eq!(config, "/etc/leadgate/leadgate.toml");
    let as_user = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", &user, "--regid", &user, "--init-groups", "--"])
            .args(args)
            .current_dir("/var/lib/leadgate")
            .env_remove("LEADGATE_DATABASE_URL")
            .env("RUST_LOG", "warn");
        c
    };
    let migrated = stdout(&mut as_user(&[
        "/usr/bin/leadgate",
        "migrate",
        "--config",
        &config,
    ]));
    assert_eq!(
        stat("/var/lib/leadgate/leadgate.db")
            .split(' ')
            .collect::<Vec<_>>()[1..],
        ["leadgate", "leadgate"],
        "{migrated}"
    );
    assert_eq!(
        stat("/var/lib/leadgate/leadgate.db"),
        "600 leadgate leadgate"
    );
    let port = free_port();
    let log_path = out_dir.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let args: Vec<&str> = exec.iter().map(String::as_str).collect();
    let mut serve = Process(
        as_user(&args)
            .env("LEADGATE_LISTEN", format!("127.0.0.1:{port}"))
            .env("LEADGATE_READ_TOKEN", "packaging-test-read-token")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&base, Duration::from_secs(20), Some(&log_path)).await;
    let http = reqwest::Client::new();
    let metrics = http
        .get(format!("{base}/metrics"))
        .bearer_auth("packaging-test-read-token")
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics
        .text()
        .await
        .unwrap()
        .contains("leadgate_operations_total 0"));
    let closed = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(closed.status(), 401, "no token, no metrics");
    // The shipped configuration has no sources: intake accepts nothing.
    let intake = http
        .post(format!("{base}/v1/intake/site"))
        .json(&json!({"submission_id": "1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(intake.status(), 404);
    // SIGTERM, as systemctl stop sends it: a clean exit.
    run(Command::new("kill").args(["-TERM", &serve.0.id().to_string()]));
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(s) = serve.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        exit.success(),
        "serve exited with {exit} on SIGTERM: {}",
        std::fs::read_to_string(&log_path).unwrap()
    );

    // An upgrade (the same package again) keeps a changed configuration and its rights.
    std::fs::OpenOptions::new()
        .append(true)
        .open("/etc/leadgate/leadgate.toml")
        .unwrap()
        .write_all(b"# changed by the operator\n")
        .unwrap();
    dpkg(&["--install", "--force-confold", &deb]);
    assert!(std::fs::read_to_string("/etc/leadgate/leadgate.toml")
        .unwrap()
        .ends_with("# changed by the operator\n"));
    assert_eq!(stat("/etc/leadgate/leadgate.toml"), "640 root leadgate");
    assert!(
        exists("/var/lib/leadgate/leadgate.db"),
        "an upgrade keeps the database"
    );

    // dpkg -r: the program goes, the configuration and the database stay.
    dpkg(&["--remove", "leadgate"]);
    assert_eq!(package_state().unwrap().0, "rc");
    for gone in ["/usr/bin/leadgate", unit_path] {
        assert!(!exists(gone), "{gone} is still there after dpkg -r");
    }
    for kept in [
        "/etc/leadgate/leadgate.toml",
        "/var/lib/leadgate/leadgate.db",
    ] {
        assert!(exists(kept), "{kept} went with dpkg -r");
    }

    // dpkg --purge: nothing left.
    purge();
    assert_eq!(package_state(), None);
    for gone in [
        "/etc/leadgate",
        "/etc/default/leadgate",
        "/var/lib/leadgate",
        "/usr/share/doc/leadgate",
    ] {
        assert!(!exists(gone), "{gone} is still there after dpkg --purge");
    }
    assert!(!sh("getent passwd leadgate")
        .output()
        .unwrap()
        .status
        .success());
    assert!(!sh("getent group leadgate")
        .output()
        .unwrap()
        .status
        .success());
    let overrides = stdout(Command::new("dpkg-statoverride").arg("--list"));
    assert!(
        !overrides.contains("leadgate"),
        "statoverrides left: {overrides}"
    );
    drop(installed);
    eprintln!(
        "the .deb: {:.1} MB uncompressed (debug binary, stripped), built in {build_secs:.1} s; \
         {exposure}; whole test {:.1} s",
        size as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
}
