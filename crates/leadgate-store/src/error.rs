//! The store's errors, judged once where they arise. [`StoreError`] carries no driver
//! type: a database failure becomes a [`DbError`] (what the driver said, the server's
//! code) at the store's edge, and every error answers [`StoreError::kind`] — unavailable,
//! conflict, refused, not found or internal — so a caller (the HTTP layer, the console)
//! maps a kind on purpose instead of guessing from a message.

use chrono::{DateTime, Utc};

use leadgate_domain::{Refusal, TransitionError};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("no operation `{0}`")]
    UnknownOperation(String),
    #[error("no review case #{0}")]
    UnknownCase(i64),
    #[error("review case #{0} was already resolved by {1}")]
    CaseAlreadyResolved(i64, String),
    #[error("the operation changed since you loaded it (version {expected}, now {current}); reload and decide again")]
    StaleVersion { expected: i64, current: i64 },
    #[error("the lease on `{0}` is no longer held by this worker")]
    LeaseLost(String),
    /// A report under a token that `{0}` never handed out (not a late report: a typo, a
    /// misrouted or forged call). Nothing was recorded.
    #[error("`{0}` was never leased with this token; nothing was recorded")]
    UnknownLease(String),
    /// The decision could contradict the outcome of a CRM call still in flight.
    #[error("an attempt on `{0}` is in flight until {1}; wait for its outcome")]
    AttemptInFlight(String, DateTime<Utc>),
    #[error("{0}")]
    Transition(#[from] TransitionError),
    /// A person's action (or a request to open a review) the rules refuse.
    #[error("{0}")]
    Refused(#[from] Refusal),
    #[error("the database URL `{0}` has an unknown scheme: use sqlite://… or postgres://…")]
    UnknownScheme(String),
    #[error("the database schema is at version {found}, newer than this build knows ({known}); upgrade Leadgate")]
    SchemaTooNew { found: i64, known: i64 },
    #[error("stored data is not valid: {0}")]
    Corrupt(String),
    /// The person's role may not ask for this (checked again by the gateway).
    #[error("{0}")]
    Forbidden(String),
    /// A gateway could not apply a person's request (`store::Ask`), or none did in time.
    #[error("{0}")]
    NotApplied(String),
    /// The database refused to take a person's request (migration 0026): a shape no
    /// console writes, or too many of theirs waiting. The sentence is the database's.
    #[error("{0}")]
    RequestRefused(String),
    #[error("database error: {0}")]
    Database(DbError),
    /// A migration failed for another reason than a table's lock (a race with another
    /// process's migration is tried again first).
    #[error("migration failed: {0}")]
    Migrate(DbError),
    /// A migration could not take a table's lock: another session holds the table.
    #[error("the migration waited for a table that another session holds ({0}); nothing was changed by the migration that waited: end that session (or its transaction) and start again")]
    MigrationBlocked(String),
    /// A migration that gateways of an earlier version cannot run beside, while some
    /// still beat (`lib.rs`'s `NOT_BESIDE_EARLIER_GATEWAYS`). Nothing was migrated.
    #[error("migration {version} cannot run while gateways of an earlier version do (their writes to the tables it changes would be refused, and a lead could be lost): {owners} still beat; stop every `serve` and `worker` of the earlier version, then start this one")]
    EarlierGatewaysRunning { version: i64, owners: String },
}

/// What kind of failure a [`StoreError`] is, for a caller that answers someone: each
/// kind means one thing to the one who asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The database could not be had or could not take the work now (a broken or refused
    /// connection, a timeout, a full disk, a read-only server during a failover, a lock
    /// another session holds, no gateway applied a request in time): the same request
    /// later may succeed.
    Unavailable,
    /// The request met a state that changed under it or forbids it now (a stale version, a
    /// case resolved already, a lease lost, an attempt in flight, a duplicate row):
    /// reload and decide again; sending the same thing again will not help.
    Conflict,
    /// The rules, a role or the database's own checks refuse this request as it is: it
    /// will be refused again.
    Refused,
    /// The operation, case or lease named does not exist.
    NotFound,
    /// Leadgate itself is wrong (a corrupt row, a schema this build does not know, a
    /// failed migration, an unexpected database error): not the asker's to fix by trying
    /// again.
    Internal,
}

