//! Signing in, sessions, CSRF, the lockout, TLS, live updates, and what the console
//! refuses to start with.

use super::*;

web_test!(
    a_person_signs_in_and_every_call_runs_as_them,
    |d: Deployment| async move {
        let gw = gateway(d.store.clone());
        let site = Site::start(&d.url, &console_config("")).await;

        for (role, login, password) in d.logins() {
            let (a, b) = sign_in(&site, &login, &password).await;
            assert_eq!(a.status, StatusCode::OK, "{login}: {}", a.body);
            let set = a.headers["set-cookie"].to_str().unwrap().to_owned();
            assert!(
                set.contains("HttpOnly") && set.contains("SameSite=Strict"),
                "{set}"
            );
            assert!(!set.contains("Secure"), "plain loopback HTTP: {set}");
            assert_eq!(b.cookie.as_ref().unwrap().len(), 43, "a 256-bit session id");
            let c = &a.body["connection"];
            assert_eq!(c["actor"], login.as_str(), "who acts is who signed in");
            match role {
                Some(r) => {
                    assert_eq!(
                        (c["mode"].as_str(), c["role"].as_str()),
                        (Some("person"), Some(r.as_str()))
                    );
                }
                None => assert_eq!(c["mode"], "local"),
            }
            // A reload: the same session, the same CSRF token.
            let again = send(
                &site,
                &Browser {
                    csrf: None,
                    ..b.clone()
                },
                reqwest::Method::GET,
                "/api/session",
                None,
            )
            .await;
            assert_eq!(again.status, StatusCode::OK);
            assert_eq!(again.body["csrf"].as_str(), b.csrf.as_deref());

            // Every role reads the counts.
            let counts = call(&site, &b, "counts", json!({})).await;
            assert_eq!(counts.status, StatusCode::OK, "{login}: {}", counts.body);
            assert!(counts.body["needs_review"].as_i64().unwrap() > 0);

            // The queue and a case's detail: the database decides who may.
            let queue = call(
                &site,
                &b,
                "queue",
                json!({"tab": "needs_review", "query": {}}),
            )
            .await;
            let detail = call(
                &site,
                &b,
                "case_detail",
                json!({"operationId": d.seeded.uncertain.as_str(), "caseId": null}),
            )
            .await;
            let may_read = !matches!(role, Some(Role::Support) | Some(Role::Admin));
            if may_read {
                assert_eq!(queue.status, StatusCode::OK, "{login}: {}", queue.body);
                assert!(!queue.body["rows"].as_array().unwrap().is_empty());
                assert_eq!(detail.status, StatusCode::OK, "{login}: {}", detail.body);
            } else {
                // The web layer checks no role: this refusal is PostgreSQL's (42501).
                for refused in [&queue, &detail] {
                    assert_eq!(
                        refused.status,
                        StatusCode::FORBIDDEN,
                        "{login}: {}",
                        refused.body
                    );
                    assert_eq!(refused.kind(), "forbidden");
                    let m = refused.body["message"].as_str().unwrap();
                    assert!(
                        m.contains("permission denied"),
                        "the database's own words: {m}"
                    );
                }
            }

            // Signing out ends the session: the cookie is worth nothing after.
            let out = send(&site, &b, reqwest::Method::DELETE, "/api/session", None).await;
            assert_eq!(out.status, StatusCode::NO_CONTENT);
            assert!(out.headers["set-cookie"]
                .to_str()
                .unwrap()
                .contains("Max-Age=0"));
            let after = call(&site, &b, "counts", json!({})).await;
            assert_eq!(
                (after.status, after.kind()),
                (StatusCode::UNAUTHORIZED, "not_connected")
            );
            // … and so is the person's database session.
            if role.is_some() {
                assert_eq!(
                    sessions_of(&d.url, &login).await,
                    0,
                    "{login} still connected after signing out"
                );
            }
        }
        assert_eq!(site.web.sessions.len(), 0);
        gw.abort();
        d.done().await;
    }
);

