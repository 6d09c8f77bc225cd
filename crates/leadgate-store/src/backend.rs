//! Which database a URL names, decided once: [`Backend::of`]. Everything that differs
//! between the embedded and the shared database asks a [`Backend`], not a string.

use std::sync::Arc;

use super::{postgres, sqlite, Result, Store, StoreError};

/// The operations database's engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Embedded, one file, one machine (`sqlite:…`).
    Sqlite,
    /// Shared by several machines (`postgres://…`, `postgresql://…`).
    Postgres,
}

impl Backend {
    /// The engine `url`'s scheme names, or [`StoreError::UnknownScheme`].
    pub fn of(url: &str) -> Result<Backend> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            let scheme = url.split(':').next().unwrap_or(url);
            Err(StoreError::UnknownScheme(scheme.to_owned()))
        }
    }

    /// `sqlite` or `postgres`, as logs, `/healthz` and the console name it.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// Whether the database pushes its changes to listeners (PostgreSQL's LISTEN/NOTIFY)
    /// and people sign in with logins of their own; SQLite is polled, one operator.
    pub const fn is_shared(self) -> bool {
        matches!(self, Backend::Postgres)
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Opens the store named by `url` (`sqlite://…` or `postgres://…`) and brings its schema
/// up to date.
pub async fn connect(url: &str) -> Result<Arc<dyn Store>> {
    Ok(match Backend::of(url)? {
        Backend::Sqlite => Arc::new(sqlite::SqliteStore::connect(url).await?),
        Backend::Postgres => Arc::new(postgres::PgStore::connect(url).await?),
    })
}

/// Opens the store named by `url` without creating or upgrading its schema: for the
/// console, which reports a schema mismatch instead of migrating a shared database.
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    Ok(match Backend::of(url)? {
        Backend::Sqlite => Arc::new(sqlite::SqliteStore::open(url).await?),
        Backend::Postgres => Arc::new(postgres::PgStore::open(url).await?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_its_backend_once() {
        assert_eq!(
            Backend::of("sqlite:///var/lib/x.db").unwrap(),
            Backend::Sqlite
        );
        assert_eq!(Backend::of("sqlite::memory:").unwrap(), Backend::Sqlite);
        assert_eq!(Backend::of("postgres://u@h/d").unwrap(), Backend::Postgres);
        assert_eq!(
            Backend::of("postgresql://u@h/d").unwrap(),
            Backend::Postgres
        );
        let e = Backend::of("mysql://u@h/d").unwrap_err();
        assert!(
            matches!(&e, StoreError::UnknownScheme(s) if s == "mysql"),
            "{e}"
        );
        // a path is not a URL: said so, not taken for SQLite
        assert!(Backend::of("/var/lib/x.db").is_err());
        assert_eq!(Backend::Postgres.to_string(), "postgres");
    }
}
