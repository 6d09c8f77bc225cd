//! The `leadgate` command line. Each subcommand is a thin shell over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::domain::OperationId;
use crate::store::{self, Store};

mod feed;
mod rules;
mod tenant;
use feed::{feed, FeedCommand};
use rules::{rules, RulesCommand};
use tenant::{tenant, TenantCommand};

#[derive(Debug, Parser)]
#[command(
    name = "leadgate",
    version,
    about = "One lead in, exactly one CRM result out."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
struct ConfigArg {
    /// The configuration file (TOML). `LEADGATE_DATABASE_URL` overrides its database URL
    /// and may stand in for the file.
    #[arg(long, short = 'c', value_name = "PATH")]
    config: Option<PathBuf>,
}

impl ConfigArg {
    fn load(&self) -> anyhow::Result<Config> {
        Ok(Config::load(self.config.as_deref())?)
    }
}

/// The administration login of `leadgate user add/remove`: not the gateway's.
#[derive(clap::Args)]
struct AdminArg {
    /// A PostgreSQL URL whose login may create roles (CREATEROLE), on the gateway's
    /// server (any database, e.g. `postgres`). Prefer the environment: a command line is
    /// visible to every user of the machine. Never put it in the service's environment.
    #[arg(
        long,
        value_name = "URL",
        env = "LEADGATE_ADMIN_DATABASE_URL",
        hide_env_values = true
    )]
    admin_url: String,
}

