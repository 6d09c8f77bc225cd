//! Debian packages in tests that install what they built (`tests/ecosystem.rs` the
//! gateway's .deb, the console's real-window test its .deb): dpkg's view of a package and
//! dpkg itself, waiting while apt or another dpkg holds its lock.

use std::process::Command;
use std::time::{Duration, Instant};

/// `dpkg-query`'s status (`ii`, `rc`, …) and version of `package`, if dpkg knows it.
pub fn state(package: &str) -> Option<(String, String)> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Abbrev}|${Version}", package])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let (status, version) = text.split_once('|')?;
    let status = status.trim().to_owned();
    (out.status.success() && status != "un").then(|| (status, version.to_owned()))
}

/// `dpkg ARGS`, which must succeed; waited for while another dpkg or apt holds dpkg's lock
/// (dpkg itself does not wait), for a minute at most.
pub fn dpkg(args: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new("dpkg")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && err.contains("lock") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        assert!(
            out.status.success(),
            "dpkg {args:?} failed ({}):\n{}\n{err}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
        return;
    }
}

/// An exclusive lock on `path` (flock(1)), held while alive: two runs of a package test on
/// one machine do not install and remove the same package under each other.
pub struct MachineLock(#[allow(dead_code)] crate::process::Process);

impl MachineLock {
    pub fn take(path: &str) -> MachineLock {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;
        let mut child = Command::new("flock")
            .args([path, "-c", "echo locked; cat >/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked");
        MachineLock(crate::process::Process(child))
    }
}
