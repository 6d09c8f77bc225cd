//! The bulk loader the console benchmarks share (`benches/console.rs`,
//! `benches/web_console.rs`, each including this file as `mod load`): N operations (one per
//! second of the last N seconds) inserted with plain SQL — a load generator, not part of
//! the console; the metric triggers count them as they would count real traffic — with a
//! delivery and three timeline events each; every 100th is in review, every 250th failed.
//! Operation `i` is `site:b{i}`, phone `+7999` and `i` in 7 digits, e-mail
//! `client{i}@example.com`, CRM id `100000 + i` (when completed), and a name of its own
//! (first name `i % 40`, a surname of syllables: [`surname`]).
//!
//! A fleet ([`load_fleet`], `tenants` > 1): tenants `t1`… are registered, and the
//! operations of each second thousand (`i % 1000 >= 500`) are theirs in turn (thousand
//! `i / 1000` is tenant `1 + (i / 1000) % (tenants - 1)`'s), the rest the default
//! tenant's: every tenant's operations spread over the whole period, as a fleet's are.
//! A tenant's key is `t{k}/site:b{i}` ([`key`]).

use std::time::{Duration, Instant};

use leadgate::store;
use sqlx::Connection;

/// First names (each is every 40th lead: a prefix that matches many), syllables of
/// surnames and their endings: 40 × 20³ × 4 = 1,280,000 distinct names.
pub const FIRST_NAMES: [&str; 40] = [
    "Иван",
    "Пётр",
    "Анна",
    "Мария",
    "Алексей",
    "Елена",
    "Дмитрий",
    "Ольга",
    "Сергей",
    "Наталья",
    "Андрей",
    "Татьяна",
    "Михаил",
    "Ирина",
    "Николай",
    "Светлана",
    "Владимир",
    "Юлия",
    "Павел",
    "Екатерина",
    "Артём",
    "Ксения",
    "Роман",
    "Дарья",
    "Егор",
    "Полина",
    "Кирилл",
    "Софья",
    "Максим",
    "Вера",
    "Олег",
    "Алина",
    "Игорь",
    "Марина",
    "Денис",
    "Людмила",
    "John",
    "Emma",
    "Léa",
    "Zoë",
];
const SYLLABLES: [&str; 20] = [
    "ба", "ве", "го", "ду", "же", "за", "ки", "ло", "ма", "не", "по", "ру", "са", "те", "фу", "ха",
    "це", "ча", "ши", "ю",
];
const ENDINGS: [&str; 4] = ["ов", "ин", "ев", "ский"];

/// The lookup tables the seed joins: (k, display, search word as `domain::search` makes it).
fn name_tables() -> Vec<String> {
    let table = |name: &str, items: &[&str]| {
        let rows: Vec<String> = items
            .iter()
            .enumerate()
            .map(|(k, v)| {
                let w = leadgate::domain::search::words(v).join("");
                format!("({k}, '{v}', '{w}')")
            })
            .collect();
        [
            format!("create temp table {name} (k integer primary key, v text not null, w text not null)"),
            format!("insert into {name} (k, v, w) values {}", rows.join(", ")),
        ]
    };
    [
        table("b_first", &FIRST_NAMES),
        table("b_syl", &SYLLABLES),
        table("b_end", &ENDINGS),
    ]
    .concat()
}

/// Lead `i`'s name: first name, surname; the search words of both.
const NAME_JOINS: &str = "join b_first f on f.k = i % 40 join b_syl s1 on s1.k = (i / 40) % 20 \
     join b_syl s2 on s2.k = (i / 800) % 20 join b_syl s3 on s3.k = (i / 16000) % 20 \
     join b_end e on e.k = (i / 320000) % 4";
const SURNAME: &str = "s1.v || s2.v || s3.v || e.v";
const SURNAME_WORD: &str = "s1.w || s2.w || s3.w || e.w";

/// Lead `i`'s tenant in a fleet of `tenants` (0: the default tenant).
pub fn tenant_of(i: u64, tenants: u64) -> u64 {
    if tenants <= 1 || i % 1000 < 500 {
        0
    } else {
        1 + (i / 1000) % (tenants - 1)
    }
}

/// Lead `i`'s operation key in a fleet of `tenants`.
pub fn key(i: u64, tenants: u64) -> String {
    match tenant_of(i, tenants) {
        0 => format!("site:b{i}"),
        t => format!("t{t}/site:b{i}"),
    }
}

