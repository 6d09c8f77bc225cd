//! A private PostgreSQL cluster for a test that needs a server configured otherwise than
//! the shared one (TLS only, passwords checked): initdb + pg_ctl as the `postgres` user,
//! on its own port and socket directory, so the shared server of the other tests is never
//! touched. Stopped and deleted when the value goes.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs a PostgreSQL program as the `postgres` user (the tests run as root; PostgreSQL
/// refuses to run as root).
pub fn as_postgres(program: &Path, args: &[&str]) -> std::process::Output {
    let out = if unsafe_is_root() {
        Command::new("runuser")
            .arg("-u")
            .arg("postgres")
            .arg("--")
            .arg(program)
            .args(args)
            .output()
    } else {
        Command::new(program).args(args).output()
    };
    out.unwrap_or_else(|e| panic!("running {}: {e}", program.display()))
}

pub fn unsafe_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

pub fn pg_bin(name: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's server programs in /usr/lib/postgresql (Debian's postgresql package)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join(name).exists())
        .collect();
    dirs.sort();
    dirs.pop()
        .unwrap_or_else(|| panic!("no {name} under /usr/lib/postgresql/*/bin"))
        .join(name)
}

/// A private cluster; stopped (immediately) and deleted on drop.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub port: u16,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        as_postgres(
            &pg_bin("pg_ctl"),
            &["-D", data.to_str().unwrap(), "-m", "immediate", "stop"],
        );
    }
}

impl Cluster {
    /// A new cluster whose `pg_hba.conf` is `hba`, its own port and socket directory,
    /// with TLS on from `tls` (a certificate and its key, PEM) when given. Its superuser
    /// is `postgres`, trusted on the socket only if `hba` says so.
    pub fn start(hba: &str, tls: Option<(&str, &str)>) -> Cluster {
        Cluster::start_with(hba, tls, &[])
    }

    /// [`Cluster::start`] with server `settings` (`name=value`) over the test defaults
    /// (`fsync=off`, `max_connections=40`): a benchmark's cluster, configured as a
    /// deployment's.
    pub fn start_with(hba: &str, tls: Option<(&str, &str)>, settings: &[&str]) -> Cluster {
        let dir = tempfile::Builder::new().prefix("lg-pg-").tempdir().unwrap();
        let path = dir.path();
        let chown = |p: &Path| {
            if unsafe_is_root() {
                let ok = Command::new("chown")
                    .args(["-R", "postgres:postgres", p.to_str().unwrap()])
                    .status()
                    .unwrap()
                    .success();
                assert!(ok, "chown {}", p.display());
            }
        };
        if let Some((cert, key)) = tls {
            std::fs::write(path.join("server.crt"), cert).unwrap();
            std::fs::write(path.join("server.key"), key).unwrap();
        }
        {
            use std::os::unix::fs::PermissionsExt;
            if tls.is_some() {
                std::fs::set_permissions(
                    path.join("server.key"),
                    std::fs::Permissions::from_mode(0o600),
                )
                .unwrap();
            }
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        chown(path);
        let data = path.join("data");
        let out = as_postgres(
            &pg_bin("initdb"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        );
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(data.join("pg_hba.conf"), hba).unwrap();
        chown(&data);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let ssl = if tls.is_some() {
            format!(
                " -c ssl=on -c ssl_cert_file={dir}/server.crt -c ssl_key_file={dir}/server.key",
                dir = path.display()
            )
        } else {
            String::new()
        };
        // A setting given twice: PostgreSQL takes the last.
        let settings: String = settings.iter().map(|s| format!(" -c {s}")).collect();
        let opts = format!(
            "-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={dir} \
         -c fsync=off -c max_connections=40{ssl}{settings}",
            dir = path.display()
        );
        let log = path.join("server.log");
        let out = as_postgres(
            &pg_bin("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &opts,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl start: {}{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        Cluster { dir, port }
    }
}

/// What a deployment's pg_hba.conf says: passwords checked over TCP (scram-sha-256), the
/// superuser trusted on the cluster's own socket only.
pub const PASSWORDS_CHECKED: &str =
    "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n";

impl Cluster {
    /// A cluster that checks passwords ([`PASSWORDS_CHECKED`]) with a database `app` whose
    /// owner, the superuser `postgres`, has `owner_password` (URL-safe); answers it and
    /// the owner's URL of the database.
    pub fn checking_passwords(owner_password: &str) -> (Cluster, String) {
        Cluster::checking_passwords_with(owner_password, &[])
    }

    /// [`Cluster::checking_passwords`] with server `settings` ([`Cluster::start_with`]).
    pub fn checking_passwords_with(owner_password: &str, settings: &[&str]) -> (Cluster, String) {
        let cluster = Cluster::start_with(PASSWORDS_CHECKED, None, settings);
        let dir = cluster.dir.path().to_str().unwrap().to_owned();
        let port = cluster.port.to_string();
        let out = as_postgres(
            &pg_bin("psql"),
            &[
                "-h",
                &dir,
                "-p",
                &port,
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                &format!("alter role postgres password '{owner_password}'"),
                "-c",
                "create database app",
            ],
        );
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = format!("postgres://postgres:{owner_password}@127.0.0.1:{port}/app");
        (cluster, url)
    }
}
