use super::sources::same_mailbox;
use super::*;

const FULL: &str = r#"
[database]
url = "sqlite://leadgate.db?mode=rwc"

[server]
listen = "127.0.0.1:8080"
max_body = "256KiB"

[worker]
poll_interval = "200ms"
lease = "30s"

[retry]
max_attempts = 5
base_delay = "1s"
max_delay = "5m"

[review]
stale_after = "2m"

[retention]
full = "30d"
tombstone = "400d"

[[source]]
name = "site"
key = "json:/submission_id"
ignore = ["/sent_at"]
secret = "s3cret"

[[source]]
name = "tilda"
key = "form:tranid"
token = "t1lda-token"

[api]
integration_token = "int-t0ken"
read_token = "read-t0ken"

[crm]
kind = "bitrix24"
webhook_url = "https://portal.bitrix24.ru/rest/1/secret/"
entity = "lead"
timeout = "10s"
"#;

#[test]
fn parses_the_documented_example() {
    let c = Config::parse(FULL).unwrap();
    assert_eq!(c.server.max_body.as_u64(), 256 * 1024);
    assert_eq!(c.worker.poll_interval, Duration::from_millis(200));
    assert_eq!(c.retry.max_delay, Duration::from_secs(300));
    assert_eq!(c.retention.full, Duration::from_secs(30 * 24 * 3600));
    assert_eq!(c.retention.tombstone, Duration::from_secs(400 * 24 * 3600));
    assert_eq!(c.sources.len(), 2);
    assert_eq!(c.source("site").unwrap().ignore, vec!["/sent_at"]);
    let Some(CrmConfig::Bitrix24 { timeout, .. }) = &c.crm else {
        panic!("crm")
    };
    assert_eq!(*timeout, Duration::from_secs(10));
}

#[test]
fn secrets_never_show_in_debug_output() {
    let c = Config::parse(FULL).unwrap();
    let debug = format!("{c:?}");
    for secret in [
        "s3cret",
        "/rest/1/secret/",
        "t1lda-token",
        "int-t0ken",
        "read-t0ken",
    ] {
        assert!(!debug.contains(secret), "{debug}");
    }
}