web_test!(
    sessions_refuse_what_a_browser_did_not_mean_to_send,
    |d: Deployment| async move {
        let site = Site::start(&d.url, &console_config("")).await;
        let (_, login, password) = d.logins().pop().unwrap();

        // No cookie: not signed in, for every route but sign-in.
        let none = Browser::default();
        assert_eq!(
            call(&site, &none, "counts", json!({})).await.status,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            send(&site, &none, reqwest::Method::GET, "/api/session", None)
                .await
                .status,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            send(&site, &none, reqwest::Method::GET, "/api/events", None)
                .await
                .status,
            StatusCode::UNAUTHORIZED
        );

        // Session fixation: a cookie planted before sign-in is not the session's id.
        let planted = Browser {
            cookie: Some("planted-by-someone-else".into()),
            ..Browser::default()
        };
        let a = send(
            &site,
            &planted,
            reqwest::Method::POST,
            "/api/session",
            Some(json!({"login": login, "password": password})),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        assert!(!a.headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("planted"));
        assert_eq!(
            call(
                &site,
                &Browser {
                    csrf: a.body["csrf"].as_str().map(Into::into),
                    ..planted
                },
                "counts",
                json!({})
            )
            .await
            .status,
            StatusCode::UNAUTHORIZED
        );

        // Signing in again from the same browser ends its earlier session.
        let (_, earlier) = sign_in(&site, &login, &password).await;
        let again = send(
            &site,
            &earlier,
            reqwest::Method::POST,
            "/api/session",
            Some(json!({"login": login, "password": password})),
        )
        .await;
        assert_eq!(again.status, StatusCode::OK);
        assert_eq!(
            call(&site, &earlier, "counts", json!({})).await.status,
            StatusCode::UNAUTHORIZED
        );
        // A body too large for any call: refused before any route reads it.
        let big = json!({"login": "x".repeat(300 * 1024), "password": "y"});
        let r = send(
            &site,
            &none,
            reqwest::Method::POST,
            "/api/session",
            Some(big),
        )
        .await;
        assert_eq!((r.status, r.kind()), (StatusCode::BAD_REQUEST, "invalid"));

        let (_, one) = sign_in(&site, &login, &password).await;
        let (_, two) = sign_in(&site, &login, &password).await;
        assert_ne!(one.cookie, two.cookie);
        // CSRF: without the token, or with another session's, nothing runs.
        let bare = Browser {
            csrf: None,
            ..one.clone()
        };
        let r = call(&site, &bare, "counts", json!({})).await;
        assert_eq!((r.status, r.kind()), (StatusCode::FORBIDDEN, "forbidden"));
        assert!(r.body["message"].as_str().unwrap().contains("CSRF"));
        let crossed = Browser {
            csrf: two.csrf.clone(),
            ..one.clone()
        };
        assert_eq!(
            call(&site, &crossed, "counts", json!({})).await.status,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            send(&site, &bare, reqwest::Method::DELETE, "/api/session", None)
                .await
                .status,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            call(&site, &one, "counts", json!({})).await.status,
            StatusCode::OK,
            "the session itself is intact"
        );

        // Bad input: a clear error, nothing run.
        let r = call(&site, &one, "case_detail", json!({"operation_id": "x"})).await;
        assert_eq!((r.status, r.kind()), (StatusCode::BAD_REQUEST, "invalid"));
        assert!(
            r.body["message"]
                .as_str()
                .unwrap()
                .starts_with("case_detail:"),
            "{}",
            r.body
        );
        let r = call(&site, &one, "drop_everything", json!({})).await;
        assert_eq!((r.status, r.kind()), (StatusCode::BAD_REQUEST, "invalid"));
        let r = send(
            &site,
            &none,
            reqwest::Method::POST,
            "/api/session",
            Some(json!({"login": login})),
        )
        .await;
        assert_eq!((r.status, r.kind()), (StatusCode::BAD_REQUEST, "invalid"));

        // Every answer carries the strict policy.
        let csp = r.headers["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{csp}"
        );
        d.done().await;
    }
);

web_test!(
    failed_sign_ins_are_slowed_then_locked_out,
    |d: Deployment| async move {
        let site = Site::start(&d.url, &console_config("")).await;
        let (_, login, password) = d.logins().pop().unwrap();
        for i in 0..console_web::session::LOCK_AFTER {
            let (a, b) = sign_in(&site, &login, &format!("wrong {i}")).await;
            assert_eq!((a.status, a.kind()), (StatusCode::FORBIDDEN, "forbidden"));
            assert_eq!(a.body["message"], "wrong login or password");
            assert!(b.cookie.is_none() && b.csrf.is_none());
        }
        // Locked: the right password no longer helps, for this login from anywhere.
        let (a, _) = sign_in(&site, &login, &password).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN);
        assert!(
            a.body["message"]
                .as_str()
                .unwrap()
                .contains("too many failed sign-ins"),
            "{}",
            a.body
        );
        assert_eq!(site.web.sessions.len(), 0);

        // Guesses sent all at once: no more get checked than the lockout allows, and no
        // more are checked at the same time than the console takes.
        let site = Site::start(&d.url, &console_config("")).await;
        let other = d.logins().first().unwrap().1.clone();
        let guesses: Vec<_> = (0..30)
            .map(|i| {
                let (site_base, client) = (site.base.clone(), site.client.clone());
                let other = other.clone();
                tokio::spawn(async move {
                    let r = client
                        .post(format!("{site_base}/api/session"))
                        .json(&json!({"login": other, "password": format!("guess {i}")}))
                        .send()
                        .await
                        .unwrap();
                    let status = r.status();
                    (status, r.json::<Value>().await.unwrap())
                })
            })
            .collect();
        let mut checked = 0;
        for g in guesses {
            let (status, body) = g.await.unwrap();
            match (status, body["message"].as_str().unwrap_or("")) {
                (StatusCode::FORBIDDEN, "wrong login or password") => checked += 1,
                (StatusCode::FORBIDDEN, m) if m.contains("too many failed sign-ins") => {}
                (StatusCode::SERVICE_UNAVAILABLE, m) if m.contains("try again") => {}
                other => panic!("{other:?}"),
            }
        }
        assert!(
            checked <= console_web::session::LOCK_AFTER,
            "{checked} guesses were checked"
        );
        d.done().await;
    }
);

