//! The `leadgate` command line. Each subcommand is a thin shell over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::domain::OperationId;
use crate::store::{self, Store};

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

#[derive(Debug, Subcommand)]
enum Command {
    /// Create or upgrade the operations database schema.
    Migrate(ConfigArg),
    /// Look at operations.
    Ops {
        #[command(subcommand)]
        command: OpsCommand,
    },
}

#[derive(Debug, Subcommand)]
enum OpsCommand {
    /// Status, open review cases and the full timeline of one operation.
    Show {
        /// The operation id, e.g. `site:12345`.
        id: String,
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
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if std::env::var("LEADGATE_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

async fn open(config: &Config) -> anyhow::Result<std::sync::Arc<dyn Store>> {
    Ok(store::connect(config.database.url.expose()).await?)
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Migrate(c) => {
            let config = c.load()?;
            let store = open(&config).await?;
            println!("the {} operations database is up to date", store.backend());
        }
        Command::Ops {
            command: OpsCommand::Show { id, config },
        } => {
            let config = config.load()?;
            let id: OperationId = id
                .parse()
                .map_err(|e| anyhow::anyhow!("`{id}` is not an operation id: {e}"))?;
            let store = open(&config).await?;
            match crate::report::operation(store.as_ref(), &id).await? {
                Some(text) => print!("{text}"),
                None => {
                    eprintln!("leadgate: no operation `{id}`");
                    return Ok(ExitCode::from(2));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
