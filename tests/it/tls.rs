//! TLS to PostgreSQL, for the gateway and the console. A private PostgreSQL cluster is
//! started for the test (initdb + pg_ctl as the `postgres` user, on its own port and
//! socket directory, so the shared server of the other tests is never restarted) with a
//! server certificate from a CA the test makes itself, and a pg_hba.conf that refuses
//! every connection without TLS: a connection that works is a TLS connection.

use std::time::Duration;

use leadgate::config::Config;
use leadgate_fakes::bitrix24::FakeBitrix24;
use reqwest::StatusCode;

pub(crate) use leadgate_testkit::cluster::unsafe_is_root;
use leadgate_testkit::cluster::Cluster;
use leadgate_testkit::gateway::{config_toml, lead, Gateway};

pub(crate) struct Pki {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A CA and a server certificate for `localhost` / 127.0.0.1 signed by it.
pub(crate) fn make_pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "leadgate test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut server =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    server
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let cert = server.signed_by(&key, &ca_cert, &ca_key).unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// TLS or nothing: clear-text TCP connections are rejected by the server itself.
const TLS_ONLY: &str = "local all all trust\n\
    hostssl all all 127.0.0.1/32 trust\n\
    hostssl all all ::1/128 trust\n\
    hostnossl all all 0.0.0.0/0 reject\n\
    hostnossl all all ::/0 reject\n";

fn start_cluster(pki: &Pki) -> Cluster {
    Cluster::start(TLS_ONLY, Some((&pki.cert_pem, &pki.key_pem)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_over_tls_require_and_verify_full_for_the_gateway_and_the_console() {
    let pki = make_pki();
    let cluster = start_cluster(&pki);
    let ca = cluster.dir.path().join("ca.crt");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let other = make_pki();
    let wrong_ca = cluster.dir.path().join("other-ca.crt");
    std::fs::write(&wrong_ca, &other.ca_pem).unwrap();
    let port = cluster.port;
    let url = |host: &str, db: &str, query: &str| {
        format!("postgres://postgres@{host}:{port}/{db}?{query}")
    };

    // Clear text is refused by this server: what works below is TLS.
    let err = leadgate::store::connect(&url("127.0.0.1", "postgres", "sslmode=disable"))
        .await
        .err()
        .expect("a clear-text connection must fail");
    assert!(err.to_string().contains("pg_hba.conf"), "{err}");
    // prefer would fall back to clear text silently: refused before connecting.
    let err = leadgate::store::connect(&url("127.0.0.1", "postgres", "sslmode=prefer"))
        .await
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("falls back to clear text"),
        "{err}"
    );
    // verify-full against another CA, or without the CA (webpki roots): refused.
    for query in [
        format!("sslmode=verify-full&sslrootcert={}", wrong_ca.display()),
        "sslmode=verify-full".to_string(),
    ] {
        let err = leadgate::store::connect(&url("localhost", "postgres", &query))
            .await
            .err()
            .unwrap_or_else(|| panic!("{query}: an unverifiable server was accepted"));
        assert!(
            err.to_string().to_lowercase().contains("certificate")
                || err.to_string().to_lowercase().contains("tls"),
            "{query}: {err}"
        );
    }

    // sslmode=require: the gateway migrates, takes a lead and completes it.
    let store = leadgate::store::connect(&url("127.0.0.1", "postgres", "sslmode=require"))
        .await
        .expect("sslmode=require");
    assert_eq!(store.backend(), leadgate::store::Backend::Postgres);
    let mut admin = sqlx::postgres::PgConnection::connect_with(
        &leadgate::store::postgres::connect_options(&url(
            "127.0.0.1",
            "postgres",
            "sslmode=require",
        ))
        .unwrap(),
    )
    .await
    .unwrap();
    use sqlx::Connection;
    let ssl: bool = sqlx::query_scalar("select ssl from pg_stat_ssl where pid = pg_backend_pid()")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert!(ssl, "pg_stat_ssl says this connection is TLS");
    sqlx::query("create database gw")
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();

    let verify_full = url(
        "localhost",
        "gw",
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    );
    let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let config = Config::parse(&config_toml(&verify_full, &fake.webhook_url())).unwrap();
    let gw = Gateway::start_with(fake, config).await;
    let (s, b, _) = gw.post_json("site", &lead("tls-1")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let op = gw.wait_status("site:tls-1", "completed").await;
    assert!(op["crm_id"].is_string());
    gw.stop().await;

    // The console, over verify-full: it opens the gateway's database and sees the lead.
    let settings = cluster.dir.path().join("console-settings.json");
    let console = leadgate_console_model::ConsoleState::new(settings.clone(), None);
    let connection = console.connect(Some(verify_full.clone())).await.unwrap();
    assert_eq!(connection.backend, "postgres");
    let c = console.console().await.unwrap();
    let counts = c.counts().await.unwrap();
    assert_eq!((counts.needs_review, counts.stale), (0, 0), "{counts:?}");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&settings).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the settings file holds the database URL");
    }
    drop(c);
    drop(console);
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn the_shared_test_server_is_reached_with_sslmode_require() {
    // Debian's server runs with ssl=on and its snakeoil certificate: require encrypts
    // without verifying the name (verify-full is proven on the private cluster above).
    let server = std::env::var("LEADGATE_TEST_DATABASE_URL")
        .expect("LEADGATE_TEST_DATABASE_URL (the shared test server)");
    let sep = if server.contains('?') { '&' } else { '?' };
    let url = format!("{server}{sep}sslmode=require");
    let options = leadgate::store::postgres::connect_options(&url).unwrap();
    use sqlx::Connection;
    let mut conn = sqlx::postgres::PgConnection::connect_with(&options)
        .await
        .unwrap_or_else(|e| panic!("sslmode=require on the shared server: {e}"));
    let ssl: bool = sqlx::query_scalar("select ssl from pg_stat_ssl where pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(ssl);
    conn.close().await.unwrap();
}