impl StoreError {
    /// The one place a store error is classified.
    pub fn kind(&self) -> ErrorKind {
        use StoreError::*;
        match self {
            UnknownOperation(_) | UnknownCase(_) => ErrorKind::NotFound,
            CaseAlreadyResolved(..)
            | StaleVersion { .. }
            | LeaseLost(_)
            | UnknownLease(_)
            | AttemptInFlight(..)
            | Transition(_) => ErrorKind::Conflict,
            Refused(_) | Forbidden(_) | RequestRefused(_) => ErrorKind::Refused,
            NotApplied(_) | MigrationBlocked(_) | EarlierGatewaysRunning { .. } => {
                ErrorKind::Unavailable
            }
            UnknownScheme(_) | SchemaTooNew { .. } | Corrupt(_) | Migrate(_) => ErrorKind::Internal,
            Database(e) => e.kind(),
        }
    }

    /// A failure that says nothing about the data and may well pass if the same
    /// transaction is tried again: the connection broke or could not be had, the
    /// server restarted, or the database aborted the transaction to resolve a deadlock
    /// or a serialization conflict, or a lock or statement timeout ended the statement
    /// (PostgreSQL `40001`, `40P01`, `57P0x`, `55P03`, `57014`, `25P03`, class `08`;
    /// SQLite busy/locked).
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Database(e) if e.is_transient())
    }

    /// Whether PostgreSQL aborted the transaction for a reason that running it again
    /// from the start can cure: a deadlock victim (40P01) or a serialization failure
    /// (40001).
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Database(e) if e.is_retryable())
    }

    /// PostgreSQL refused this login what it asked (`42501`: no privilege on a table or
    /// column, or a row-level security policy): the database's message.
    pub fn forbidden(&self) -> Option<String> {
        match self {
            StoreError::Database(e) if e.code() == Some("42501") => Some(e.message.clone()),
            _ => None,
        }
    }

    /// The database cannot be reached at all — no connection could be had (refused,
    /// timed out, TLS), the file cannot be opened, the database does not exist, or the
    /// credentials were refused — with the driver's message; `None` for any other error.
    pub fn unreachable(&self) -> Option<String> {
        match self {
            StoreError::Database(e) if e.is_unreachable() => Some(e.message.clone()),
            _ => None,
        }
    }

    /// The database's SQLSTATE (PostgreSQL) or result code (SQLite), if the database
    /// said no.
    pub fn db_code(&self) -> Option<&str> {
        match self {
            StoreError::Database(e) => e.code(),
            _ => None,
        }
    }
}

/// Where a database failure came from, as far as a caller must tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbFault {
    /// The connection broke or could not be made (I/O).
    Io,
    /// TLS could not be set up.
    Tls,
    /// The server answered something the driver did not expect.
    Protocol,
    /// No connection came free in time.
    PoolTimedOut,
    /// The pool was shut down (this process is stopping).
    PoolClosed,
    /// The driver's worker thread died (SQLite).
    WorkerCrashed,
    /// The database said no, with a code.
    Server,
    /// Anything else the driver reports (a decode error, a missing row or column).
    Other,
}

/// A database failure with no driver type in it: where it came from, the server's code
/// when there is one, and the driver's message (the primary message only: a PostgreSQL
/// error's DETAIL, which may hold a row's values, is not kept).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct DbError {
    fault: DbFault,
    code: Option<String>,
    message: String,
    /// The code is SQLite's (an extended result code such as `2067`), not a SQLSTATE.
    sqlite: bool,
}

impl DbError {
    pub fn new(fault: DbFault, code: Option<&str>, message: impl Into<String>) -> DbError {
        DbError {
            fault,
            code: code.map(str::to_owned),
            message: message.into(),
            sqlite: false,
        }
    }

