//! Fleet mode in the browser console: a session shows one tenant at a time, and a person
//! with several switches (`POST /api/session/tenant`) from the next call on.

use leadgate::store::logins::PersonTenants;
use leadgate_testkit::seed::tenant_with_a_case;

use super::*;

web_test!(
    a_browser_session_shows_one_tenant_and_switches,
    |d: Deployment| async move {
        tenant_with_a_case(&d.store, "acme").await;
        let gw = gateway(d.store.clone());
        let site = Site::start(&d.url, &console_config("")).await;
        // On PostgreSQL people of every tenant (an integrator's); on SQLite the operator.
        let everywhere = match &d.people {
            Some(_) => Some(People::in_tenants(&d.url, &d.url, &PersonTenants::All).await),
            None => None,
        };
        let logins: Vec<(String, String)> = match &everywhere {
            Some(p) => Role::ALL
                .iter()
                .map(|r| (p.login(*r).to_owned(), p.password(*r)))
                .collect(),
            None => vec![(OPERATOR.into(), OPERATOR_PASSWORD.into())],
        };
        let defaults =
            call_counts(&site, &sign_in(&site, &logins[0].0, &logins[0].1).await.1).await;

        for (login, password) in logins {
            let (a, b) = sign_in(&site, &login, &password).await;
            assert_eq!(a.status, StatusCode::OK, "{login}: {}", a.body);
            let c = &a.body["connection"];
            assert_eq!(c["tenant"], "default", "{login}");
            let slugs: Vec<_> = c["tenants"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["slug"].clone())
                .collect();
            assert_eq!(slugs, [json!("default"), json!("acme")], "{login}");

            let switch = |b: Browser, body: Value| {
                let site = &site;
                async move {
                    send(
                        site,
                        &b,
                        reqwest::Method::POST,
                        "/api/session/tenant",
                        Some(body),
                    )
                    .await
                }
            };
            // Without the CSRF token, to a tenant it does not have, or saying none: refused.
            let no_csrf = Browser {
                csrf: None,
                ..b.clone()
            };
            let refused = switch(no_csrf, json!({"slug": "acme"})).await;
            assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
            let ghost = switch(b.clone(), json!({"slug": "ghost"})).await;
            assert_eq!(
                (ghost.status, ghost.kind()),
                (StatusCode::BAD_REQUEST, "invalid"),
                "{}",
                ghost.body
            );
            assert!(ghost.body["message"].as_str().unwrap().contains("ghost"));
            let none = switch(b.clone(), json!({"tenant": "acme"})).await;
            assert_eq!(
                (none.status, none.kind()),
                (StatusCode::BAD_REQUEST, "invalid"),
                "{}",
                none.body
            );
            // Nothing refused moved the session.
            assert_eq!(call_counts(&site, &b).await, defaults, "{login}");

            let done = switch(b.clone(), json!({"slug": "acme"})).await;
            assert_eq!(done.status, StatusCode::OK, "{login}: {}", done.body);
            assert_eq!(done.body["tenant"], "acme");
            // The session shows acme from now on, a reload too.
            let again = send(&site, &b, reqwest::Method::GET, "/api/session", None).await;
            assert_eq!(again.body["connection"]["tenant"], "acme");
            assert_eq!(call_counts(&site, &b).await, 1, "{login}: acme's one case");
            // Another sign-in of the same person starts where everyone starts.
            let (_, other) = sign_in(&site, &login, &password).await;
            assert_eq!(call_counts(&site, &other).await, defaults, "{login}");
        }
        gw.abort();
        if let Some(p) = everywhere {
            p.drop_all().await;
        }
        d.done().await;
    }
);

/// The open cases `counts` answers (every role reads them).
async fn call_counts(site: &Site, b: &Browser) -> i64 {
    let counts = call(site, b, "counts", json!({})).await;
    assert_eq!(counts.status, StatusCode::OK, "{}", counts.body);
    counts.body["needs_review"].as_i64().unwrap()
}
