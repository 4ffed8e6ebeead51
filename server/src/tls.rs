//! HTTPS: the certificate chain and private key (`--tls-cert`, `--tls-key`, PEM files), and the
//! rustls configuration that offers HTTP/2 and HTTP/1.1 by ALPN. The accept loop
//! ([`crate::serve`]) does the handshake and picks hyper's HTTP/2 or HTTP/1.1 connection by the
//! protocol the client chose.
//!
//! The crypto provider is *ring*, named here rather than installed process-wide, so nothing
//! depends on which provider another crate in the process enables.
//!
//! For the server's own TLS connections as a client (PostgreSQL with `sslmode=prefer` or
//! `require`), [`EncryptOnly`] accepts any certificate, as libpq does in those modes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// ALPN protocol ids, in the server's order of preference.
pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// Why the certificate or key cannot be served; each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--tls-cert and --tls-key go together: give both, or neither for plain HTTP")]
    Incomplete,
    #[error("cannot read {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)", .0.display())]
    NoCertificate(PathBuf),
    #[error("{} holds no PEM private key (PKCS#8 `BEGIN PRIVATE KEY`, RSA `BEGIN RSA PRIVATE KEY` or SEC1 `BEGIN EC PRIVATE KEY`)", .0.display())]
    NoKey(PathBuf),
    #[error("{} is not valid PEM: {source}", path.display())]
    Pem { path: PathBuf, source: pem::Error },
    #[error("the TLS certificate {} and key {} cannot be used together: {source}", cert.display(), key.display())]
    Rejected {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// The certificate chain in `path` (leaf first, as a PEM bundle lists it).
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read("the TLS certificate", path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_path_buf()));
    }
    Ok(certs)
}

/// The first private key in `path`: PKCS#8, RSA (PKCS#1) or EC (SEC1).
pub fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read("the TLS key", path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoKey(path.to_path_buf()),
        source => TlsError::Pem {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// The server's TLS configuration: the chain in `cert`, the key in `key` (which must belong to
/// the chain's first certificate), TLS 1.2 and 1.3, and ALPN `h2` then `http/1.1`.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = read_certificates(cert)?;
    let private = read_private_key(key)?;
    let rejected = |source| TlsError::Rejected {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        source,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(rejected)?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(rejected)?;
    config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
    Ok(Arc::new(config))
}

/// A client's certificate check that accepts any certificate but still checks the handshake's
/// signatures: the connection is encrypted to whoever holds the certificate's key, who is not
/// authenticated.
#[derive(Debug)]
pub struct EncryptOnly {
    provider: Arc<CryptoProvider>,
}

impl EncryptOnly {
    pub fn new(provider: Arc<CryptoProvider>) -> EncryptOnly {
        EncryptOnly { provider }
    }
}

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed() -> rcgen::CertifiedKey<rcgen::KeyPair> {
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .expect("self-signed certificate")
    }

    #[test]
    fn loads_a_chain_and_key_and_offers_h2_first() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let ck = self_signed();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, ck.cert.pem())?;
        std::fs::write(&key, ck.signing_key.serialize_pem())?;
        let config = server_config(&cert, &key)?;
        assert_eq!(
            config.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        Ok(())
    }

    #[test]
    fn clear_errors_for_missing_empty_and_mismatched_files(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let (a, b) = (self_signed(), self_signed());
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        let other_key = dir.path().join("other-key.pem");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&cert, a.cert.pem())?;
        std::fs::write(&key, a.signing_key.serialize_pem())?;
        std::fs::write(&other_key, b.signing_key.serialize_pem())?;
        std::fs::write(&empty, "not pem at all\n")?;

        let missing = dir.path().join("missing.pem");
        let e = server_config(&missing, &key)
            .err()
            .ok_or("missing cert loaded")?;
        assert!(
            e.to_string().starts_with("cannot read the TLS certificate")
                && e.to_string().contains("missing.pem"),
            "{e}"
        );
        let e = server_config(&empty, &key)
            .err()
            .ok_or("empty cert loaded")?;
        assert!(matches!(e, TlsError::NoCertificate(_)), "{e}");
        let e = server_config(&cert, &empty)
            .err()
            .ok_or("empty key loaded")?;
        assert!(matches!(e, TlsError::NoKey(_)), "{e}");
        // A key is not a certificate, nor a certificate a key.
        let e = server_config(&key, &key)
            .err()
            .ok_or("key as cert loaded")?;
        assert!(matches!(e, TlsError::NoCertificate(_)), "{e}");
        let e = server_config(&cert, &other_key)
            .err()
            .ok_or("another certificate's key loaded")?;
        assert!(matches!(e, TlsError::Rejected { .. }), "{e}");
        Ok(())
    }
}