    /// A SQLite error with its (extended) result code.
    pub fn sqlite(code: i32, message: impl Into<String>) -> DbError {
        DbError {
            sqlite: true,
            ..DbError::new(DbFault::Server, Some(&code.to_string()), message)
        }
    }

    /// SQLite's primary result code (the low byte of an extended one: 2067
    /// SQLITE_CONSTRAINT_UNIQUE is 19 SQLITE_CONSTRAINT).
    fn sqlite_primary(&self) -> Option<i32> {
        if !self.sqlite {
            return None;
        }
        self.code()?.parse::<i32>().ok().map(|c| c & 0xff)
    }

    /// PostgreSQL's SQLSTATE class (its first two characters).
    fn pg_class_in(&self, classes: &[&str]) -> bool {
        !self.sqlite && self.code_class(classes)
    }

    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    fn code_in(&self, codes: &[&str]) -> bool {
        self.code().is_some_and(|c| codes.contains(&c))
    }

    fn code_class(&self, classes: &[&str]) -> bool {
        self.code()
            .is_some_and(|c| classes.iter().any(|k| c.starts_with(k)))
    }

    /// See [`StoreError::is_transient`].
    pub fn is_transient(&self) -> bool {
        match self.fault {
            DbFault::Io
            | DbFault::PoolTimedOut
            | DbFault::WorkerCrashed
            | DbFault::Tls
            | DbFault::Protocol => true,
            DbFault::Server => {
                self.code_in(&[
                    "40001", "40P01", "57P01", "57P02", "57P03", // SQLite: busy, locked
                    "5", "6", "517", "261",
                    // a lock or statement timeout, a session ended idle in a transaction
                    // (`postgres::connect_options`): nothing was written, try again
                    "55P03", "57014", "25P03",
                ]) || self.code_class(&["08"])
            }
            DbFault::PoolClosed | DbFault::Other => false,
        }
    }

    /// See [`StoreError::unreachable`].
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self.fault,
            DbFault::Io | DbFault::PoolTimedOut | DbFault::Tls
        ) || (self.fault == DbFault::Server
            // SQLite: cannot open (14 and its extended codes); PostgreSQL: no such
            // database, authentication failed.
            && (self.sqlite_primary() == Some(14) || self.code_in(&["3D000", "28P01", "28000"])))
    }

    /// A deadlock victim (40P01) or a serialization failure (40001): PostgreSQL aborted
    /// the transaction, and running it again from the start can cure that.
    pub fn is_retryable(&self) -> bool {
        self.code_in(&["40P01", "40001"])
    }

    /// The server refused the statement for a value in it. PostgreSQL: a data exception
    /// (SQLSTATE class 22), a constraint (23), a value over a limit such as an index
    /// row's size (54), a check raised by a function (P0001). SQLite: a constraint (19), a
    /// value too big (18), a type mismatch (20), a parameter out of range (25).
    pub fn refused_for_its_data(&self) -> bool {
        if self.fault != DbFault::Server {
            return false;
        }
        match self.sqlite_primary() {
            Some(primary) => matches!(primary, 18 | 19 | 20 | 25),
            None => self.pg_class_in(&["22", "23", "54"]) || self.code_in(&["P0001"]),
        }
    }

    /// A duplicate row: PostgreSQL 23505; SQLite 2067 (UNIQUE) or 1555 (PRIMARY KEY).
    fn is_duplicate(&self) -> bool {
        if self.sqlite {
            self.code_in(&["2067", "1555"])
        } else {
            self.code_in(&["23505"])
        }
    }

    /// The database cannot take work now for a reason of its own, not the request's.
    /// PostgreSQL: insufficient resources (53, a full disk), operator intervention (57),
    /// a system error (58), a read-only server (25006: a standby during a failover), or a
    /// privilege the gateway's own login lacks (42501: its grants are being repaired; a
    /// person's login meets that as [`StoreError::forbidden`] in the console). SQLite:
    /// busy or locked (5, 6), an I/O error (10), the disk full (13), a WAL lock race (15),
    /// the schema changed (17), the file read-only (8), each with its extended codes.
    fn is_unavailable(&self) -> bool {
        match self.sqlite_primary() {
            Some(primary) => matches!(primary, 5 | 6 | 8 | 10 | 13 | 15 | 17),
            None => self.pg_class_in(&["53", "57", "58"]) || self.code_in(&["25006", "42501"]),
        }
    }

    fn kind(&self) -> ErrorKind {
        if self.is_transient() || self.is_unreachable() || self.fault == DbFault::PoolClosed {
            return ErrorKind::Unavailable;
        }
        if self.fault != DbFault::Server {
            return ErrorKind::Internal;
        }
        if self.is_duplicate() {
            ErrorKind::Conflict
        } else if self.refused_for_its_data() {
            ErrorKind::Refused
        } else if self.is_unavailable() {
            ErrorKind::Unavailable
        } else {
            ErrorKind::Internal
        }
    }
}

