//! Every role × every route of the web console. What a role may not do is refused by
//! PostgreSQL, not by the web layer: a refusal's answer carries the database's own words
//! for SQLSTATE 42501 ("permission denied for …" or "… violates row-level security policy
//! …"), which neither the web layer nor the view model writes, and the web layer checks
//! no role at all. What a role may do is answered. On SQLite the one operator may use
//! every route.

use super::*;
use leadgate_console_model::Console;

/// A role's place in the table; the SQLite operator is `None` and may do everything.
type Who = Option<Role>;

fn everyone(_: Who) -> bool {
    true
}

fn casework(r: Who) -> bool {
    r.is_none_or(Role::reads_cases)
}

fn manager(r: Who) -> bool {
    r.is_none_or(|r| r == Role::Manager)
}

fn admin(r: Who) -> bool {
    r.is_none_or(|r| r == Role::Admin)
}

/// What the routes act on, read as the gateway's owner before anyone signs in.
struct Targets {
    seeded: Seeded,
    uncertain: CaseRef,
    cross_channel: CaseRef,
    exhausted: CaseRef,
    rules_version: i64,
}

struct CaseRef {
    id: i64,
    version: i64,
}

async fn case_ref(owner: &Console, op: &leadgate::domain::OperationId) -> CaseRef {
    let detail = owner.case_detail(op.as_str(), None, None).await.unwrap();
    CaseRef {
        id: detail.case.expect("an open case").id,
        version: detail.operation.version,
    }
}

/// One route: the command (or path), who may use it, and its request.
struct Route {
    name: &'static str,
    may: fn(Who) -> bool,
    args: fn(&Targets) -> Value,
}

/// `/api/call/{command}` for every command the UI sends, and the two routes beside it.
/// Writes come after reads, and the table is walked role by role with the roles that may
/// not write first, so a permitted write never takes away the case a refusal is tried
/// on (a later permitted role may then find it already decided: an answer, not a
/// refusal).
fn routes() -> Vec<Route> {
    vec![
        Route {
            name: "counts",
            may: everyone,
            args: |_| json!({}),
        },
        Route {
            name: "dashboard",
            may: everyone,
            args: |_| json!({"range": "day"}),
        },
        Route {
            name: "connectors",
            may: everyone,
            args: |_| json!({}),
        },
        Route {
            name: "feed_subscribers",
            may: admin,
            args: |_| json!({}),
        },
        Route {
            name: "feed_attempts",
            may: admin,
            args: |_| json!({"id": 1}),
        },
        Route {
            name: "crm_origins",
            may: everyone,
            args: |_| json!({}),
        },
        Route {
            name: "rules",
            may: everyone,
            args: |_| json!({}),
        },
        Route {
            name: "bulk_progress",
            may: everyone,
            args: |_| json!({"id": "no such run"}),
        },
        Route {
            // "Did my lead arrive?": nothing a lead said, so everyone.
            name: "lookup",
            may: everyone,
            args: |t| json!({"query": t.seeded.uncertain.as_str()}),
        },
        Route {
            name: "queue",
            may: casework,
            args: |_| json!({"tab": "needs_review", "query": {}}),
        },
        Route {
            name: "case_detail",
            may: casework,
            args: |t| json!({"operationId": t.seeded.uncertain.as_str(), "caseId": null}),
        },
        Route {
            name: "older_events",
            may: casework,
            args: |t| json!({"operationId": t.seeded.uncertain.as_str(), "before": i64::MAX}),
        },
        Route {
            name: "search",
            may: casework,
            args: |_| json!({"query": "Lead", "cursor": null}),
        },
        Route {
            name: "cases_after",
            may: casework,
            args: |_| json!({"after": null}),
        },
        Route {
            name: "bulk_preview",
            may: casework,
            args: |_| json!({"selection": {"tab": "needs_review", "query": {}}, "action": "authorize_retry"}),
        },
        Route {
            // A saved diagnosis names operations and what happened to them.
            name: "diagnoses",
            may: casework,
            args: |_| json!({}),
        },
        Route {
            name: "diagnosis",
            may: casework,
            args: |_| json!({"id": 1}),
        },
        Route {
            name: "/api/export",
            may: casework,
            args: |_| {
                json!({"selection": {"tab": "needs_review", "query": {}}, "labels": {},
                       "utc_offset_minutes": 0})
            },
        },
        Route {
            name: "notify",
            may: casework,
            args: |t| json!({"what": "new_cases", "operationIds": [t.seeded.uncertain.as_str()]}),
        },
        Route {
            name: "open_case",
            may: casework,
            args: |t| json!({"operationId": t.seeded.failed.as_str(), "comment": "a look"}),
        },
        Route {
            // Fix and resend: at a version already gone (the case opened above moved it),
            // so the rules answer; support and admin may not read the lead at all.
            name: "resend",
            may: casework,
            args: |t| {
                json!({"request": {"operation_id": t.seeded.failed.as_str(), "expected_version": 1,
                       "payload": "{\"name\": \"Fixed\"}", "comment": null}})
            },
        },
        Route {
            name: "act",
            may: casework,
            args: |t| {
                json!({"request": {"case_id": t.uncertain.id, "expected_version": t.uncertain.version,
                       "comment": null, "action": {"type": "confirm", "crm_id": "777"}}})
            },
        },
        Route {
            // A cross-channel match is a manager's to decide: sales ops read it and are
            // refused by the database's row-level security when they ask.
            name: "act (cross-channel)",
            may: manager,
            args: |t| {
                json!({"request": {"case_id": t.cross_channel.id,
                       "expected_version": t.cross_channel.version, "comment": null,
                       "action": {"type": "link", "crm_id": t.seeded.linked_crm_id}}})
            },
        },
        Route {
            name: "bulk_start",
            may: casework,
            args: |t| {
                json!({"request": {"action": "authorize_retry", "comment": "the outage is over", "items": [{
                    "case_id": t.exhausted.id, "operation_id": t.seeded.exhausted.as_str(),
                    "version": t.exhausted.version, "crm_id": null}]}})
            },
        },
        Route {
            name: "resume_connector",
            may: admin,
            args: |_| json!({"name": leadgate_testkit::seed::CONNECTOR}),
        },
        Route {
            name: "pause_connector",
            may: admin,
            args: |_| json!({"name": leadgate_testkit::seed::CONNECTOR, "reason": "CRM maintenance"}),
        },
        Route {
            name: "feed_subscribe",
            may: admin,
            args: |_| json!({"url": "https://hooks.example.com/in?k=1", "events": ["review.opened"]}),
        },
        Route {
            name: "feed_enable",
            may: admin,
            args: |_| json!({"id": 1}),
        },
        Route {
            name: "feed_remove",
            may: admin,
            args: |_| json!({"id": 1}),
        },
        Route {
            name: "set_rules",
            may: manager,
            args: |t| {
                json!({"edit": {"source": "site", "expected_version": t.rules_version,
                       "rule": "review", "window_secs": 3600, "channel": "site"}})
            },
        },
    ]
}

