//! `leadgate tenant`: fleet mode's tenants (src/tenants.rs). Run with the gateway's
//! configuration: its `[crm]` is the default tenant's, and its login owns the specs.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use super::{actor, open, ConfigArg};
use crate::domain::text::escape_controls as esc;
use crate::store::TenantState;

#[derive(Debug, Subcommand)]
pub(super) enum TenantCommand {
    /// Create or change the tenants a file describes (TOML `[[tenant]]`s, or CSV with
    /// dotted headers); tenants it no longer names are paused. Applying the same file
    /// again changes nothing. Needs LEADGATE_TOKEN_KEY: specs are stored encrypted.
    Apply {
        file: PathBuf,
        /// A TOML file whose `[tenant]` table is merged under every tenant.
        #[arg(long)]
        defaults: Option<PathBuf>,
        /// Remove the tenants the file no longer names instead of pausing them: their
        /// specs and credentials are forgotten; their slugs stay taken.
        #[arg(long)]
        prune: bool,
        /// Say what would change, change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Every tenant: id, slug, state (and why paused), weight, calls at once, version, name.
    List {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Pause a tenant: its leads are journaled and wait; nothing goes to its CRM.
    Pause {
        slug: String,
        /// Why (shown with the tenant).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Resume a paused tenant.
    Resume {
        slug: String,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Write a tenant's operations as JSON lines (one per operation, with its timeline):
    /// what its client takes away. It holds the leads' personal data.
    Export {
        slug: String,
        /// The file to write (created; an existing one is refused); `-` for stdout.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Erase a paused or removed tenant's personal data: every finished operation
    /// scrubbed to its tombstone (key, payload hash, status, CRM id, dates), its journal
    /// bodies and contact locks. Open work is left whole and counted: run it again once
    /// that work is finished.
    Erase {
        slug: String,
        /// Say yes: the data cannot be brought back.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        config: ConfigArg,
    },
}

pub(super) async fn tenant(command: TenantCommand) -> anyhow::Result<ExitCode> {
    let refuse = |e: String| {
        eprintln!("leadgate: {e}; nothing was changed");
        Ok(ExitCode::from(2))
    };
    match command {
        TenantCommand::Apply {
            file,
            defaults,
            prune,
            dry_run,
            config,
        } => {
            let config = config.load()?;
            // Checked before the database is opened: bad input costs nothing.
            let wanted = match crate::config::tenants::read(&file, defaults.as_deref()) {
                Ok(w) => w,
                Err(e) => return refuse(e),
            };
            // Each source as intake will read it (keys, windows, signatures): refused here,
            // not by the gateways that would serve it.
            for e in &wanted {
                if let Err(why) = crate::intake::sources::sources(&e.spec.sources) {
                    return refuse(format!("tenant `{}`: {why}", e.spec.slug));
                }
            }
            let vault = match crate::tenants::vault(&config.fleet) {
                Ok(v) => v,
                Err(e) => return refuse(e),
            };
            let store = open(&config).await?;
            let default_portal = config.crm.as_ref().and_then(|c| c.portal());
            match crate::tenants::apply(
                &*store,
                &vault,
                &wanted,
                prune,
                dry_run,
                default_portal,
                &actor(),
            )
            .await
            {
                Ok(plan) => {
                    if dry_run {
                        println!("dry run: nothing was changed; applying the file would make");
                    }
                    println!("{}", plan.summary());
                }
                Err(e) => return refuse(e),
            }
        }
        TenantCommand::List { config } => {
            let store = open(&config.load()?).await?;
            for t in store.tenants().await? {
                let state = match &t.paused_reason {
                    Some(why) if t.state == TenantState::Paused => {
                        format!("PAUSED ({})", esc(why))
                    }
                    _ => t.state.to_string(),
                };
                println!(
                    "{:<4} {:<32} {state} weight {} at-once {} v{} {}",
                    t.id,
                    t.slug,
                    t.weight,
                    t.max_in_flight,
                    t.version,
                    esc(&t.name)
                );
            }
        }
        TenantCommand::Pause {
            slug,
            reason,
            config,
        } => {
            let why = reason.unwrap_or_else(|| "paused by hand".into());
            if let Err(e) = crate::domain::text::check_pause_reason(&why) {
                return refuse(e.to_string());
            }
            let why = crate::domain::text::mask_contacts(why.trim());
            let store = open(&config.load()?).await?;
            if slug == crate::domain::TenantSlug::DEFAULT {
                return refuse(
                    "the default tenant is paused as a connector: `leadgate connector pause`"
                        .into(),
                );
            }
            if !store
                .set_tenant_state(
                    &slug,
                    TenantState::Paused,
                    Some(&why),
                    &actor(),
                    store.now(),
                )
                .await?
            {
                return refuse(format!("there is no tenant `{}`", esc(&slug)));
            }
            println!("tenant `{slug}` paused: its leads wait; `leadgate tenant resume {slug}`");
        }
        TenantCommand::Resume { slug, config } => {
            let store = open(&config.load()?).await?;
            if !store
                .set_tenant_state(&slug, TenantState::Active, None, &actor(), store.now())
                .await?
            {
                return refuse(format!("there is no tenant `{}`", esc(&slug)));
            }
            println!("tenant `{slug}` is active");
        }
        TenantCommand::Export { slug, out, config } => {
            let store = open(&config.load()?).await?;
            let Some(tenant) = tenant_named(&*store, &slug).await? else {
                return refuse(format!("there is no tenant `{}`", esc(&slug)));
            };
            let view = store.for_tenant(crate::domain::TenantId(tenant.id));
            let n = if out.as_os_str() == "-" {
                crate::tenants::export(&*view, std::io::stdout().lock()).await?
            } else {
                // It holds the leads' personal data: readable by its owner alone.
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
                let file = match options.open(&out) {
                    Ok(f) => f,
                    Err(e) => return refuse(format!("{}: {e}", out.display())),
                };
                let n = crate::tenants::export(&*view, std::io::BufWriter::new(file)).await?;
                eprintln!(
                    "wrote {n} operations of tenant `{slug}` to {}",
                    out.display()
                );
                n
            };
            tracing::info!(tenant = %slug, operations = n, "tenant exported");
        }
        TenantCommand::Erase { slug, yes, config } => {
            let store = open(&config.load()?).await?;
            let Some(tenant) = tenant_named(&*store, &slug).await? else {
                return refuse(format!("there is no tenant `{}`", esc(&slug)));
            };
            if tenant.id == crate::domain::TenantId::DEFAULT.0 {
                return refuse(
                    "the default tenant is erased by retention (`leadgate purge --older-than`)"
                        .into(),
                );
            }
            if tenant.state == TenantState::Active {
                return refuse(format!(
                    "tenant `{slug}` is active: erasing is for a tenant that left; pause it first \
                     (`leadgate tenant pause {slug}`): its CRM gets no call, and leads that still \
                     arrive are kept until this is run again"
                ));
            }
            if !yes {
                return refuse(format!(
                    "erasing tenant `{slug}` cannot be undone: say --yes (`leadgate tenant \
                     export {slug} --out FILE` first keeps a copy)"
                ));
            }
            let view = store.for_tenant(crate::domain::TenantId(tenant.id));
            let r = crate::store::erase(&*view, crate::app::PURGE_BATCH).await?;
            println!(
                "erased tenant `{slug}`: {} finished operations scrubbed to tombstones, {} \
                 journal entries; {} operations left whole (not finished, or with an open case \
                 or a pending CRM update): run it again once they are",
                r.operations, r.deliveries, r.left_whole
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The registry's tenant `slug`.
async fn tenant_named(
    store: &dyn crate::store::Store,
    slug: &str,
) -> anyhow::Result<Option<crate::store::Tenant>> {
    Ok(store.tenants().await?.into_iter().find(|t| t.slug == slug))
}
