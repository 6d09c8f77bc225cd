//! The durable intake spool: where a gateway keeps the deliveries it answered while the
//! operations database could not take them (`intake::spooled` appends and drains; this
//! module only knows the file).
//!
//! One directory per gateway, held with an exclusive lock on `lock` for as long as the
//! gateway runs (a second gateway given the same directory refuses to start). In it:
//!
//! - `spool.log`: append-only records, each `[length u32 LE][CRC-32 u32 LE][JSON]`; a
//!   record is written and `fdatasync`ed before its sender is answered.
//! - `drained`: the offset up to which records have been recorded in the database,
//!   replaced atomically (write, fsync, rename, fsync the directory) after each one.
//!   Once everything is drained, the offset is reset to 0 and then `spool.log` truncated
//!   (a crash between the two drains those records again: duplicates, nothing lost).
//!
//! The directory is the gateway's alone (mode 0700, files 0600): it holds leads' data.
//!
//! On opening, the records after the offset are read and checked. A record cut short or
//! whose checksum does not match ends the readable spool: a crash while appending leaves
//! one such record at the end (it was never answered). What follows it is moved to a
//! `torn-<offset>.bin` file that is never deleted (a person may look), the log is
//! truncated there, and the caller journals a warning.
//!
//! A record drained twice (a crash between recording it and moving the offset) is
//! recorded twice: the second is a duplicate of the first, as any redelivery is.
//!
//! Bounds: the log holds at most `max_bytes`, and nothing is added while the oldest
//! record waiting is older than `max_age`; past either, intake answers 503 as it does
//! without a spool.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A delivery as the spool keeps it: authenticated, its values to redact already
/// redacted, and what admission needs to key and record it as if it arrived again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpooledDelivery {
    /// The tenant's slug (`default` for the default tenant).
    pub tenant: String,
    pub source: String,
    pub received_at: DateTime<Utc>,
    pub content_type: Option<String>,
    /// The headers that key or sign the delivery (never its credentials).
    pub headers: Vec<(String, String)>,
    /// The body as the journal keeps it (redacted), base64.
    #[serde(with = "body64")]
    pub body: Vec<u8>,
    /// The parsed payload, redacted.
    pub payload: Value,
}

mod body64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(serde::de::Error::custom)
    }
}

/// How much a spool may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_bytes: u64,
    pub max_age: std::time::Duration,
}

/// Why a delivery was not spooled: intake answers 503 as it would without a spool.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("the spool is full ({0} bytes)")]
    Full(u64),
    #[error("the spool's oldest record has waited longer than its max_age")]
    TooOld,
    #[error("the spool could not be written: {0}")]
    Io(#[from] std::io::Error),
}

/// What was found torn when the spool was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Torn {
    /// Where the unreadable record began.
    pub offset: u64,
    /// The bytes moved aside from there to the end.
    pub bytes: u64,
    /// Where they were moved.
    pub kept_in: PathBuf,
}

/// What the spool holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpoolStats {
    /// Records waiting to be drained.
    pub records: u64,
    /// Their bytes.
    pub bytes: u64,
    /// When the oldest of them was received.
    pub oldest: Option<DateTime<Utc>>,
    /// Records appended and drained since the gateway started.
    pub appended: u64,
    pub drained: u64,
}

struct Inner {
    log: File,
    /// The log's length: every record before it is complete.
    len: u64,
    /// The drained offset.
    cursor: u64,
}

/// A gateway's spool (see the module's documentation).
pub struct Spool {
    dir: PathBuf,
    limits: Limits,
    /// The file: held while it is written and synced.
    inner: Mutex<Inner>,
    /// Its figures, apart: read by `/metrics` and the heartbeat without waiting for a sync.
    stats: Mutex<SpoolStats>,
    /// Held while the gateway runs: one gateway per directory.
    _lock: File,
    /// Woken by each append, for the drainer.
    pub appended: tokio::sync::Notify,
}

const HEADER: u64 = 8;
/// No record is larger (a delivery is at most `[server] max_body`, far less).
const MAX_RECORD: u64 = 256 * 1024 * 1024;