/// How a route answered a role.
#[derive(Debug, PartialEq)]
enum Outcome {
    Answered,
    /// Refused with the database's words.
    RefusedByDatabase,
}

/// PostgreSQL's own sentences for 42501 (privileges, row-level security).
fn database_words(message: &str) -> bool {
    message.contains("permission denied for") || message.contains("row-level security policy")
}

async fn outcome(site: &Site, b: &Browser, route: &Route, t: &Targets, who: &str) -> Outcome {
    let args = (route.args)(t);
    let answer = match route.name {
        "/api/export" => send(site, b, reqwest::Method::POST, route.name, Some(args)).await,
        name => {
            let command = name.split(' ').next().unwrap();
            call(site, b, command, args).await
        }
    };
    let context = format!("{who} {}: {} {}", route.name, answer.status, answer.body);
    if route.name == "bulk_start" && answer.status == StatusCode::OK {
        return bulk_outcome(site, b, &answer.body, &context).await;
    }
    classify(
        answer.status,
        answer.kind(),
        &answer.body["message"],
        &context,
    )
}

fn classify(status: StatusCode, kind: &str, message: &Value, context: &str) -> Outcome {
    assert!(
        !status.is_server_error() && status != StatusCode::UNAUTHORIZED,
        "{context}"
    );
    if kind == "forbidden" {
        assert_eq!(status, StatusCode::FORBIDDEN, "{context}");
        let m = message.as_str().unwrap_or_default();
        assert!(
            database_words(m),
            "a refusal not in the database's words: {context}"
        );
        Outcome::RefusedByDatabase
    } else {
        Outcome::Answered
    }
}