impl std::fmt::Debug for AdminArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminArg { admin_url: *** }")
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the intake HTTP server, the worker and the reconciler.
    Serve(ConfigArg),
    /// Run only the worker and the reconciler (scale out: any number of `serve` and
    /// `worker` processes may share one PostgreSQL database).
    Worker(ConfigArg),
    /// Create or upgrade the operations database schema.
    Migrate(ConfigArg),
    /// The metrics of docs/SPEC.md as a table (the same figures as `/metrics`).
    Metrics(ConfigArg),
    /// Scrub payloads and contact data of finished operations, keeping tombstones (key,
    /// payload hash, status, crm_id) so late duplicates still get the first result.
    Purge {
        /// Finished operations last changed longer ago than this (default: retention.full);
        /// a tenant with its own `[tenant.retention] full` is scrubbed at that instead.
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: Option<std::time::Duration>,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Pause or resume CRM connectors.
    Connector {
        #[command(subcommand)]
        command: ConnectorCommand,
    },
    /// Look at operations.
    Ops {
        #[command(subcommand)]
        command: OpsCommand,
    },
    /// Find the duplicates the CRM already has and name each pair's cause (read-only).
    Diagnose(Box<DiagnoseArgs>),
    /// The people who use the console: PostgreSQL logins in Leadgate's roles.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// The web console (`[console]`).
    Console {
        #[command(subcommand)]
        command: ConsoleCommand,
    },
    /// The business rules in the database: per source, what a contact match means, the
    /// matching window and the channel (the console's Rules screen).
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
    /// The signed event feed's subscribers (Standard Webhooks): subscribe, list, remove,
    /// enable, deliveries.
    Feed {
        #[command(subcommand)]
        command: FeedCommand,
    },
    /// Fleet mode (preview: the registry only, gateways do not serve tenants yet): the
    /// tenants, one CRM portal each (apply a tenants file, list, pause, resume).
    Tenant {
        #[command(subcommand)]
        command: TenantCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ConsoleCommand {
    /// The SQLite operator's account for the web console: reads a password (twice, not
    /// echoed, at a terminal; one line from a pipe) and prints the two `[console]` lines
    /// that let `operator` sign in with it. Nothing is written anywhere.
    Password {
        /// The login the operator signs in with.
        #[arg(long)]
        operator: String,
    },
    /// The web console's sign-in journal, newest first: when, who, from where, how it
    /// ended (never a password). On PostgreSQL an admin's login may read it.
    SignIns {
        /// Only this login's.
        #[arg(long)]
        login: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[command(flatten)]
        config: ConfigArg,
    },
}

#[derive(Debug, Subcommand)]
enum UserCommand {
    /// Create a person's login with a generated password, and print how to connect.
    Add {
        /// The login, e.g. `anna.petrova`.
        name: String,
        /// support, sales_ops, manager or admin.
        #[arg(long)]
        role: crate::domain::roles::Role,
        /// In fleet mode, the tenants the person works for: slugs separated by commas
        /// (`acme,beta`), or `all` (an integrator's staff). Without it: the default tenant.
        #[arg(long, value_name = "TENANTS")]
        tenants: Option<store::logins::PersonTenants>,
        #[command(flatten)]
        admin: AdminArg,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Change the tenants a person's login reads (fleet mode): `--tenants acme,beta` or
    /// `--tenants all`.
    Tenants {
        name: String,
        #[arg(long, value_name = "TENANTS")]
        tenants: store::logins::PersonTenants,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// List the people's logins and their roles.
    List {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Drop a person's login (what they did stays on the timelines, under their name).
    Remove {
        name: String,
        #[command(flatten)]
        admin: AdminArg,
        #[command(flatten)]
        config: ConfigArg,
    },
}

#[derive(Debug, clap::Args)]
struct DiagnoseArgs {
    /// A CSV export of the CRM's leads or deals (Bitrix24's or amoCRM's, `;` or `,`).
    #[arg(long, value_name = "PATH", required_unless_present_any = ["bitrix24", "amocrm"])]
    csv: Option<PathBuf>,
    /// Read Bitrix24 over its API instead, read-only, at the portal's pace (the webhook
    /// from `--bitrix24-webhook` or the configuration's `[crm]`).
    #[arg(long, conflicts_with = "csv")]
    bitrix24: bool,
    /// The Bitrix24 incoming-webhook URL (it holds a secret: prefer the environment).
    #[arg(
        long,
        env = "LEADGATE_DIAGNOSE_BITRIX24_WEBHOOK",
        hide_env_values = true
    )]
    bitrix24_webhook: Option<String>,
    /// Read amoCRM over its API v4 instead, read-only, at the account's pace: the
    /// configuration's `[crm]` of kind amocrm, or `--amocrm-url`, the token and
    /// `--amocrm-operation-field`.
    #[arg(long, conflicts_with_all = ["csv", "bitrix24"])]
    amocrm: bool,
    /// The account's address, `https://{subdomain}.amocrm.ru`.
    #[arg(long, value_name = "URL", requires = "amocrm_token")]
    amocrm_url: Option<String>,
    /// A long-lived token of the account (a secret: prefer the environment).
    #[arg(long, env = "LEADGATE_DIAGNOSE_AMOCRM_TOKEN", hide_env_values = true)]
    amocrm_token: Option<String>,
    /// The custom text field of leads that holds Leadgate's operation_id (with
    /// `--amocrm-url`; the configuration's `operation_field_id` otherwise).
    #[arg(long, value_name = "ID")]
    amocrm_operation_field: Option<u64>,
    /// A custom field of leads naming their source (default: the `UTM_SOURCE`
    /// tracking field).
    #[arg(long, value_name = "ID")]
    amocrm_source_field: Option<u64>,
    /// The entities created this long ago until now (default for the API: 30 days; for
    /// a CSV export: every row).
    #[arg(long, value_parser = humantime::parse_duration)]
    since: Option<std::time::Duration>,
    /// The time zone of an export's times that carry none, as an offset.
    #[arg(long, default_value = "+03:00", value_name = "OFFSET")]
    export_offset: String,
    /// n8n's database, read-only: its SQLite file (`~/.n8n/database.sqlite`) or a
    /// `postgres://` URL (prefer `LEADGATE_DIAGNOSE_N8N_DATABASE` for one with a password).
    #[arg(
        long,
        value_name = "PATH|URL",
        env = "LEADGATE_DIAGNOSE_N8N_DATABASE",
        hide_env_values = true
    )]
    n8n_database: Option<String>,
    /// Only this n8n workflow's executions.
    #[arg(long, value_name = "ID")]
    n8n_workflow: Option<String>,
    /// The same content this close together counts as one submission.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    window: std::time::Duration,
    /// Where the HTML report goes.
    #[arg(long, default_value = "leadgate-diagnosis.html", value_name = "PATH")]
    html: PathBuf,
    /// Where the Markdown report goes (none if not given).
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
    /// Leave Leadgate's journal out even if a database is configured.
    #[arg(long)]
    no_journal: bool,
    #[command(flatten)]
    config: ConfigArg,
}

#[derive(Debug, Subcommand)]
enum ConnectorCommand {
    /// Pause a connector by hand (a CRM's maintenance window, a migration): leads queue,
    /// nothing is sent and no attempt is used until it is resumed.
    Pause {
        /// The connector (default: the configured CRM's).
        name: Option<String>,
        /// Why, for everyone who sees it paused: the dashboard, `/metrics`'s readers, the
        /// alerts (at most 500 characters).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Resume a paused connector: its queued operations go to the CRM again.
    Resume {
        /// The connector (default: the configured CRM's).
        name: Option<String>,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// List connectors and whether they are paused.
    List {
        #[command(flatten)]
        config: ConfigArg,
    },
}

#[derive(Debug, Subcommand)]
enum OpsCommand {
    /// Status, open review cases and the newest timeline events of one operation.
    Show {
        /// The operation id, e.g. `site:12345`.
        id: String,
        /// How many of the newest timeline events to print (1–500).
        #[arg(long, default_value_t = crate::report::SHOW_EVENTS,
              value_parser = clap::value_parser!(i64).range(1..=crate::store::TIMELINE_PAGE_MAX))]
        events: i64,
        /// Print the events older than this event id (the line above the events says it).
        #[arg(long, value_name = "EVENT_ID")]
        before: Option<i64>,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Find operations of any status by key (exact or prefix), phone (any format), e-mail,
    /// crm_id or name (the prefix of any word), newest first.
    Find {
        /// What to look for: `site:123`, `8 (999) 123-45-67`, `ivan@example.com`, `Иван`…
        query: String,
        /// Results per page (1–200).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(i64).range(1..=200))]
        limit: i64,
        /// Continue after this cursor (printed at the end of the previous page).
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
        /// One JSON object: `hits` and `next` (the cursor, or null).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        config: ConfigArg,
    },
}

pub async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leadgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Human-readable logs by default, JSON lines with `LEADGATE_LOG_FORMAT=json`;
/// `RUST_LOG` filters (default `info`).
pub fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let wire = tracing_subscriber::filter::filter_fn(|m| !logs_wire_content(m));
    let _ = if std::env::var("LEADGATE_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().finish().with(wire).try_init()
    } else {
        builder.finish().with(wire).try_init()
    };
}

/// Crates that log what crosses the wire at debug or trace level, whatever `RUST_LOG`
/// says: async-imap logs every command (`LOGIN "user" "password"`) and answer (whole
/// messages), imap-proto what it parses. They are held to `info`.
const WIRE_LOGGERS: [&str; 2] = ["async_imap", "imap_proto"];

/// Whether an event is one of the wire loggers' below `info` (and so never written).
pub fn logs_wire_content(m: &tracing::Metadata<'_>) -> bool {
    *m.level() > tracing::Level::INFO
        && WIRE_LOGGERS.iter().any(|c| {
            m.target() == *c
                || m.target()
                    .strip_prefix(c)
                    .is_some_and(|rest| rest.starts_with("::"))
        })
}

/// Who acts from this terminal, for the timeline.
fn actor() -> String {
    std::env::var("LEADGATE_OPERATOR")
        .or_else(|_| std::env::var("USER"))
        .map(|u| format!("cli:{u}"))
        .unwrap_or_else(|_| "cli".into())
}

async fn open(config: &Config) -> anyhow::Result<std::sync::Arc<dyn Store>> {
    Ok(store::connect(config.database.url.expose()).await?)
}

/// The connector a command names, or the configured CRM's; a name neither configured nor
/// known to the database is refused (a typo would pause nothing).
async fn connector_named(
    name: Option<String>,
    config: &Config,
    store: &dyn Store,
) -> anyhow::Result<String> {
    let configured = config.crm.as_ref().map(crate::crm::connector_name);
    let Some(name) = name else {
        return configured
            .map(str::to_owned)
            .ok_or_else(|| anyhow::anyhow!("name the connector: the configuration has no [crm]"));
    };
    let known: Vec<String> = store
        .connectors()
        .await?
        .into_iter()
        .map(|c| c.name)
        .collect();
    if configured == Some(name.as_str()) || known.contains(&name) {
        return Ok(name);
    }
    let esc = crate::domain::text::escape_controls;
    anyhow::bail!(
        "there is no connector `{}`; the connectors are: {}",
        esc(&name),
        if known.is_empty() {
            "none yet (a worker adds its CRM's when it starts)".into()
        } else {
            known.join(", ")
        }
    )
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(c) => {
            let config = c.load()?;
            crate::app::start(&config, crate::app::Mode::Serve)
                .await?
                .until_signal()
                .await;
        }
        Command::Worker(c) => {
            let config = c.load()?;
            crate::app::start(&config, crate::app::Mode::Worker)
                .await?
                .until_signal()
                .await;
        }
        Command::Connector {
            command:
                ConnectorCommand::Pause {
                    name,
                    reason,
                    config,
                },
        } => {
            let config = config.load()?;
            let store = open(&config).await?;
            let name = connector_named(name, &config, &*store).await?;
            let ask = store::Ask::PauseConnector {
                name: name.clone(),
                reason,
            };
            match store.perform(&actor(), ask, store.now()).await? {
                store::Answer::Paused { paused: true } => println!(
                    "connector `{name}` paused: its leads queue and nothing goes to the CRM \
                     until `leadgate connector resume {name}`"
                ),
                _ => println!("connector `{name}` was paused already; nothing changed"),
            }
        }
        Command::Connector {
            command: ConnectorCommand::Resume { name, config },
        } => {
            let config = config.load()?;
            let store = open(&config).await?;
            let name = connector_named(name, &config, &*store).await?;
            if store.resume_connector(&name, &actor(), store.now()).await? {
                println!("connector `{name}` resumed; its queued operations go to the CRM again");
            } else {
                println!("connector `{name}` was not paused");
            }
        }
        Command::Connector {
            command: ConnectorCommand::List { config },
        } => {
            let store = open(&config.load()?).await?;
            for c in store.connectors().await? {
                let state = match (c.paused, c.by_hand) {
                    (true, true) => "PAUSED by hand",
                    (true, false) => "PAUSED",
                    _ => "active",
                };
                // Stored text, printed with its control characters escaped.
                let esc = crate::domain::text::escape_controls;
                println!(
                    "{:<16} {state:<14} since {} by {}{}",
                    esc(&c.name),
                    c.since.to_rfc3339(),
                    esc(&c.changed_by),
                    c.reason
                        .map(|r| format!(": {}", esc(&r)))
                        .unwrap_or_default()
                );
            }
        }
        Command::Metrics(c) => {
            let config = c.load()?;
            let store = open(&config).await?;
            let fleet = store
                .fleet_metrics(store.now(), config.review.stale_after)
                .await?;
            // With tenants, each tenant's table under its name.
            let many = fleet.iter().any(|t| !t.tenant.is_default());
            for (i, t) in fleet.iter().enumerate() {
                if many {
                    println!("{}tenant {}", if i > 0 { "\n" } else { "" }, t.slug);
                }
                print!("{}", crate::metrics::table(&t.metrics));
            }
        }
        Command::Purge { older_than, config } => {
            let config = config.load()?;
            let store = open(&config).await?;
            let older_than = older_than.unwrap_or(config.retention.full);
            let cutoff = store::before(store.now(), older_than);
            let r = store::purge(store.as_ref(), cutoff, crate::app::PURGE_BATCH).await?;
            println!(
                "purged {} finished operations (tombstones kept), {} journal entries, {} console \
                 sign-ins, {} answered requests and {} event-feed deliveries still owed, older than {}",
                r.operations,
                r.deliveries,
                r.sign_ins,
                r.requests,
                r.feed_owed,
                humantime::format_duration(older_than)
            );
            // Tenants with a window of their own: at it, whatever `--older-than` says.
            let own = crate::app::purge_own_windows(store.as_ref()).await?;
            if own.operations + own.deliveries > 0 {
                println!(
                    "and {} finished operations, {} journal entries of tenants at their own \
                     retention windows",
                    own.operations, own.deliveries
                );
            }
        }
        Command::Migrate(c) => {
            let config = c.load()?;
            let store = open(&config).await?;
            println!("the {} operations database is up to date", store.backend());
        }
        Command::Ops {
            command:
                OpsCommand::Show {
                    id,
                    events,
                    before,
                    config,
                },
        } => {
            let config = config.load()?;
            let id: OperationId = id
                .parse()
                .map_err(|e| anyhow::anyhow!("`{id}` is not an operation id: {e}"))?;
            let store = open(&config).await?;
            match crate::report::operation(store.as_ref(), &id, before, events).await? {
                Some(text) => print!("{text}"),
                None => {
                    eprintln!("leadgate: no operation `{id}`");
                    return Ok(ExitCode::from(2));
                }
            }
        }
        Command::Ops {
            command:
                OpsCommand::Find {
                    query,
                    limit,
                    after,
                    json,
                    config,
                },
        } => {
            let config = config.load()?;
            // Read as intake reads phones: in the configured default region.
            let region: crate::domain::contact::Region = config
                .matching
                .default_region
                .parse()
                .map_err(anyhow::Error::msg)?;
            let query = store::SearchQuery::parse(&query, region)?;
            let after = after
                .map(|c| c.parse::<store::SearchCursor>())
                .transpose()
                .map_err(|e| anyhow::anyhow!(e))?;
            let store = open(&config).await?;
            let page = store
                .search(&query, after.as_ref(), limit, store::SearchPlan::Auto)
                .await?;
            if json {
                println!("{}", crate::report::search_json(&page));
            } else {
                print!("{}", crate::report::search(&page));
            }
        }
        Command::Diagnose(args) => diagnose(*args).await?,
        Command::User { command } => return user(command).await,
        Command::Console {
            command: ConsoleCommand::Password { operator },
        } => {
            let password = crate::console_web::password::read_new()?;
            let hash = crate::console_web::password::hash(&password).map_err(anyhow::Error::msg)?;
            println!("[console]\noperator = {operator:?}\noperator_password_hash = {hash:?}");
        }
        Command::Console {
            command:
                ConsoleCommand::SignIns {
                    login,
                    limit,
                    config,
                },
        } => {
            let config = config.load()?;
            let store = store::open(config.database.url.expose()).await?;
            for a in store.sign_ins(login.as_deref(), limit).await? {
                println!(
                    "{} {:<20} {:<40} {}",
                    a.at.to_rfc3339(),
                    a.login.as_deref().unwrap_or("(not a login)"),
                    a.client,
                    a.outcome
                );
            }
        }
        Command::Rules { command } => return rules(command).await,
        Command::Feed { command } => return feed(command).await,
        Command::Tenant { command } => return tenant(command).await,
    }
    Ok(ExitCode::SUCCESS)
}