#[test]
fn presets_fill_what_the_table_leaves_open() {
    let c = Config::parse(
        r#"
[database]
url = "sqlite::memory:"
[[source]]
name = "tilda"
preset = "tilda"
token = "t"
[[source]]
name = "amo"
preset = "amocrm-webhook"
token = "t"
[[source]]
name = "b24"
preset = "bitrix24-event"
application_token = "tok"
[[source]]
name = "own"
preset = "tilda"
key = "form:formid+tranid"
reply = "json"
on_contact_match = "review"
auth = "none"
"#,
    )
    .unwrap();
    let tilda = c.source("tilda").unwrap();
    assert_eq!(
        (tilda.key.as_str(), tilda.reply),
        ("form:tranid", Some(Reply::Ok))
    );
    assert!(c
        .source("amo")
        .unwrap()
        .key
        .starts_with("form:leads[add][0][id]|"));
    let b24 = c.source("b24").unwrap();
    assert_eq!(b24.key, "form:event+data[FIELDS][ID]+ts");
    assert!(b24.ignore.contains(&"/auth[application_token]".to_string()));
    assert_eq!(c.source("tilda").unwrap().auth, Some(SourceAuth::Token));
    assert_eq!(b24.auth, Some(SourceAuth::ApplicationToken));
    let own = c.source("own").unwrap();
    assert_eq!(own.auth, Some(SourceAuth::None));
    assert_eq!(
        (own.key.as_str(), own.reply),
        ("form:formid+tranid", Some(Reply::Json))
    );
    assert_eq!(own.on_contact_match, crate::domain::MatchRule::Review);
    let err = Config::parse(
        "[database]\nurl = \"x\"\n[[source]]\nname = \"b\"\npreset = \"bitrix24-event\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("application_token"), "{err}");
    let err = Config::parse("[database]\nurl = \"x\"\n[[source]]\nname = \"b\"\nauth = \"none\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("has no key"), "{err}");
    let err = Config::parse("[database]\nurl = \"x\"\n[matching]\ndefault_region = \"XX\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("region"), "{err}");
}

#[test]
fn minimal_config_uses_defaults() {
    let c = Config::parse("[database]\nurl = \"sqlite::memory:\"\n").unwrap();
    assert_eq!(c.server.listen, "127.0.0.1:8080");
    assert_eq!(c.retry.max_attempts, 5);
    assert_eq!(c.review.stale_after, Duration::from_secs(120));
    assert!(c.crm.is_none());
    assert_eq!(c.server.max_connections, 512);
    assert_eq!(c.server.header_timeout, Duration::from_secs(10));
    assert_eq!(c.server.body_timeout, Duration::from_secs(30));
    assert_eq!(c.fleet.lanes, 32);
}

#[test]
fn a_fleet_without_lanes_is_refused() {
    let with = |fleet: &str| {
        Config::parse(&format!(
            "[database]\nurl = \"sqlite::memory:\"\n[fleet]\n{fleet}\n"
        ))
        .map_err(|e| e.to_string())
    };
    let e = with("lanes = 0").unwrap_err();
    assert!(e.contains("[fleet] lanes"), "{e}");
    assert_eq!(with("lanes = 4").unwrap().fleet.lanes, 4);
}

#[test]
fn slow_client_limits_are_checked() {
    let with = |server: &str| {
        Config::parse(&format!(
            "[database]\nurl = \"sqlite::memory:\"\n[server]\n{server}\n"
        ))
        .map_err(|e| e.to_string())
    };
    assert!(with("max_connections = 0")
        .unwrap_err()
        .contains("max_connections"));
    let e = with("header_timeout = \"10ms\"").unwrap_err();
    assert!(e.contains("header_timeout") && e.contains("10ms"), "{e}");
    assert!(with("body_timeout = \"2h\"")
        .unwrap_err()
        .contains("body_timeout"));
    let c = with("max_connections = 64\nheader_timeout = \"2s\"").unwrap();
    assert_eq!(c.server.max_connections, 64);
    assert_eq!(c.server.header_timeout, Duration::from_secs(2));
}

#[test]
fn amocrm_takes_a_long_lived_token_or_oauth() {
    let base = "[database]\nurl = \"sqlite::memory:\"\n[crm]\nkind = \"amocrm\"\n\
                base_url = \"https://acme.amocrm.ru\"\noperation_field_id = 1\n";
    let oauth = "client_id = \"id\"\nclient_secret = \"cs3cret\"\n\
                 redirect_uri = \"https://x/cb\"\nrefresh_token = \"rt0ken\"\n";
    let c = Config::parse(&format!("{base}token = \"t0ken\"\n")).unwrap();
    assert!(matches!(
        &c.crm,
        Some(CrmConfig::Amocrm {
            token: Some(_),
            client_id: None,
            ..
        })
    ));
    let c = Config::parse(&format!("{base}{oauth}")).unwrap();
    let Some(CrmConfig::Amocrm {
        token, client_id, ..
    }) = &c.crm
    else {
        panic!("crm")
    };
    assert!(token.is_none());
    assert_eq!(client_id.as_deref(), Some("id"));
    let debug = format!("{c:?}");
    assert!(
        !debug.contains("cs3cret") && !debug.contains("rt0ken"),
        "{debug}"
    );
    for bad in [
        base.to_owned(),
        format!("{base}token = \"t\"\n{oauth}"),
        format!("{base}client_id = \"id\"\nrefresh_token = \"r\"\n"),
    ] {
        let err = Config::parse(&bad).unwrap_err().to_string();
        assert!(err.contains("client_secret"), "{bad}: {err}");
    }
}

#[test]
fn bad_configs_get_clear_errors() {
    let base = "[database]\nurl = \"sqlite::memory:\"\n";
    let cases = [
        ("[worker]\nlease = \"soon\"\n", "lease"),
        ("[[source]]\nname = \"a b\"\nkey = \"json:/id\"\nauth = \"none\"\n", "source name"),
        ("[[source]]\nname = \"a\"\nkey = \"id\"\nauth = \"none\"\n", "must start with"),
        ("[[source]]\nname = \"a\"\nkey = \"json:/id\"\nauth = \"none\"\nignore = [\"x\"]\n", "JSON pointer"),
        ("[[source]]\nname = \"a\"\nkey = \"json:/id\"\nauth = \"none\"\n[[source]]\nname = \"a\"\nkey = \"json:/id\"\nauth = \"none\"\n", "twice"),
        ("[retry]\nmax_attempts = 0\n", "max_attempts"),
        ("[server]\nlisten_on = \"x\"\n", "listen_on"),
    ];
    for (extra, needle) in cases {
        let err = Config::parse(&format!("{base}{extra}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
}

const ALERTS: &str = r#"
[alerts]
interval = "2m"
stale_above = 5
review_older_than = "4h"

[[alerts.channel]]
kind = "telegram"
name = "team"
chat_id = -1001234567890
token = "env:LEADGATE_TELEGRAM_TOKEN"

[[alerts.channel]]
kind = "webhook"
name = "slack"
url = "https://hooks.slack.com/services/T000/B000/s3cr3tpath"
blocks = true
"#;

#[test]
fn alerts_parse_with_defaults_and_hide_their_secrets() {
    let c = Config::parse(&format!("[database]\nurl = \"sqlite::memory:\"\n{ALERTS}")).unwrap();
    let a = c.alerts.as_ref().unwrap();
    assert_eq!(a.interval, Duration::from_secs(120));
    assert_eq!(a.stale_above, 5);
    assert_eq!(a.repeat, Duration::from_secs(3600), "default repeat");
    assert_eq!(a.max_per_minute, 20);
    assert_eq!(a.channels.len(), 2);
    let AlertChannelConfig::Telegram {
        chat_id, api_base, ..
    } = &a.channels[0]
    else {
        panic!("telegram")
    };
    assert_eq!(chat_id, "-1001234567890");
    assert_eq!(api_base, "https://api.telegram.org");
    let debug = format!("{c:?}");
    assert!(!debug.contains("s3cr3tpath"), "{debug}");
    assert!(Config::parse("[database]\nurl = \"x\"\n")
        .unwrap()
        .alerts
        .is_none());
}

#[test]
fn bad_alert_configs_get_clear_errors() {
    let base = "[database]\nurl = \"sqlite::memory:\"\n";
    let tg =
        "[[alerts.channel]]\nkind = \"telegram\"\nname = \"team\"\nchat_id = 1\ntoken = \"t\"\n";
    let cases = [
        ("[alerts]\n".to_owned(), "has no [[alerts.channel]]"),
        (format!("[alerts]\ninterval = \"0s\"\n{tg}"), "alerts.interval must be more than 0"),
        (format!("[alerts]\nmax_per_minute = 0\n{tg}"), "max_per_minute"),
        (format!("[alerts]\nstale_above = -1\n{tg}"), "stale_above"),
        (format!("[alerts]\nretry_delay = \"1m\"\nmax_retry_delay = \"1s\"\n{tg}"), "max_retry_delay"),
        (format!("{tg}{tg}"), "alerts channel `team` is defined twice"),
        (
            "[[alerts.channel]]\nkind = \"telegram\"\nname = \"a b\"\nchat_id = 1\ntoken = \"t\"\n".into(),
            "alerts channel name `a b`",
        ),
        (
            "[[alerts.channel]]\nkind = \"telegram\"\nname = \"t\"\nchat_id = \"\"\ntoken = \"t\"\n".into(),
            "chat_id is empty",
        ),
        (
            "[[alerts.channel]]\nkind = \"telegram\"\nname = \"t\"\nchat_id = 1\ntoken = \"env:\"\n".into(),
            "token is empty",
        ),
        (
            "[[alerts.channel]]\nkind = \"telegram\"\nname = \"t\"\nchat_id = 1\ntoken = \"x\"\napi_base = \"ftp://x\"\n".into(),
            "api_base",
        ),
        (
            "[[alerts.channel]]\nkind = \"webhook\"\nname = \"w\"\nurl = \"hooks.slack.com/x\"\n".into(),
            "url must be an http",
        ),
        (
            "[[alerts.channel]]\nkind = \"pager\"\nname = \"w\"\n".into(),
            "unknown variant `pager`",
        ),
        (
            "[[alerts.channel]]\nkind = \"webhook\"\nname = \"w\"\n".into(),
            "missing field `url`",
        ),
    ];
    for (extra, needle) in cases {
        let err = Config::parse(&format!("{base}{extra}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
}

#[test]
fn the_claim_api_source_may_not_be_a_configured_source() {
    let text = "[database]\nurl = \"sqlite::memory:\"\n\
                [claim_api]\nsource = \"site\"\n\
                [[source]]\nname = \"site\"\nkey = \"json:/id\"\ntoken = \"t\"\n";
    let err = Config::parse(text).unwrap_err().to_string();
    assert!(err.contains("claim_api.source `site`"), "{err}");
    assert!(err.contains("[[source]]"), "{err}");
}

#[test]
fn sources_without_authentication_are_refused() {
    let base = "[database]\nurl = \"sqlite::memory:\"\n";
    let cases = [
        // No method at all: refused, naming the source.
        ("name = \"web\"\nkey = \"json:/id\"\n", "source `web` has no authentication"),
        ("name = \"tilda\"\npreset = \"tilda\"\n", "source `tilda` has no authentication"),
        ("name = \"amo\"\npreset = \"amocrm-webhook\"\n", "source `amo` has no authentication"),
        ("name = \"j\"\npreset = \"generic-json\"\n", "source `j` has no authentication"),
        // A method without its credential.
        ("name = \"h\"\nkey = \"json:/id\"\nauth = \"hmac\"\n", "source `h`: auth = \"hmac\" needs secret"),
        ("name = \"t\"\nkey = \"json:/id\"\nauth = \"token\"\n", "source `t`: auth = \"token\" needs token"),
        // Empty secrets.
        ("name = \"e\"\nkey = \"json:/id\"\nsecret = \"\"\n", "source `e`: secret is empty"),
        ("name = \"e\"\nkey = \"json:/id\"\ntoken = \"  \"\n", "source `e`: token is empty"),
        ("name = \"e\"\nkey = \"json:/id\"\nsecret = \"k\"\nprevious_secret = \"\"\n", "source `e`: previous_secret is empty"),
        ("name = \"b\"\npreset = \"bitrix24-event\"\napplication_token = \"\"\n", "source `b`: application_token is empty"),
        // Credentials of another method than the one named.
        ("name = \"m\"\nkey = \"json:/id\"\nauth = \"none\"\nsecret = \"k\"\n", "source `m`: secret is set but auth = \"none\""),
        ("name = \"m\"\nkey = \"json:/id\"\nauth = \"token\"\ntoken = \"t\"\nsecret = \"k\"\n", "source `m`: secret is set"),
        ("name = \"w\"\nkey = \"json:/id\"\nsecret = \"k\"\nreplay_window = \"0s\"\n", "replay_window"),
        // A pulled source needs its sender's address and credentials.
        ("name = \"p\"\npreset = \"bitrix24-offline\"\n", "source `p`: auth = \"pull\" needs a [source.pull] table"),
        ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"\"\n", "source `p`: pull.url is empty"),
        ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"portal/rest\"\n", "pull.url must be an http"),
        ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"env:B24\"\naccess_token = \"env:\"\n", "pull.access_token is empty"),
        ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"env:B24\"\nbatch = 51\n", "pull.batch must be 1 to 50"),
        ("name = \"p\"\npreset = \"bitrix24-offline\"\ntoken = \"t\"\n[source.pull]\nurl = \"env:B24\"\n", "source `p`: token is set but auth = \"pull\""),
        ("name = \"p\"\nkey = \"json:/id\"\ntoken = \"t\"\nauth = \"token\"\n[source.pull]\nurl = \"env:B24\"\n", "[source.pull] is set but auth = \"token\""),
        ("name = \"p\"\nkey = \"json:/id\"\n[source.pull]\nurl = \"env:B24\"\n", "[source.pull] needs a pulled preset"),
        ("name = \"tg\"\npreset = \"telegram-webhook\"\n", "source `tg` has no authentication"),
        ("name = \"zd\"\npreset = \"zadarma\"\n", "source `zd` has no authentication"),
        ("name = \"zd\"\npreset = \"zadarma\"\ntoken = \"t\"\n", "the zadarma preset needs secret"),
        ("name = \"zd\"\npreset = \"zadarma\"\nauth = \"zadarma_signature\"\n", "needs secret"),
        ("name = \"tg\"\npreset = \"telegram-webhook\"\ntoken = \"has space\"\n", "the telegram-webhook preset needs token"),
        ("name = \"tg\"\npreset = \"telegram-webhook\"\nsecret = \"k\"\n", "the telegram-webhook preset needs token"),
        ("name = \"tp\"\npreset = \"telegram-updates\"\n[source.pull]\nurl = \"https://api.telegram.org\"\n", "needs pull.bot_token"),
        ("name = \"tp\"\npreset = \"telegram-updates\"\n[source.pull]\nurl = \"https://api.telegram.org\"\nbot_token = \"env:\"\n", "pull.bot_token is empty"),
        ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"env:B24\"\nbot_token = \"x\"\n", "pull.bot_token is for the telegram-updates preset"),
        ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://imap.example.com\"\npassword = \"env:PW\"\n", "the imap preset needs pull.username"),
        ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://imap.example.com\"\nusername = \"env:U\"\n", "the imap preset needs pull.password"),
        ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://imap.example.com\"\nusername = \"env:U\"\npassword = \"env:\"\n", "pull.password is empty"),
        ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imap://imap.example.com\"\nusername = \"env:U\"\npassword = \"env:PW\"\n", "pull.url must be imaps://"),
        ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\nmove_to = \"INBOX\"\n", "pull.move_to is the mailbox read"),
        ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\nmove_to = \"Inbox\"\n", "pull.move_to is the mailbox read"),
        ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\nmailbox = \"inbox\"\nmove_to = \"INBOX\"\n", "pull.move_to is the mailbox read"),
        ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\nmax_message_size = 0\n", "pull.max_message_size must be at least 1 byte"),
        ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"env:B24\"\nmax_message_size = 10\n", "pull.max_message_size is for the imap preset"),
        ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\nmailbox = \" \"\n", "pull.mailbox must be a mailbox name"),
        ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\nbot_token = \"x\"\n", "pull.bot_token is for the telegram-updates preset"),
        ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"env:B24\"\npassword = \"env:PW\"\n", "pull.password is for the imap preset"),
    ];
    for (source, needle) in cases {
        let err = Config::parse(&format!("{base}[[source]]\n{source}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{source:?}: {err}");
    }
    for (api, needle) in [
        (
            "[api]\nintegration_token = \"\"\n",
            "api.integration_token is empty",
        ),
        ("[api]\nread_token = \" \"\n", "api.read_token is empty"),
    ] {
        let err = Config::parse(&format!("{base}{api}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{api:?}: {err}");
    }
    // Each method with its credential is accepted, and the method is implied.
    let c = Config::parse(&format!(
        "{base}[[source]]\nname = \"h\"\nkey = \"json:/id\"\nsecret = \"k\"\nprevious_secret = \"o\"\n\
         [[source]]\nname = \"t\"\npreset = \"tilda\"\ntoken = \"x\"\nprevious_token = \"y\"\n"
    ))
    .unwrap();
    assert_eq!(c.source("h").unwrap().auth, Some(SourceAuth::Hmac));
    assert_eq!(
        c.source("h").unwrap().replay_window,
        Duration::from_secs(300)
    );
    assert_eq!(c.source("t").unwrap().auth, Some(SourceAuth::Token));
}

#[test]
fn only_inbox_is_compared_without_regard_to_case() {
    assert!(same_mailbox("INBOX", "inbox"));
    assert!(same_mailbox("Inbox", "INBOX"));
    assert!(same_mailbox("Leads", "Leads"));
    // Other names are the server's to compare: "leads" may well be another folder.
    assert!(!same_mailbox("Leads", "leads"));
    assert!(!same_mailbox("INBOX/Done", "inbox/done"));
    let toml = "[[source]]\nname = \"m\"\npreset = \"imap\"\n[source.pull]\n\
url = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\n\
mailbox = \"Leads\"\nmove_to = \"leads\"\n";
    let c = Config::parse(&format!(
        "[database]\nurl = \"sqlite::memory:\"\n[crm]\nkind = \"http\"\nurl = \"http://x\"\n{toml}"
    ));
    assert!(
        c.as_ref()
            .err()
            .is_none_or(|e| !e.to_string().contains("pull.move_to is the mailbox read")),
        "{c:?}"
    );
}

#[test]
fn the_spool_is_where_it_is_put_else_under_systemds_state_directory_else_nowhere() {
    let spool = |extra: &str| {
        Config::parse(&format!(
            "[database]\nurl = \"sqlite::memory:\"\n[spool]\n{extra}"
        ))
        .unwrap()
        .spool
    };
    let dir = |s: &SpoolConfig, state: Option<&str>| s.directory(state);
    let default = spool("");
    assert_eq!(default.patience, Duration::from_secs(2));
    assert_eq!(dir(&default, None), None);
    assert_eq!(
        dir(&default, Some("/var/lib/leadgate:/var/lib/other")),
        Some("/var/lib/leadgate/spool".into())
    );
    let set = spool("dir = \"/srv/spool-a\"\npatience = \"500ms\"\nmax_size = \"1MiB\"");
    assert_eq!(
        dir(&set, Some("/var/lib/leadgate")),
        Some("/srv/spool-a".into())
    );
    assert_eq!(set.max_size.as_u64(), 1024 * 1024);
    let off = spool("enabled = false\ndir = \"/srv/spool-a\"");
    assert_eq!(dir(&off, Some("/var/lib/leadgate")), None);
    assert!(Config::parse("[database]\nurl = \"sqlite::memory:\"\n[spool]\nsize = 1\n").is_err());
}
