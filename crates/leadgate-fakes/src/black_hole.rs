//! A CRM that is down behind a load balancer that still accepts: it takes every connection
//! and never answers a byte, so every call waits for its client's timeout.

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The listening black hole; it stops (and lets its connections go) when dropped.
pub struct BlackHole {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl BlackHole {
    /// Listens on a free loopback port.
    pub async fn spawn() -> std::io::Result<BlackHole> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let mut held = vec![];
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        Ok(BlackHole { addr, task })
    }

    /// A Bitrix24 webhook URL on it.
    pub fn webhook_url(&self) -> String {
        format!("http://{}/rest/1/dead-secret/", self.addr)
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.task.abort();
    }
}
