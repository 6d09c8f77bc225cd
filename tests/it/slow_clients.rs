//! Clients that hold connections: slow heads, idle keep-alives, slow bodies, and more
//! connections than the gateway allows, as real sockets against a running gateway. Each
//! would otherwise hold a socket and a file descriptor for as long as it liked (a
//! review's 1,000 slow-header connections stayed open a minute and, under systemd's
//! default of 1,024 open files, the gateway stopped accepting connections).

use std::time::{Duration, Instant};

use leadgate::config::Config;
use leadgate_fakes::bitrix24::FakeBitrix24;
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{config_toml, Gateway};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Slots and timeouts small enough to test: 20 connections, 1 s for a head or a body.
const LIMITS: &str = "max_connections = 20\nheader_timeout = \"1s\"\nbody_timeout = \"1s\"\n";

async fn gateway(db: &leadgate_testkit::TestDb) -> Gateway {
    let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let text = config_toml(&db.url, &fake.webhook_url()).replace(
        "max_body = \"4KiB\"\n",
        &format!("max_body = \"4KiB\"\n{LIMITS}"),
    );
    Gateway::start_with(fake, Config::parse(&text).unwrap()).await
}

fn addr(gw: &Gateway) -> String {
    gw.base.trim_start_matches("http://").to_owned()
}

/// What the server does with a connection within `limit`: `Some(bytes)` it answered or
/// closed it (the bytes it sent, maybe none), `None` it kept it open and silent.
async fn what_server_does(conn: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A connection that sent half of a request's head.
async fn half_a_head(gw: &Gateway) -> TcpStream {
    let mut c = TcpStream::connect(addr(gw)).await.unwrap();
    c.write_all(b"POST /v1/intake/site HTTP/1.1\r\nHost: gateway\r\nX-Leadgate-Token: site-")
        .await
        .unwrap();
    c
}

async fn healthz(gw: &Gateway) -> u16 {
    reqwest::Client::new()
        .get(format!("{}/healthz", gw.base))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

each_backend!(
    slow_heads_are_cut_and_connections_over_the_cap_are_closed_at_once,
    |db| async move {
        let gw = gateway(&db).await;
        let mut slow = Vec::new();
        for _ in 0..20 {
            slow.push(half_a_head(&gw).await);
        }
        // Every slot is taken: one more connection is closed at once, not queued.
        let mut over = half_a_head(&gw).await;
        let started = Instant::now();
        assert_eq!(
            what_server_does(&mut over, Duration::from_secs(20)).await,
            Some(vec![]),
            "a connection over the cap is closed without an answer"
        );
        // The heads that never finish are cut after header_timeout (1 s): the bound is
        // the timeout plus a margin for a busy machine, not a measured speed.
        for c in &mut slow {
            assert!(
                what_server_does(c, Duration::from_secs(20)).await.is_some(),
                "a slow head still holds its connection after {:?}",
                started.elapsed()
            );
        }
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "cut before its time"
        );
        // The slots are free again.
        assert_eq!(healthz(&gw).await, 200);
        gw.stop().await;
    }
);

each_backend!(
    an_idle_keep_alive_connection_is_closed_and_a_slow_body_answered_408,
    |db| async move {
        let gw = gateway(&db).await;
        // One request, then silence on a kept-alive connection.
        let mut idle = TcpStream::connect(addr(&gw)).await.unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0u8; 12];
        idle.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
        assert!(
            what_server_does(&mut idle, Duration::from_secs(20))
                .await
                .is_some(),
            "an idle keep-alive connection is closed after header_timeout"
        );

        // A body announced as 100 bytes of which 10 come.
        let mut slow = TcpStream::connect(addr(&gw)).await.unwrap();
        slow.write_all(
            b"POST /v1/intake/site HTTP/1.1\r\nHost: gateway\r\nX-Leadgate-Token: site-token\r\n\
              Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"submissi",
        )
        .await
        .unwrap();
        let answer = what_server_does(&mut slow, Duration::from_secs(20))
            .await
            .expect("a slow body is answered, not waited for");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("request_timeout"), "{answer}");
        // The refusal is journaled, without the body that never came whole.
        let rejected = db
            .texts("select reject_reason from deliveries where outcome = 'rejected'")
            .await;
        assert!(
            rejected.iter().any(|r| r.contains("did not arrive")),
            "{rejected:?}"
        );
        assert_eq!(healthz(&gw).await, 200);
        gw.stop().await;
    }
);