/// On PostgreSQL: the gateway's own login is not a person's and is refused with the words
/// a wrong password gets (the console confirms no password but a person's), and a person
/// `leadgate user remove` drops loses every open session within a sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_owner_cannot_sign_in_and_a_removed_person_is_signed_out() {
    let (cluster, url) = checked_cluster();
    let mut d = deployment(&url, Backend::Postgres).await;
    let site = Site::start(&d.url, &console_config("")).await;
    for attempt in [OWNER_PASSWORD, "not the owner's password"] {
        let (a, b) = sign_in(&site, "postgres", attempt).await;
        assert_eq!(
            (a.status, a.kind(), a.body["message"].as_str()),
            (
                StatusCode::FORBIDDEN,
                "forbidden",
                Some("wrong login or password")
            ),
            "{}",
            a.body
        );
        assert!(b.cookie.is_none());
    }

    let people = d.people.as_mut().unwrap();
    let (login, password) = (
        people.login(Role::SalesOps).to_owned(),
        people.password(Role::SalesOps),
    );
    let (_, b) = sign_in(&site, &login, &password).await;
    let (_, b2) = sign_in(&site, &login, &password).await;
    assert_eq!(
        call(&site, &b, "counts", json!({})).await.status,
        StatusCode::OK
    );
    assert!(people
        .admin
        .remove_user(&people.owner, &login)
        .await
        .unwrap());
    people.forget(Role::SalesOps);
    let deadline = tokio::time::Instant::now() + console_web::SWEEP_EVERY * 10;
    while !site.web.sessions.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for browser in [&b, &b2] {
        let r = call(&site, browser, "counts", json!({})).await;
        assert_eq!(
            (r.status, r.kind()),
            (StatusCode::UNAUTHORIZED, "not_connected")
        );
    }
    drop(site);
    d.done().await;
    drop(cluster);
}