/// A bulk run is started for anyone; each of its cases is asked for as the person, so
/// the database refuses them one by one.
async fn bulk_outcome(site: &Site, b: &Browser, started: &Value, context: &str) -> Outcome {
    let id = started.as_str().expect("a run id").to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let p = call(site, b, "bulk_progress", json!({"id": id})).await;
        assert_eq!(p.status, StatusCode::OK, "{context}: {}", p.body);
        if p.body["finished"] == true {
            let skipped = p.body["skipped"].as_array().unwrap();
            let refused = skipped
                .iter()
                .map(|s| {
                    classify(
                        StatusCode::FORBIDDEN,
                        s["error"]["kind"].as_str().unwrap_or(""),
                        &s["error"]["message"],
                        &format!("{context}: {s}"),
                    )
                })
                .filter(|o| *o == Outcome::RefusedByDatabase)
                .count();
            return if refused > 0 {
                assert_eq!(
                    refused as i64,
                    p.body["total"].as_i64().unwrap(),
                    "{context}: {}",
                    p.body
                );
                Outcome::RefusedByDatabase
            } else {
                Outcome::Answered
            };
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{context}: {}",
            p.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

web_test!(
    every_role_on_every_route_is_answered_or_refused_by_the_database,
    |d: Deployment| async move {
        let gw = gateway(d.store.clone());
        let site_rules = leadgate::store::SourceRules {
            source: "site".into(),
            rule: leadgate::domain::MatchRule::Create,
            window_secs: 86400,
            channel: "site".into(),
        };
        d.store
            .seed_rules(&[site_rules], d.store.now())
            .await
            .unwrap();
        let owner = Console::on(d.store.clone(), d.url.clone()).await.unwrap();
        let targets = Targets {
            uncertain: case_ref(&owner, &d.seeded.uncertain).await,
            cross_channel: case_ref(&owner, &d.seeded.cross_channel).await,
            exhausted: case_ref(&owner, &d.seeded.exhausted).await,
            rules_version: owner.rules().await.unwrap().sources[0].version,
            seeded: d.seeded.clone(),
        };
        let site = Site::start(&d.url, &console_config("")).await;

        // The roles that may not write go first (see `routes`).
        let order = [Role::Support, Role::Admin, Role::SalesOps, Role::Manager];
        let mut logins = d.logins();
        logins.sort_by_key(|(r, _, _)| r.map(|r| order.iter().position(|o| *o == r)));
        let mut wrong = vec![];
        for (role, login, password) in logins {
            let (a, b) = sign_in(&site, &login, &password).await;
            assert_eq!(a.status, StatusCode::OK, "{login}: {}", a.body);
            let who = role.map_or("the operator", Role::as_str);
            for route in routes() {
                let got = outcome(&site, &b, &route, &targets, who).await;
                let want = if (route.may)(role) {
                    Outcome::Answered
                } else {
                    Outcome::RefusedByDatabase
                };
                if got != want {
                    wrong.push(format!("{who} {}: {got:?}, want {want:?}", route.name));
                }
            }
            // The live stream carries no data: everyone signed in may listen.
            let events = site
                .client
                .get(format!("{}/api/events", site.base))
                .header("Cookie", b.cookie_header().unwrap())
                .send()
                .await
                .unwrap();
            assert_eq!(events.status(), StatusCode::OK, "{who} /api/events");
            drop(events);
        }
        assert!(
            wrong.is_empty(),
            "the route table and the database disagree:\n{}",
            wrong.join("\n")
        );

        // The permitted writes took effect, each by the first role that may.
        let first_who_may = |may: fn(Who) -> bool| {
            d.logins()
                .into_iter()
                .filter(|(r, _, _)| may(*r))
                .min_by_key(|(r, _, _)| r.map(|r| order.iter().position(|o| *o == r)))
                .map(|(_, login, _)| login)
        };
        for (op, may) in [
            (&d.seeded.uncertain, casework as fn(Who) -> bool),
            (&d.seeded.cross_channel, manager),
            (&d.seeded.exhausted, casework),
        ] {
            let detail = owner.case_detail(op.as_str(), None, None).await.unwrap();
            let by = detail.cases.iter().find_map(|c| c.resolved_by.clone());
            assert_eq!(by, first_who_may(may), "{op}");
        }
        let rules = owner.rules().await.unwrap();
        assert_eq!(rules.sources[0].rule, "review");
        assert_eq!(Some(rules.history[0].actor.clone()), first_who_may(manager));
        gw.abort();
        d.done().await;
    }
);