fn seed_sql(pg: bool, n: u64, tenants: u64) -> Vec<String> {
    // One base time for every statement: an operation's name rows carry its created_at.
    let base = store::local_now().format("%Y-%m-%dT%H:%M:%S");
    let (rows, ts, phone) = if pg {
        (
            format!("select i from generate_series(1, {n}) as s(i)"),
            format!("(timestamptz '{base}+00:00' - (i || ' seconds')::interval)"),
            "'+7999' || lpad(i::text, 7, '0')",
        )
    } else {
        (
            format!("with recursive s(i) as (select 1 union all select i + 1 from s where i < {n}) select i from s"),
            format!("strftime('%Y-%m-%dT%H:%M:%f+00:00', '{base}', '-' || i || ' seconds')"),
            "printf('+7999%07d', i)",
        )
    };
    // The lead's tenant and key (`tenant_of`, `key`).
    let tenant = if tenants <= 1 {
        "0".to_string()
    } else {
        format!(
            "(case when i % 1000 < 500 then 0 else 1 + (i / 1000) % {} end)",
            tenants - 1
        )
    };
    let id = format!(
        "(case when {tenant} = 0 then '' else 't' || {tenant} || '/' end || 'site:b' || i)"
    );
    let status = "case when i % 100 = 0 then 'needs_review' when i % 250 = 1 then 'failed_terminal' else 'completed' end";
    let mut sql = name_tables();
    if tenants > 1 {
        sql.push(format!(
            "insert into tenants (id, slug, name) select i, 't' || i, 'Tenant ' || i \
             from ({}) as q",
            if pg {
                format!("select i from generate_series(1, {}) as s(i)", tenants - 1)
            } else {
                format!(
                    "with recursive s(i) as (select 1 union all select i + 1 from s where i < {}) \
                     select i from s",
                    tenants - 1
                )
            }
        ));
    }
    sql.extend([
        format!(
            "insert into operations (tenant_id, operation_id, source, status, payload_hash, payload, crm_id, crm_link, \
             attempts, review_reason, contact_phone, contact_email, contact_name, name_words, \
             created_at, updated_at, next_attempt_at) \
             select {tenant}, {id}, case when i % 3 = 0 then 'tilda' else 'site' end, {status}, 'h' || i, \
             '{{\"name\":\"Client\",\"phone\":\"+79990000000\"}}', \
             case when i % 100 = 0 or i % 250 = 1 then null else '' || (100000 + i) end, \
             case when i % 100 = 0 or i % 250 = 1 then null else 'created' end, 1, \
             case when i % 100 = 0 then 'uncertain_outcome' end, {phone}, 'client' || i || '@example.com', \
             f.v || ' ' || {SURNAME}, ' ' || f.w || ' ' || {SURNAME_WORD} || ' ', {ts}, {ts}, {ts} \
             from ({rows}) as q {NAME_JOINS}"
        ),
        format!(
            "insert into operation_names (tenant_id, word, created_at, operation_id) \
             select {tenant}, f.w, {ts}, {id} from ({rows}) as q {NAME_JOINS} \
             union all select {tenant}, {SURNAME_WORD}, {ts}, {id} from ({rows}) as q {NAME_JOINS}"
        ),
        format!(
            "insert into deliveries (tenant_id, source, operation_id, received_at, payload, payload_hash, outcome, transform_version) \
             select {tenant}, 'site', {id}, {ts}, '{{}}', 'h' || i, 'new', 1 from ({rows}) as q"
        ),
        format!(
            "insert into timeline (tenant_id, operation_id, at, kind, actor, detail) \
             select {tenant}, {id}, {ts}, k.kind, 'bench', '{{}}' from ({rows}) as q \
             cross join (select 'delivery' as kind union all select 'claimed' union all select 'crm_created') as k"
        ),
        format!(
            "insert into review_cases (tenant_id, operation_id, reason, opened_at, detail) \
             select {tenant}, {id}, 'uncertain_outcome', {ts}, '{{}}' from ({rows}) as q where i % 100 = 0"
        ),
    ]);
    sql
}

/// Where migration 0004's backfill of the counters starts.
const BACKFILL: &str = "-- What a database migrated from an earlier version already holds.";

/// Lead `i`'s surname, as the seed writes it (first name `i % 40`, then syllables
/// `(i/40) % 20`, `(i/800) % 20`, `(i/16000) % 20` and ending `(i/320000) % 4`).
pub fn surname(i: u64) -> String {
    let syl = |k: u64| SYLLABLES[(k % 20) as usize];
    format!(
        "{}{}{}{}",
        syl(i / 40),
        syl(i / 800),
        syl(i / 16000),
        ENDINGS[((i / 320_000) % 4) as usize]
    )
}

/// Migrates the empty database at `url` (SQLite or PostgreSQL; on PostgreSQL the URL's
/// login must be a superuser: the load runs with the triggers off) and loads `n`
/// operations into it; answers how long the load took (the migration not counted).
pub async fn load(url: &str, n: u64) -> Duration {
    load_fleet(url, n, 1).await
}

/// [`load`] over a fleet of `tenants` (the default tenant and `t1`…; see the module's
/// note).
pub async fn load_fleet(url: &str, n: u64, tenants: u64) -> Duration {
    let pg = url.starts_with("postgres");
    // Migrates the empty database.
    drop(store::connect(url).await.expect("connect"));
    let t = Instant::now();
    if pg {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        // One statement updating one counter row a million times would build a million
        // row versions in one transaction (PostgreSQL walks them all on every update); real
        // traffic touches it once per transaction. So the load goes in with the triggers off
        // and the counters are rebuilt by the migration's own backfill, as for a database
        // upgraded to it.
        sqlx::query("set session_replication_role = replica")
            .execute(&mut c)
            .await
            .unwrap();
        for sql in seed_sql(true, n, tenants) {
            sqlx::query(&sql).execute(&mut c).await.unwrap();
        }
        sqlx::query("set session_replication_role = origin")
            .execute(&mut c)
            .await
            .unwrap();
        let migration = include_str!(
            "../../crates/leadgate-store/migrations/postgres/0004_metric_counters.sql"
        );
        let backfill = migration
            .split_once(BACKFILL)
            .expect("the migration's backfill section")
            .1;
        sqlx::query("truncate metric_counters, metric_series")
            .execute(&mut c)
            .await
            .unwrap();
        sqlx::raw_sql(backfill).execute(&mut c).await.unwrap();
        sqlx::query("vacuum analyze").execute(&mut c).await.unwrap();
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        for sql in seed_sql(false, n, tenants) {
            sqlx::query(&sql).execute(&mut c).await.unwrap();
        }
        sqlx::query("analyze").execute(&mut c).await.unwrap();
    }
    t.elapsed()
}