/// `leadgate user`: PostgreSQL only (SQLite is one operator's file).
async fn user(command: UserCommand) -> anyhow::Result<ExitCode> {
    let config = match &command {
        UserCommand::Add { config, .. }
        | UserCommand::List { config }
        | UserCommand::Tenants { config, .. }
        | UserCommand::Remove { config, .. } => config.load()?,
    };
    let url = config.database.url.expose();
    if store::Backend::of(url)? != store::Backend::Postgres {
        anyhow::bail!(
            "people's logins are PostgreSQL's: on SQLite the console runs in local \
             single-operator mode, with the OS user as the actor"
        );
    }
    // The gateway's own login: the schema's owner gives the grants and CONNECT.
    let store = store::postgres::PgStore::connect(url).await?;
    match command {
        UserCommand::Add {
            name,
            role,
            tenants,
            admin,
            ..
        } => {
            let admin = store::logins::LoginAdmin::connect(&admin.admin_url).await?;
            let tenants = tenants.unwrap_or(store::logins::PersonTenants::Default);
            let password = admin.add_user_in(&store, &name, role, &tenants).await?;
            println!(
                "created the login `{name}` with the role {role} in the tenants {tenants}; \
                 its password (shown once):"
            );
            println!("  {password}");
            println!("connect the console with:");
            println!("  {}", console_url(url, &name, &password));
        }
        UserCommand::List { .. } => {
            let tenants = store.people_tenants().await?;
            for u in store.users().await? {
                let also: Vec<String> = u.also.iter().map(|r| r.to_string()).collect();
                let of = tenants
                    .get(&u.login)
                    .unwrap_or(&store::logins::PersonTenants::Default);
                if also.is_empty() {
                    println!("{:<24} {:<10} tenants: {of}", u.login, u.role.to_string());
                } else {
                    println!(
                        "{:<24} {:<10} tenants: {of} (also in {}: asks as {}, reads what all allow; revoke the others)",
                        u.login,
                        u.role.to_string(),
                        also.join(", "),
                        u.role
                    );
                }
            }
        }
        UserCommand::Tenants { name, tenants, .. } => {
            if !store.users().await?.iter().any(|u| u.login == name) {
                eprintln!("leadgate: `{name}` is not a login in one of Leadgate's roles");
                return Ok(ExitCode::from(2));
            }
            store.set_person_tenants(&name, &tenants).await?;
            println!("`{name}` now reads the tenants {tenants}");
        }
        UserCommand::Remove { name, admin, .. } => {
            let admin = store::logins::LoginAdmin::connect(&admin.admin_url).await?;
            if !admin.remove_user(&store, &name).await? {
                eprintln!("leadgate: `{name}` is not a login in one of Leadgate's roles");
                return Ok(ExitCode::from(2));
            }
            println!("dropped the login `{name}`");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The gateway's database URL with a person's login instead of the gateway's.
fn console_url(url: &str, login: &str, password: &str) -> String {
    crate::console_web::person_url(url, login, password)
        .unwrap_or_else(|| format!("postgres://{login}:{password}@HOST:5432/DATABASE"))
}

/// `leadgate diagnose`: the journal when a database is configured, progress on stderr,
/// the reports written, the totals printed.
async fn diagnose(a: DiagnoseArgs) -> anyhow::Result<()> {
    use crate::diagnose::{report, run};
    let configured =
        a.config.config.is_some() || std::env::var_os("LEADGATE_DATABASE_URL").is_some();
    let config = if configured {
        Some(a.config.load()?)
    } else {
        None
    };
    let region: crate::domain::contact::Region = match &config {
        Some(c) => c
            .matching
            .default_region
            .parse()
            .map_err(anyhow::Error::msg)?,
        None => Default::default(),
    };
    // The operations database: the journal (unless left out), and where the report is
    // saved for the console.
    let database = match &config {
        Some(c) => Some(store::open(c.database.url.expose()).await?),
        None => None,
    };
    let store = database.clone().filter(|_| !a.no_journal);
    // This machine's clock: the window ends now for the person running the report, and
    // there may be no operations database to ask.
    let now = store::local_now();
    let since = a
        .since
        .map(|s| chrono::TimeDelta::from_std(s).map_err(anyhow::Error::msg))
        .transpose()?;
    let crm = match a.csv {
        None if a.amocrm => {
            let settings = match (&a.amocrm_url, &a.amocrm_token, &config) {
                (Some(url), Some(token), _) => crate::crm::amocrm::Settings {
                    base_url: url.clone(),
                    auth: crate::crm::amocrm::Auth::Token(token.clone()),
                    operation_field_id: a.amocrm_operation_field.ok_or_else(|| {
                        anyhow::anyhow!("--amocrm-url needs --amocrm-operation-field")
                    })?,
                    pipeline_id: None,
                    rate_limit: crate::crm::amocrm::DEFAULT_RATE_LIMIT,
                    timeout: std::time::Duration::from_secs(30),
                },
                (None, _, Some(c)) => match (&c.crm, &database) {
                    (Some(crm @ crate::crm::CrmConfig::Amocrm { .. }), Some(s)) => {
                        crate::crm::amocrm_settings(crm, s.clone())?
                    }
                    _ => anyhow::bail!("--amocrm needs --amocrm-url and a token, or a [crm] of kind amocrm"),
                },
                _ => anyhow::bail!("--amocrm needs --amocrm-url and a token (LEADGATE_DIAGNOSE_AMOCRM_TOKEN), or a [crm] of kind amocrm"),
            };
            let operation_field_id = a
                .amocrm_operation_field
                .unwrap_or(settings.operation_field_id);
            run::CrmInput::AmoCrm {
                settings: Box::new(settings),
                fields: crate::diagnose::AmoFields {
                    operation_field_id,
                    source_field_id: a.amocrm_source_field,
                },
                find_older: true,
            }
        }
        Some(path) => run::CrmInput::Csv {
            path,
            offset: a
                .export_offset
                .parse::<chrono::FixedOffset>()
                .map_err(|e| anyhow::anyhow!("--export-offset `{}`: {e}", a.export_offset))?,
        },
        None => {
            let from_config = config.as_ref().and_then(|c| match &c.crm {
                Some(crate::crm::CrmConfig::Bitrix24 {
                    webhook_url,
                    rate_limit,
                    burst,
                    ..
                }) => Some((webhook_url.expose().to_owned(), *rate_limit, *burst)),
                _ => None,
            });
            match (a.bitrix24_webhook, from_config) {
                (Some(url), _) => run::CrmInput::bitrix24(&url),
                (None, Some((url, rate_limit, burst))) => run::CrmInput::Bitrix24 {
                    webhook_url: url,
                    rate_limit,
                    burst,
                    find_older: true,
                },
                (None, None) => anyhow::bail!(
                    "--bitrix24 needs --bitrix24-webhook (or LEADGATE_DIAGNOSE_BITRIX24_WEBHOOK) or a [crm] of kind bitrix24"
                ),
            }
        }
    };
    let period = match (&crm, since) {
        (_, Some(s)) => Some((now - s, now)),
        (run::CrmInput::Bitrix24 { .. } | run::CrmInput::AmoCrm { .. }, None) => {
            Some((now - chrono::TimeDelta::days(30), now))
        }
        (run::CrmInput::Csv { .. }, None) => None,
    };
    let request = run::Request {
        crm,
        period,
        store,
        n8n: a.n8n_database.map(|p| (p, a.n8n_workflow)),
        options: crate::diagnose::Options {
            region,
            window: chrono::TimeDelta::from_std(a.window).map_err(anyhow::Error::msg)?,
        },
    };
    let d = run::run(&request, &mut |line| eprintln!("leadgate diagnose: {line}")).await?;
    std::fs::write(&a.html, report::to_html(&d))?;
    if let Some(path) = &a.markdown {
        std::fs::write(path, report::to_markdown(&d))?;
    }
    if let Some(db) = &database {
        match run::save(&**db, &d).await {
            Ok(id) => eprintln!("leadgate diagnose: saved as report {id} for the console"),
            Err(e) => eprintln!("leadgate diagnose: the report was not saved for the console: {e}"),
        }
    }
    let t = report::totals(&d);
    println!("{} duplicate groups, {} pairs", d.groups.len(), t.pairs);
    for v in crate::diagnose::verdict::Verdict::ALL {
        println!(
            "  {:<40} {}",
            v.title(),
            t.per_verdict.get(&v).copied().unwrap_or(0)
        );
    }
    println!("report: {}", a.html.display());
    if let Some(path) = &a.markdown {
        println!("markdown: {}", path.display());
    }
    Ok(())
}
