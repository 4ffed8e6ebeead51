//! Several server processes behind one address: a round-robin TCP proxy, run in the test process
//! on a thread with its own small runtime. Each new connection goes to the next node (skipping a
//! node that is down or refuses the connection), so with a client that keeps no idle connection
//! each request, and each stream (re)connect, lands on a different node than the one before.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::TestResult;

type Backends = Arc<Mutex<Vec<Option<SocketAddr>>>>;

fn lock(b: &Backends) -> MutexGuard<'_, Vec<Option<SocketAddr>>> {
    b.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The node address in a server's URL (`http://127.0.0.1:PORT`).
pub fn socket_addr(url: &str) -> TestResult<SocketAddr> {
    let hostport = url.strip_prefix("http://").unwrap_or(url);
    Ok(hostport.trim_end_matches('/').parse()?)
}

pub struct Proxy {
    /// `http://127.0.0.1:PORT` of the proxy.
    pub url: String,
    backends: Backends,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// A proxy in front of `n` nodes, none of them up yet (see [`Proxy::set`]).
    pub fn start(n: usize) -> TestResult<Proxy> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("http://{}", listener.local_addr()?);
        let backends: Backends = Arc::new(Mutex::new(vec![None; n]));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = oneshot::channel();
        let shared = backends.clone();
        let thread = std::thread::Builder::new()
            .name("round-robin-proxy".into())
            .spawn(move || {
                // Dropping the runtime when `serve` returns closes every proxied connection.
                runtime.block_on(serve(listener, shared, stopped));
            })?;
        Ok(Proxy {
            url,
            backends,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Node `i` is at `addr` (`None`: down, no new connection goes to it).
    pub fn set(&self, i: usize, addr: Option<SocketAddr>) {
        if let Some(slot) = lock(&self.backends).get_mut(i) {
            *slot = addr;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    backends: Backends,
    mut stopped: oneshot::Receiver<()>,
) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    let mut next = 0usize;
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            a = listener.accept() => a,
        };
        let Ok((mut client, _)) = accepted else {
            continue;
        };
        let first = next;
        next = next.wrapping_add(1);
        let nodes = lock(&backends).clone();
        tokio::spawn(async move {
            for k in 0..nodes.len() {
                let Some(addr) = nodes[(first + k) % nodes.len()] else {
                    continue;
                };
                if let Ok(mut upstream) = TcpStream::connect(addr).await {
                    let _ = client.set_nodelay(true);
                    let _ = upstream.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    return;
                }
            }
            // No node is up: the client sees its connection closed.
        });
    }
}
