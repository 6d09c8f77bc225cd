//! One tenant at a time (fleet mode, issue 35): the tenants a connection may show, the one
//! it shows, and switching between them. A console's store is scoped to the tenant shown
//! (`Tenants::for_tenant`), so its lists, searches, dashboard, connectors and rules are
//! that tenant's; what the database lets the login see is the database's to say (row-level
//! security on PostgreSQL), and a person is offered their own tenants only.

use leadgate_domain::TenantId;
use leadgate_store::{Identity, Store};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::{ApiResult, Console, ConsoleError, Performer};

/// A tenant the console may show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct TenantOption {
    pub slug: String,
    pub name: String,
    /// `active`, `paused` (its leads wait) or `removed`.
    pub state: String,
}

/// The tenants `store`'s login may show, by id (the default tenant first); none for a
/// login in no Leadgate role (it reads nothing anyway).
pub(crate) async fn tenants_of(
    store: &dyn Store,
    identity: &Identity,
) -> ApiResult<Vec<(TenantId, TenantOption)>> {
    if matches!(identity, Identity::Nobody { .. }) {
        return Ok(vec![]);
    }
    Ok(store
        .my_tenants()
        .await?
        .into_iter()
        .map(|t| {
            let option = TenantOption {
                slug: t.slug,
                name: t.name,
                state: t.state.as_str().to_owned(),
            };
            (TenantId(t.id), option)
        })
        .collect())
}

/// Which tenant a console opens on: the store's own when it may show it (the default
/// tenant: a deployment without tenants sees no change), else the first it may show.
pub(crate) fn first_shown(store: &dyn Store, tenants: &[(TenantId, TenantOption)]) -> TenantId {
    let own = store.tenant();
    if tenants.is_empty() || tenants.iter().any(|(id, _)| *id == own) {
        own
    } else {
        tenants[0].0
    }
}

impl Console {
    /// This console showing the tenant `slug`, one of `connection.tenants`: the same
    /// login, connection and identity, its store scoped to that tenant.
    pub fn with_tenant(&self, slug: &str) -> ApiResult<Console> {
        let Some((id, _)) = self.tenants.iter().find(|(_, t)| t.slug == slug) else {
            return Err(ConsoleError::Invalid {
                message: format!("no tenant «{slug}» among this console's"),
            });
        };
        let store = self.store.for_tenant(*id);
        let mut connection = self.connection.clone();
        connection.tenant = slug.to_owned();
        Ok(Console {
            performer: Performer {
                store: store.clone(),
                identity: self.performer.identity.clone(),
            },
            store,
            bulk_runs: self.bulk_runs.clone(),
            connection,
            tenants: self.tenants.clone(),
            stale_after: self.stale_after,
            phone_region: self.phone_region,
        })
    }
}
