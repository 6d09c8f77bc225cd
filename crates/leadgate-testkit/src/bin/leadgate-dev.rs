//! `leadgate-dev`: the developer's commands that are not part of the product — a fake
//! CRM to point a gateway at, and the demo player `make demo` runs.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "leadgate-dev",
    version,
    about = "Leadgate's developer tools: fake CRMs and the demo (not part of the product)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Play the eight pilot scenarios of docs/SPEC.md against a running gateway and fake CRM
    /// (what `make demo` runs) and print expected / observed / PASS-FAIL.
    Demo {
        /// The gateway's base URL.
        #[arg(long, default_value = "http://127.0.0.1:18080")]
        gateway: String,
        /// The fake CRM's base URL.
        #[arg(long, default_value = "http://127.0.0.1:18091")]
        crm: String,
        /// A second gateway on the same fake CRM with `entity = "contact_deal"`: plays
        /// the contact-and-deal scenario against it.
        #[arg(long)]
        deals_gateway: Option<String>,
        /// The gateway's configuration file (TOML). `LEADGATE_DATABASE_URL` overrides its
        /// database URL.
        #[arg(long, short = 'c', value_name = "PATH")]
        config: Option<std::path::PathBuf>,
    },
    /// Run a fake CRM that speaks the real wire format, with fault injection (for tests
    /// and the demo).
    FakeCrm {
        /// Which CRM to imitate.
        #[arg(long, value_enum, default_value = "bitrix24")]
        kind: FakeKind,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8091")]
        listen: std::net::SocketAddr,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum FakeKind {
    Bitrix24,
    Amocrm,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    leadgate::cli::init_logging();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leadgate-dev: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::FakeCrm { kind, listen } => match kind {
            FakeKind::Bitrix24 => leadgate_fakes::bitrix24::serve(listen).await?,
            FakeKind::Amocrm => leadgate_fakes::amocrm::serve(listen).await?,
        },
        Command::Demo {
            gateway,
            crm,
            deals_gateway,
            config,
        } => {
            let config = leadgate::config::Config::load(config.as_deref())?;
            let store = leadgate::store::connect(config.database.url.expose()).await?;
            let (passed, total) =
                leadgate_testkit::demo::Demo::new(&gateway, &crm, store, &config)?
                    .with_deals(deals_gateway.as_deref())
                    .play()
                    .await?;
            if passed != total {
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