impl From<sqlx::Error> for DbError {
    fn from(e: sqlx::Error) -> DbError {
        let fault = match &e {
            sqlx::Error::Io(_) => DbFault::Io,
            sqlx::Error::Tls(_) => DbFault::Tls,
            sqlx::Error::Protocol(_) => DbFault::Protocol,
            sqlx::Error::PoolTimedOut => DbFault::PoolTimedOut,
            sqlx::Error::PoolClosed => DbFault::PoolClosed,
            sqlx::Error::WorkerCrashed => DbFault::WorkerCrashed,
            sqlx::Error::Database(_) => DbFault::Server,
            _ => DbFault::Other,
        };
        match &e {
            sqlx::Error::Database(d) => DbError {
                sqlite: d.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some(),
                ..DbError::new(fault, d.code().as_deref(), d.message().to_owned())
            },
            _ => DbError::new(fault, None, e.to_string()),
        }
    }
}

impl StoreError {
    /// An insert into `human_requests` that the database's own check refused (migration
    /// 0026: `leadgate: …`, a check violation or a raised exception) becomes
    /// [`StoreError::RequestRefused`] with its sentence; any other error stays as it was.
    pub(crate) fn refused_request(e: sqlx::Error) -> StoreError {
        let e = DbError::from(e);
        if e.fault == DbFault::Server && e.code_in(&["P0001", "23514"]) {
            if let Some(sentence) = e.message.strip_prefix("leadgate: ") {
                return StoreError::RequestRefused(sentence.to_owned());
            }
        }
        StoreError::Database(e)
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> StoreError {
        StoreError::Database(e.into())
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> StoreError {
        use sqlx::migrate::MigrateError;
        match e {
            MigrateError::Execute(e) | MigrateError::ExecuteMigration(e, _) => {
                StoreError::Migrate(e.into())
            }
            other => StoreError::Migrate(DbError::new(DbFault::Other, None, other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str) -> StoreError {
        StoreError::Database(DbError::new(DbFault::Server, Some(code), "no"))
    }

    fn sqlite(code: i32) -> StoreError {
        StoreError::Database(DbError::sqlite(code, "no"))
    }

    fn fault(f: DbFault) -> StoreError {
        StoreError::Database(DbError::new(f, None, "no"))
    }

    #[test]
    fn each_database_failure_has_the_kind_its_cause_means() {
        use ErrorKind::*;
        let table = [
            (fault(DbFault::Io), Unavailable),
            (fault(DbFault::PoolTimedOut), Unavailable),
            (fault(DbFault::PoolClosed), Unavailable),
            (fault(DbFault::Tls), Unavailable),
            (fault(DbFault::Other), Internal),
            (server("40001"), Unavailable),
            (server("40P01"), Unavailable),
            (server("55P03"), Unavailable),
            (server("57014"), Unavailable),
            (server("08006"), Unavailable),
            (server("53100"), Unavailable),
            (server("25006"), Unavailable),
            (server("3D000"), Unavailable),
            (server("23505"), Conflict),
            (server("23514"), Refused),
            (server("22001"), Refused),
            (server("P0001"), Refused),
            // an index row too large: a value the sender typed (a 3 KB e-mail)
            (server("54000"), Refused),
            // the gateway's own grants: being repaired, not the sender's doing
            (server("42501"), Unavailable),
            (server("42P01"), Internal),
            (server("XX000"), Internal),
            // SQLite: an extended code is read by its primary code
            (sqlite(5), Unavailable),
            (sqlite(773), Unavailable),  // BUSY_TIMEOUT
            (sqlite(517), Unavailable),  // BUSY_SNAPSHOT
            (sqlite(778), Unavailable),  // IOERR_WRITE
            (sqlite(1034), Unavailable), // IOERR_FSYNC
            (sqlite(2314), Unavailable), // IOERR_RDLOCK: not a "23" constraint
            (sqlite(13), Unavailable),   // FULL
            (sqlite(1032), Unavailable), // READONLY_DBMOVED
            (sqlite(15), Unavailable),   // PROTOCOL
            (sqlite(14), Unavailable),   // CANTOPEN
            (sqlite(2067), Conflict),    // CONSTRAINT_UNIQUE
            (sqlite(1555), Conflict),    // CONSTRAINT_PRIMARYKEY
            (sqlite(275), Refused),      // CONSTRAINT_CHECK
            (sqlite(1299), Refused),     // CONSTRAINT_NOTNULL
            (sqlite(2323), Refused),     // CONSTRAINT_ROWID
            (sqlite(18), Refused),       // TOOBIG
            (sqlite(22), Internal),      // NOLFS: not PostgreSQL's class 22
            (sqlite(1), Internal),       // ERROR (bad SQL)
        ];
        for (e, kind) in table {
            assert_eq!(e.kind(), kind, "{:?}", e.db_code());
        }
    }

    #[test]
    fn each_store_error_has_one_kind() {
        use ErrorKind::*;
        let at = Utc::now();
        let table = [
            (StoreError::UnknownOperation("k".into()), NotFound),
            (StoreError::UnknownCase(1), NotFound),
            (StoreError::CaseAlreadyResolved(1, "a".into()), Conflict),
            (
                StoreError::StaleVersion {
                    expected: 1,
                    current: 2,
                },
                Conflict,
            ),
            (StoreError::LeaseLost("k".into()), Conflict),
            (StoreError::UnknownLease("k".into()), Conflict),
            (StoreError::AttemptInFlight("k".into(), at), Conflict),
            (StoreError::Forbidden("no".into()), Refused),
            (StoreError::RequestRefused("no".into()), Refused),
            (StoreError::NotApplied("late".into()), Unavailable),
            (StoreError::MigrationBlocked("pid 1".into()), Unavailable),
            (
                StoreError::EarlierGatewaysRunning {
                    version: 36,
                    owners: "gw-1 (serve)".into(),
                },
                Unavailable,
            ),
            (StoreError::Corrupt("x".into()), Internal),
            (StoreError::SchemaTooNew { found: 9, known: 1 }, Internal),
            (StoreError::UnknownScheme("mysql".into()), Internal),
        ];
        for (e, kind) in table {
            assert_eq!(e.kind(), kind, "{e}");
        }
    }

    #[test]
    fn forbidden_and_unreachable_read_the_code() {
        assert_eq!(server("42501").forbidden().as_deref(), Some("no"));
        assert_eq!(server("23505").forbidden(), None);
        assert!(server("28P01").unreachable().is_some());
        assert!(fault(DbFault::Io).unreachable().is_some());
        assert!(fault(DbFault::PoolClosed).unreachable().is_none());
        assert!(server("42501").unreachable().is_none());
        assert!(sqlite(1038).unreachable().is_some()); // CANTOPEN_CONVPATH
    }
}