impl Spool {
    /// Opens (creating it if needed) the spool in `dir`, checks the records waiting and
    /// moves a torn end aside.
    pub fn open(dir: &Path, limits: Limits) -> Result<(Spool, Option<Torn>), String> {
        let fail = |what: &str, e: std::io::Error| format!("spool {}: {what}: {e}", dir.display());
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        builder.mode(0o700);
        builder.create(dir).map_err(|e| fail("creating it", e))?;
        let lock = private()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))
            .map_err(|e| fail("opening its lock", e))?;
        lock.try_lock().map_err(|e| match e {
            std::fs::TryLockError::WouldBlock => format!(
                "spool {}: another gateway uses this directory; give each gateway its own \
                 ([spool] dir)",
                dir.display()
            ),
            std::fs::TryLockError::Error(e) => fail("locking it (a local disk is needed)", e),
        })?;
        let mut log = private()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(dir.join("spool.log"))
            .map_err(|e| fail("opening spool.log", e))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| fail("syncing it", e))?;
        let len = log
            .metadata()
            .map_err(|e| fail("reading spool.log", e))?
            .len();
        let mut cursor = match std::fs::read_to_string(dir.join("drained")) {
            Ok(s) => s
                .trim()
                .parse::<u64>()
                .map_err(|e| format!("spool {}: drained is not an offset: {e}", dir.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(fail("reading drained", e)),
        };
        // Not expected (the offset is reset before the log is truncated), but an offset
        // past the end can only mean the log was emptied: it starts again, durably, before
        // anything is appended.
        if cursor > len {
            cursor = 0;
            write_durably(dir, &dir.join("drained"), b"0")
                .map_err(|e| fail("resetting drained", e))?;
        }
        let mut stats = SpoolStats::default();
        let mut at = cursor;
        let mut torn = None;
        while at < len {
            match read_at(&mut log, at, len) {
                Ok((d, end)) => {
                    stats.records += 1;
                    stats.oldest.get_or_insert(d.received_at);
                    at = end;
                }
                Err(_) => {
                    let kept_in = dir.join(format!("torn-{at}.bin"));
                    let mut rest = Vec::new();
                    log.seek(SeekFrom::Start(at))
                        .and_then(|_| log.read_to_end(&mut rest))
                        .map_err(|e| fail("reading a torn record", e))?;
                    write_durably(dir, &kept_in, &rest).map_err(|e| fail("keeping it aside", e))?;
                    log.set_len(at)
                        .and_then(|()| log.sync_all())
                        .map_err(|e| fail("truncating spool.log", e))?;
                    torn = Some(Torn {
                        offset: at,
                        bytes: len - at,
                        kept_in,
                    });
                    break;
                }
            }
        }
        let len = at;
        stats.bytes = len - cursor;
        let spool = Spool {
            dir: dir.to_owned(),
            limits,
            inner: Mutex::new(Inner { log, len, cursor }),
            stats: Mutex::new(stats),
            _lock: lock,
            appended: tokio::sync::Notify::new(),
        };
        Ok((spool, torn))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn stats(&self) -> SpoolStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut SpoolStats)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Appends `d` and makes it durable; blocking (call from `spawn_blocking`).
    pub fn append(&self, d: &SpooledDelivery, now: DateTime<Utc>) -> Result<(), SpoolError> {
        let json = serde_json::to_vec(d).map_err(std::io::Error::other)?;
        let mut record = Vec::with_capacity(json.len() + HEADER as usize);
        record.extend_from_slice(&(json.len() as u32).to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(&json).to_le_bytes());
        record.extend_from_slice(&json);
        let mut inner = self.inner();
        if inner.len + record.len() as u64 > self.limits.max_bytes {
            return Err(SpoolError::Full(self.limits.max_bytes));
        }
        if let Some(oldest) = self.stats().oldest {
            if now
                .signed_duration_since(oldest)
                .to_std()
                .unwrap_or_default()
                > self.limits.max_age
            {
                return Err(SpoolError::TooOld);
            }
        }
        let at = inner.len;
        let written = (|| {
            inner.log.seek(SeekFrom::Start(at))?;
            inner.log.write_all(&record)?;
            inner.log.sync_data()
        })();
        if let Err(e) = written {
            // Nothing was answered: what may have been written is cut off again.
            let _ = inner.log.set_len(at);
            return Err(SpoolError::Io(e));
        }
        inner.len = at + record.len() as u64;
        self.update(|s| {
            s.records += 1;
            s.bytes += record.len() as u64;
            s.appended += 1;
            s.oldest.get_or_insert(d.received_at);
        });
        drop(inner);
        self.appended.notify_one();
        Ok(())
    }

    /// The first record waiting, and the offset after it; blocking.
    pub fn next(&self) -> std::io::Result<Option<(SpooledDelivery, u64)>> {
        let mut inner = self.inner();
        if inner.cursor >= inner.len {
            return Ok(None);
        }
        let (at, len) = (inner.cursor, inner.len);
        read_at(&mut inner.log, at, len).map(Some)
    }

    /// Marks the records before `end` drained (durably); blocking.
    pub fn drained(&self, end: u64) -> std::io::Result<()> {
        let mut inner = self.inner();
        if end <= inner.cursor || end > inner.len {
            return Err(std::io::Error::other(format!(
                "spool: drained offset {end} outside {}..={}",
                inner.cursor, inner.len
            )));
        }
        if end == inner.len {
            // Everything is drained: the log starts again. The offset is reset first: a
            // crash (or a failure) before the truncation drains these records again, as
            // duplicates, and never skips one appended later.
            write_durably(&self.dir, &self.dir.join("drained"), b"0")?;
            inner.cursor = 0;
            let len = inner.len;
            self.update(|s| {
                s.records = 0;
                s.bytes = len;
                s.oldest = None;
                s.drained += 1;
            });
            inner.log.set_len(0)?;
            inner.log.sync_all()?;
            inner.len = 0;
            self.update(|s| s.bytes = 0);
        } else {
            write_durably(
                &self.dir,
                &self.dir.join("drained"),
                end.to_string().as_bytes(),
            )?;
            let (cursor, len) = (inner.cursor, inner.len);
            inner.cursor = end;
            // The next record's time, for the oldest; one that cannot be read is `next`'s
            // to say.
            let next = read_at(&mut inner.log, end, len)
                .ok()
                .map(|(d, _)| d.received_at);
            self.update(|s| {
                s.bytes -= end - cursor;
                s.records -= 1;
                s.oldest = next;
                s.drained += 1;
            });
        }
        Ok(())
    }
}