/// A sign-in while PostgreSQL has no connection slot left for a person is told to try
/// again (503, `unreachable`), not a 500 with the server's words; once a slot is free the
/// same sign-in works.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sign_in_while_postgresql_has_no_slot_left_is_told_to_try_again() {
    use sqlx::Connection;
    let (cluster, url) = checked_cluster();
    let d = deployment(&url, Backend::Postgres).await;
    let site = Site::start(&d.url, &console_config("")).await;
    let people = d.people.as_ref().unwrap();
    let (login, password) = (
        people.login(Role::SalesOps).to_owned(),
        people.password(Role::SalesOps),
    );
    // Support's login takes every slot a person may have (the rest are the superuser's).
    let mut held = vec![];
    loop {
        match sqlx::PgConnection::connect(people.url(Role::Support)).await {
            Ok(c) => held.push(c),
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("53300") => break,
            Err(e) => panic!("{e}"),
        }
        assert!(held.len() < 100, "the server never ran out of slots");
    }
    let (a, b) = sign_in(&site, &login, &password).await;
    assert_eq!(
        (a.status, a.kind()),
        (StatusCode::SERVICE_UNAVAILABLE, "unreachable"),
        "{}",
        a.body
    );
    assert!(b.cookie.is_none());
    for c in held.drain(..) {
        let _ = c.close().await;
    }
    let (a, b) = sign_in(&site, &login, &password).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(b.cookie.is_some());
    drop(site);
    d.done().await;
    drop(cluster);
}

