//! TLS to PostgreSQL, as libpq's `sslmode` means it: the real binary reaches its database through
//! a proxy in this process that speaks PostgreSQL's TLS negotiation (`SSLRequest`, then a TLS
//! handshake with a certificate made here) and refuses every connection that does not encrypt.
//! `require` encrypts, `verify-full` with the right `sslrootcert` connects, and with the wrong one
//! the server does not start and says why.
//!
//! These run only on PostgreSQL (`TURNSTREAM_TEST_DATABASE_URL`, set by `./run test` for its
//! private cluster); elsewhere each returns at once, saying why.

mod support;

use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use support::{listening_url, pg, Api, TestResult, DEADLINE};
use turnstream_protocol::TurnState;

/// PostgreSQL's `SSLRequest`: length 8, then the code 1234/5679.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// A certificate for 127.0.0.1 and localhost, signed by a CA of its own, as PEM files in `dir`:
/// (the CA's certificate, the server's certificate, its key).
fn certificates(dir: &Path, name: &str) -> TestResult<(String, String, String)> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} test CA"));
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate()?;
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])?;
    let cert = leaf.signed_by(&key, &issuer)?;
    let paths = [
        dir.join(format!("{name}-ca.pem")),
        dir.join(format!("{name}-cert.pem")),
        dir.join(format!("{name}-key.pem")),
    ];
    std::fs::write(&paths[0], ca_cert.pem())?;
    std::fs::write(&paths[1], cert.pem())?;
    std::fs::write(&paths[2], key.serialize_pem())?;
    let s =
        |p: &Path| -> TestResult<String> { Ok(p.to_str().ok_or("non-UTF-8 path")?.to_string()) };
    Ok((s(&paths[0])?, s(&paths[1])?, s(&paths[2])?))
}

/// A proxy to PostgreSQL at `upstream` that only lets encrypted connections through.
struct TlsOnlyProxy {
    addr: SocketAddr,
    /// TLS handshakes completed.
    handshakes: Arc<AtomicUsize>,
    /// Connections refused for not asking for TLS.
    plain: Arc<AtomicUsize>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TlsOnlyProxy {
    fn start(upstream: SocketAddr, cert: &str, key: &str) -> TestResult<TlsOnlyProxy> {
        let certs = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(key)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, mut stopped) = oneshot::channel::<()>();
        let handshakes = Arc::new(AtomicUsize::new(0));
        let plain = Arc::new(AtomicUsize::new(0));
        let (h, p) = (handshakes.clone(), plain.clone());
        let thread = std::thread::Builder::new()
            .name("tls-only-proxy".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    loop {
                        let accepted = tokio::select! {
                            _ = &mut stopped => return,
                            a = listener.accept() => a,
                        };
                        let Ok((client, _)) = accepted else { continue };
                        tokio::spawn(relay(
                            client,
                            upstream,
                            acceptor.clone(),
                            h.clone(),
                            p.clone(),
                        ));
                    }
                });
            })?;
        Ok(TlsOnlyProxy {
            addr,
            handshakes,
            plain,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for TlsOnlyProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn relay(
    mut client: TcpStream,
    upstream: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    handshakes: Arc<AtomicUsize>,
    plain: Arc<AtomicUsize>,
) {
    let mut first = [0u8; 8];
    if client.read_exact(&mut first).await.is_err() {
        return;
    }
    if first != SSL_REQUEST {
        plain.fetch_add(1, Ordering::SeqCst);
        return; // no TLS asked for: the connection is closed
    }
    if client.write_all(b"S").await.is_err() {
        return;
    }
    let Ok(mut tls) = acceptor.accept(client).await else {
        return;
    };
    handshakes.fetch_add(1, Ordering::SeqCst);
    let Ok(mut db) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = tokio::io::copy_bidirectional(&mut tls, &mut db).await;
}

/// The host and port of a `postgres://user@host:port/db` URL.
fn socket_of(url: &str) -> TestResult<SocketAddr> {
    let rest = url.split_once("://").ok_or("no scheme")?.1;
    let authority = rest.split('/').next().unwrap_or("");
    let hostport = authority.rsplit('@').next().unwrap_or(authority);
    Ok(hostport.parse()?)
}

/// `turnstream serve` on `db`, its URL once it listens.
fn serve(db: &str) -> TestResult<(Child, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstream"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db", db])
        .args(["--demo-delay-ms", "2"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let url = listening_url(&mut child)?;
    Ok((child, url))
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A database of its own on the test cluster, or `None` (and why, on stderr) without one.
fn database(test: &str) -> TestResult<Option<(pg::TestDatabase, SocketAddr)>> {
    let Some(admin) = pg::admin_url() else {
        eprintln!(
            "{test}: skipped: needs PostgreSQL and TURNSTREAM_TEST_DATABASE_URL is unset \
             (`./run test` starts a private cluster and sets it)"
        );
        return Ok(None);
    };
    let db = pg::TestDatabase::create(&admin)?;
    let upstream = socket_of(&admin)?;
    Ok(Some((db, upstream)))
}

/// A message's reply comes back: the journal works through the connection.
async fn round_trip(url: &str) -> TestResult {
    let api = Api {
        url: url.to_string(),
        http: reqwest::Client::builder().timeout(DEADLINE).build()?,
    };
    let sent = api.send("tls", "/echo over tls").await?;
    let turn = api.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(turn.state, TurnState::Completed);
    let (history, _) = api.history("tls").await?;
    let texts: Vec<&str> = history
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert!(texts.iter().any(|t| t.contains("over tls")), "{texts:?}");
    Ok(())
}

#[tokio::test]
async fn sslmode_require_encrypts_every_connection() -> TestResult {
    let Some((db, upstream)) = database("sslmode_require_encrypts_every_connection")? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let (_, cert, key) = certificates(dir.path(), "server")?;
    let proxy = TlsOnlyProxy::start(upstream, &cert, &key)?;
    let url = format!(
        "postgres://postgres@{}/{}?sslmode=require",
        proxy.addr, db.name
    );
    let (child, base) = serve(&url)?;
    let result = round_trip(&base).await;
    stop(child);
    result?;
    // The pool's connections and the tail's listening one, all through TLS, none in the clear.
    assert!(proxy.handshakes.load(Ordering::SeqCst) >= 2);
    assert_eq!(proxy.plain.load(Ordering::SeqCst), 0);
    Ok(())
}

#[tokio::test]
async fn verify_full_connects_with_the_right_root_and_refuses_another() -> TestResult {
    let Some((db, upstream)) =
        database("verify_full_connects_with_the_right_root_and_refuses_another")?
    else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let (ca, cert, key) = certificates(dir.path(), "server")?;
    let (other_ca, _, _) = certificates(dir.path(), "other")?;
    let proxy = TlsOnlyProxy::start(upstream, &cert, &key)?;
    let url = |root: &str| {
        format!(
            "postgres://postgres@{}/{}?sslmode=verify-full&sslrootcert={root}",
            proxy.addr, db.name
        )
    };

    let (child, base) = serve(&url(&ca))?;
    let result = round_trip(&base).await;
    stop(child);
    result?;

    // Signed by another CA: the server does not start, and says why.
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstream"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db", &url(&other_ca)])
        .env("RUST_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            stop(child);
            return Err("the server started with a certificate it should refuse".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut stderr)?;
    }
    assert!(!status.success());
    assert!(stderr.contains("invalid peer certificate"), "{stderr}");
    Ok(())
}