/// The record at `at` (before `len`) and the offset after it.
fn read_at(log: &mut File, at: u64, len: u64) -> std::io::Result<(SpooledDelivery, u64)> {
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_owned());
    if len - at < HEADER {
        return Err(bad("a record header cut short"));
    }
    let mut header = [0u8; HEADER as usize];
    log.seek(SeekFrom::Start(at))?;
    log.read_exact(&mut header)?;
    let size = u64::from(u32::from_le_bytes(header[..4].try_into().expect("4 bytes")));
    let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
    if size > MAX_RECORD || size > len - at - HEADER {
        return Err(bad("a record cut short"));
    }
    let mut json = vec![0u8; size as usize];
    log.read_exact(&mut json)?;
    if crc32fast::hash(&json) != crc {
        return Err(bad("a record whose checksum does not match"));
    }
    let d = serde_json::from_slice(&json).map_err(|e| bad(&e.to_string()))?;
    Ok((d, at + HEADER + size))
}

/// Options for a file only the gateway may read (0600): the spool holds leads' data.
fn private() -> OpenOptions {
    let mut o = OpenOptions::new();
    #[cfg(unix)]
    o.mode(0o600);
    o
}

/// Writes `path` whole or not at all: a temporary file, fsynced, renamed over it, and the
/// directory fsynced.
fn write_durably(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = private()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOMY: Limits = Limits {
        max_bytes: 1 << 20,
        max_age: std::time::Duration::from_secs(3600),
    };

    fn delivery(key: &str) -> SpooledDelivery {
        SpooledDelivery {
            tenant: "default".into(),
            source: "site".into(),
            received_at: Utc::now(),
            content_type: Some("application/json".into()),
            headers: vec![("idempotency-key".into(), format!("\"{key}\""))],
            body: format!("{{\"id\":\"{key}\"}}").into_bytes(),
            payload: serde_json::json!({ "id": key }),
        }
    }

    fn drain_all(s: &Spool) -> Vec<String> {
        let mut keys = vec![];
        while let Some((d, end)) = s.next().unwrap() {
            keys.push(d.payload["id"].as_str().unwrap().to_owned());
            s.drained(end).unwrap();
        }
        keys
    }

    #[test]
    fn records_come_back_in_order_across_a_reopen_and_the_log_restarts_when_drained() {
        let dir = tempfile::tempdir().unwrap();
        let (s, torn) = Spool::open(dir.path(), ROOMY).unwrap();
        assert_eq!(torn, None);
        for k in ["a", "b", "c"] {
            s.append(&delivery(k), Utc::now()).unwrap();
        }
        let (first, end) = s.next().unwrap().unwrap();
        assert_eq!(first.payload["id"], "a");
        assert_eq!(first.body, br#"{"id":"a"}"#);
        s.drained(end).unwrap();
        assert_eq!(s.stats().records, 2);
        drop(s);
        let (s, torn) = Spool::open(dir.path(), ROOMY).unwrap();
        assert_eq!(torn, None);
        assert_eq!(s.stats().records, 2);
        assert_eq!(drain_all(&s), ["b", "c"]);
        assert_eq!(s.stats().records, 0);
        assert_eq!(
            std::fs::metadata(dir.path().join("spool.log"))
                .unwrap()
                .len(),
            0
        );
        s.append(&delivery("d"), Utc::now()).unwrap();
        assert_eq!(drain_all(&s), ["d"]);
    }

    #[cfg(unix)]
    #[test]
    fn only_the_gateway_may_read_its_spool() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let spool = dir.path().join("spool");
        let (s, _) = Spool::open(&spool, ROOMY).unwrap();
        s.append(&delivery("a"), Utc::now()).unwrap();
        let (_, end) = s.next().unwrap().unwrap();
        s.append(&delivery("b"), Utc::now()).unwrap();
        s.drained(end).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&spool), 0o700);
        for f in ["spool.log", "drained", "lock"] {
            assert_eq!(mode(&spool.join(f)), 0o600, "{f}");
        }
    }

    #[test]
    fn a_second_gateway_cannot_open_the_same_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (_first, _) = Spool::open(dir.path(), ROOMY).unwrap();
        let Err(e) = Spool::open(dir.path(), ROOMY) else {
            panic!("two gateways opened one spool");
        };
        assert!(e.contains("another gateway"), "{e}");
    }

    #[test]
    fn a_torn_last_record_is_moved_aside_and_the_ones_before_it_kept() {
        for cut in [1usize, 5, 8, 20] {
            let dir = tempfile::tempdir().unwrap();
            let (s, _) = Spool::open(dir.path(), ROOMY).unwrap();
            s.append(&delivery("a"), Utc::now()).unwrap();
            s.append(&delivery("b"), Utc::now()).unwrap();
            drop(s);
            let log = dir.path().join("spool.log");
            let whole = std::fs::read(&log).unwrap();
            let len = whole.len();
            std::fs::write(&log, &whole[..len - cut]).unwrap();
            let (s, torn) = Spool::open(dir.path(), ROOMY).unwrap();
            let torn = torn.expect("the torn record is reported");
            let first_end = (len / 2) as u64;
            assert_eq!(torn.offset, first_end, "cut {cut}");
            assert_eq!(torn.bytes, first_end - cut as u64);
            assert_eq!(
                std::fs::read(&torn.kept_in).unwrap(),
                &whole[first_end as usize..len - cut]
            );
            assert_eq!(drain_all(&s), ["a"]);
        }
    }

    #[test]
    fn a_flipped_bit_is_caught_by_the_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let (s, _) = Spool::open(dir.path(), ROOMY).unwrap();
        s.append(&delivery("a"), Utc::now()).unwrap();
        drop(s);
        let log = dir.path().join("spool.log");
        let mut bytes = std::fs::read(&log).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0x01;
        std::fs::write(&log, &bytes).unwrap();
        let (s, torn) = Spool::open(dir.path(), ROOMY).unwrap();
        assert_eq!(torn.map(|t| t.offset), Some(0));
        assert_eq!(s.stats().records, 0);
        assert!(s.next().unwrap().is_none());
    }

    #[test]
    fn a_full_or_stale_spool_takes_nothing_more() {
        let dir = tempfile::tempdir().unwrap();
        let small = Limits {
            max_bytes: 400,
            ..ROOMY
        };
        let (s, _) = Spool::open(dir.path(), small).unwrap();
        let mut taken = 0;
        let err = loop {
            match s.append(&delivery("a"), Utc::now()) {
                Ok(()) => taken += 1,
                Err(e) => break e,
            }
        };
        assert!(taken >= 1, "{err}");
        assert!(matches!(err, SpoolError::Full(400)), "{err}");
        assert_eq!(s.stats().records, taken);
        assert!(s.stats().bytes <= 400);

        let dir = tempfile::tempdir().unwrap();
        let (s, _) = Spool::open(dir.path(), ROOMY).unwrap();
        let mut old = delivery("old");
        old.received_at = Utc::now() - chrono::Duration::hours(2);
        s.append(&old, Utc::now()).unwrap();
        assert!(matches!(
            s.append(&delivery("new"), Utc::now()),
            Err(SpoolError::TooOld)
        ));
        assert_eq!(drain_all(&s), ["old"]);
        s.append(&delivery("new"), Utc::now()).unwrap();
    }

    #[test]
    fn an_offset_past_the_end_of_the_log_reads_as_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let (s, _) = Spool::open(dir.path(), ROOMY).unwrap();
        s.append(&delivery("a"), Utc::now()).unwrap();
        drop(s);
        std::fs::write(dir.path().join("drained"), b"9999").unwrap();
        let (s, _) = Spool::open(dir.path(), ROOMY).unwrap();
        // Reset on disk too, before anything is appended: a record appended now and a
        // crash before it is drained must not be skipped at the next start.
        assert_eq!(std::fs::read(dir.path().join("drained")).unwrap(), b"0");
        s.append(&delivery("b"), Utc::now()).unwrap();
        drop(s);
        let (s, _) = Spool::open(dir.path(), ROOMY).unwrap();
        assert_eq!(drain_all(&s), ["a", "b"]);
    }
}