/// PostgreSQL's change notifications reach a signed-in browser as server-sent events, and
/// the stream ends with the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_signed_in_browser_hears_that_the_queue_changed() {
    use sqlx::Connection;
    let (cluster, url) = checked_cluster();
    let d = deployment(&url, Backend::Postgres).await;
    let site = Site::start(&d.url, &console_config("")).await;
    let (_, login, password) = d.logins().pop().unwrap();
    let (_, b) = sign_in(&site, &login, &password).await;
    let mut events = site
        .client
        .get(format!("{}/api/events", site.base))
        .header("Cookie", b.cookie_header().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    assert!(events.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    // What a review case's insert or update notifies (migration 0004), sent by the owner.
    let mut owner = sqlx::PgConnection::connect(&url).await.unwrap();
    let notify = "select pg_notify('leadgate_console', 'review_cases')";
    let mut heard = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !heard.contains("event: refresh") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no refresh event: {heard:?}"
        );
        sqlx::query(notify).execute(&mut owner).await.unwrap();
        if let Ok(Ok(Some(chunk))) =
            tokio::time::timeout(Duration::from_millis(700), events.chunk()).await
        {
            heard.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
    assert!(
        !heard.contains(&login) && !heard.contains("review_cases"),
        "no data, only that something changed: {heard:?}"
    );
    // Signed out: the stream ends at the next change.
    assert_eq!(
        send(&site, &b, reqwest::Method::DELETE, "/api/session", None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let ended = async {
        loop {
            sqlx::query(notify).execute(&mut owner).await.unwrap();
            match tokio::time::timeout(Duration::from_millis(700), events.chunk()).await {
                Ok(Ok(None)) | Ok(Err(_)) => return,
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), ended)
        .await
        .expect("the stream ends with the session");
    owner.close().await.unwrap();
    drop(site);
    d.done().await;
    drop(cluster);
}

/// On a server that does not check passwords (`trust`, as the shared test server), the
/// console signs nobody in: anyone could otherwise sign in as anyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_one_signs_in_where_the_database_does_not_check_passwords() {
    run(Backend::Postgres, |db: TestDb| async move {
        let d = deployment(&db.url, Backend::Postgres).await;
        let site = Site::start(&d.url, &console_config("")).await;
        let (_, login, password) = d.logins().pop().unwrap();
        for attempt in [password.as_str(), "not the password"] {
            let (a, b) = sign_in(&site, &login, attempt).await;
            assert_eq!(
                (a.status, a.kind()),
                (StatusCode::FORBIDDEN, "forbidden"),
                "{}",
                a.body
            );
            assert!(
                a.body["message"]
                    .as_str()
                    .unwrap()
                    .contains("without checking its password"),
                "{}",
                a.body
            );
            assert!(b.cookie.is_none());
        }
        assert!(site.web.sessions.is_empty());
        drop(site);
        d.done().await;
    })
    .await;
}

/// With `tls_cert` and `tls_key` the console speaks HTTPS only, and its session cookie is
/// `Secure` whatever the headers say; a certificate that cannot be read stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_tls_the_session_cookie_is_secure_and_plain_http_is_refused() {
    run(Backend::Sqlite, |db: TestDb| async move {
        let d = deployment(&db.url, Backend::Sqlite).await;
        let pki = crate::tls::make_pki();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (
            dir.path().join("console.crt"),
            dir.path().join("console.key"),
        );
        std::fs::write(&cert, &pki.cert_pem).unwrap();
        std::fs::write(&key, &pki.key_pem).unwrap();
        let config = console_config(&format!("tls_cert = {cert:?}\ntls_key = {key:?}\n"));
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(pki.ca_pem.as_bytes()).unwrap())
            .build()
            .unwrap();
        let site = Site::start_with(&d.url, &config, client).await;
        assert!(site.base.starts_with("https://"));
        let (a, b) = sign_in(&site, OPERATOR, OPERATOR_PASSWORD).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        let set = a.headers["set-cookie"].to_str().unwrap();
        assert!(
            set.starts_with("__Host-leadgate_session=")
                && set.contains("; Secure")
                && set.contains("; Path=/")
                && !set.contains("Domain")
                && set.contains("HttpOnly"),
            "the __Host- prefix, with what it requires: {set}"
        );
        assert_eq!(
            call(&site, &b, "counts", json!({})).await.status,
            StatusCode::OK
        );
        // Over HTTPS only the prefixed name is read: the same id under the plain name
        // (as a sibling subdomain could plant it) is no session.
        let planted = Browser {
            cookie_name: Some(console_web::session::COOKIE.into()),
            ..b.clone()
        };
        assert_eq!(
            call(&site, &planted, "counts", json!({})).await.status,
            StatusCode::UNAUTHORIZED
        );
        // The same port in plain HTTP: no answer, only a closed connection.
        let plain = site.base.replace("https://", "http://");
        assert!(reqwest::get(format!("{plain}/api/session")).await.is_err());

        let missing = console_config(
            "tls_cert = \"/nonexistent/console.crt\"\ntls_key = \"/nonexistent/console.key\"\n",
        );
        let e = console_web::tls_acceptor(&missing).err().unwrap();
        assert!(e.contains("/nonexistent/console.crt"), "{e}");
        let swapped = console_config(&format!("tls_cert = {key:?}\ntls_key = {cert:?}\n"));
        assert!(console_web::tls_acceptor(&swapped).is_err());
        drop(site);
        d.done().await;
    })
    .await;
}

#[tokio::test]
async fn the_console_refuses_to_start_without_a_way_to_sign_in_or_off_loopback_in_plain_http() {
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let journal = leadgate::store::connect("sqlite::memory:").await.unwrap();
    let no_operator = Config::parse("[database]\nurl = \"sqlite://x.db\"\n[console]\n").unwrap();
    let e = Web::new(
        "sqlite://x.db",
        no_operator.console.as_ref().unwrap(),
        journal.clone(),
        Default::default(),
        Duration::from_secs(60),
        rx.clone(),
    )
    .await
    .err()
    .unwrap();
    assert!(e.contains("leadgate console password"), "{e}");
    for (toml, says) in [
        ("listen = \"0.0.0.0:8090\"", "behind_proxy"),
        ("listen = \"0.0.0.0:8090\"", "tls_cert"),
        ("tls_cert = \"/etc/c.pem\"", "go together"),
        ("operator = \"anna\"", "go together"),
        (
            "operator_password_hash = \"hunter2\"\noperator = \"anna\"",
            "not a password hash",
        ),
        ("idle_timeout = \"1s\"", "idle_timeout"),
        ("listen = \"console\"", "give an address"),
    ] {
        let text = format!("[database]\nurl = \"sqlite://x.db\"\n[console]\n{toml}\n");
        let e = match Config::parse(&text) {
            Err(e) => e.to_string(),
            Ok(c) => Web::new(
                "sqlite://x.db",
                c.console.as_ref().unwrap(),
                journal.clone(),
                Default::default(),
                Duration::from_secs(60),
                rx.clone(),
            )
            .await
            .err()
            .expect(toml),
        };
        assert!(e.contains(says), "{toml}: {e}");
    }
    let proxied = Config::parse("[database]\nurl = \"sqlite://x.db\"\n[console]\nlisten = \"0.0.0.0:8090\"\nbehind_proxy = true\n");
    assert!(proxied.is_ok());
}

web_test!(
    every_sign_in_is_journaled_and_never_its_password,
    |d: Deployment| async move {
        let site = Site::start(&d.url, &console_config("")).await;
        let (_, login, password) = d.logins().pop().unwrap();
        // A password typed into the login field, a wrong password, the right one.
        let typed_into_login = "my secret password";
        let wrong = "not the password at all";
        for (l, p) in [
            (typed_into_login, "x"),
            (login.as_str(), wrong),
            (login.as_str(), password.as_str()),
        ] {
            sign_in(&site, l, p).await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let journal = loop {
            let j = d.store.sign_ins(None, 10).await.unwrap();
            if j.len() >= 3 || tokio::time::Instant::now() > deadline {
                break j;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let seen: Vec<_> = journal
            .iter()
            .map(|a| (a.login.as_deref(), a.client.as_str(), a.outcome.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                (Some(login.as_str()), "127.0.0.1", "signed_in"),
                (Some(login.as_str()), "127.0.0.1", "failed"),
                (None, "127.0.0.1", "failed"),
            ]
        );
        for a in &journal {
            let row = format!("{a:?}");
            for secret in [typed_into_login, wrong, password.as_str()] {
                assert!(!row.contains(secret), "{row}");
            }
        }
        assert_eq!(
            d.store.sign_ins(Some(&login), 10).await.unwrap().len(),
            2,
            "one login's"
        );

        // On PostgreSQL the journal is an admin's to read, not casework's.
        if let Some(people) = &d.people {
            use sqlx::Connection;
            for (role, may) in [(Role::Admin, true), (Role::SalesOps, false)] {
                let mut c = sqlx::PgConnection::connect(people.url(role)).await.unwrap();
                let read = sqlx::query("select login from console_sign_ins")
                    .fetch_all(&mut c)
                    .await;
                match read {
                    Ok(rows) => assert!(may && rows.len() == 3, "{role:?}"),
                    Err(sqlx::Error::Database(e)) => {
                        assert!(!may, "{role:?}: {e}");
                        assert_eq!(e.code().as_deref(), Some("42501"));
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }

        // Retention forgets them with the payloads.
        let later = d.store.now() + chrono::TimeDelta::seconds(1);
        let purged = leadgate::store::purge(&*d.store, later, 200).await.unwrap();
        assert_eq!(purged.sign_ins, 3);
        assert!(d.store.sign_ins(None, 10).await.unwrap().is_empty());
        d.done().await;
    }
);

web_test!(
    behind_a_proxy_the_cookie_follows_its_scheme_and_the_journal_names_its_client,
    |d: Deployment| async move {
        let site = Site::start(&d.url, &console_config("behind_proxy = true\n")).await;
        let (_, login, password) = d.logins().pop().unwrap();
        let sign_in_via = |proto: &'static str, forwarded_for: &'static str| {
            let (site, login, password) = (&site, login.clone(), password.clone());
            async move {
                site.client
                    .post(format!("{}/api/session", site.base))
                    .header("X-Forwarded-Proto", proto)
                    // The client wrote the first; the proxy appended the last.
                    .header("X-Forwarded-For", forwarded_for)
                    .json(&json!({"login": login, "password": password}))
                    .send()
                    .await
                    .unwrap()
            }
        };
        let https = sign_in_via("https", "203.0.113.9, 198.51.100.7").await;
        assert_eq!(https.status(), StatusCode::OK);
        let set = https.headers()["set-cookie"].to_str().unwrap();
        assert!(
            set.starts_with("__Host-leadgate_session=") && set.contains("; Secure"),
            "{set}"
        );
        let http = sign_in_via("http", "198.51.100.8").await;
        let set = http.headers()["set-cookie"].to_str().unwrap();
        assert!(
            set.starts_with("leadgate_session=") && !set.contains("Secure"),
            "{set}"
        );
        // The journal names the address the proxy saw, not the one the client claimed.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let clients = loop {
            let j = d.store.sign_ins(Some(&login), 10).await.unwrap();
            if j.len() >= 2 || tokio::time::Instant::now() > deadline {
                break j.into_iter().map(|a| a.client).collect::<Vec<_>>();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(clients, ["198.51.100.8", "198.51.100.7"]);
        d.done().await;
    }
);
