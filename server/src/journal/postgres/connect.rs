//! How a server connects to PostgreSQL: the URL's settings as they are (no startup parameter a
//! pooler would refuse: the schema is set by each transaction), and TLS as libpq's `sslmode`
//! means it, so the URL a managed database's documentation gives works as it is:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `allow`, `prefer` (the default) | when the server offers it | not checked (encryption only) |
//! | `require` | always | not checked (encryption only) |
//! | `verify-ca` | always | signed by `sslrootcert` |
//! | `verify-full` | always | signed by `sslrootcert`, and names the host |
//!
//! `sslrootcert=PATH` (PEM, one or more CA certificates) is required by the two `verify-` modes.
//! As with libpq, `prefer` and `require` encrypt without authenticating the server: use
//! `verify-full` where the network between the servers and the database is not trusted.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::{Error, Result};
use crate::tls::{read_certificates, EncryptOnly};

/// How long opening a connection may take before the request fails (and `/readyz` says 503).
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and how to connect: the settings and the TLS connector every connection uses.
#[derive(Clone)]
pub(in crate::journal) struct Target {
    pub config: tokio_postgres::Config,
    pub tls: MakeRustlsConnect,
}

/// What `url`'s `sslmode` asks of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Ca,
    CaAndHost,
}

/// The connection target of `url` (`postgres://` or `postgresql://`).
pub(in crate::journal) fn target(url: &str) -> Result<Target> {
    let (rest, mode, root) = take_tls_params(url)?;
    let mut config: tokio_postgres::Config = rest
        .parse()
        .map_err(|e| Error::Config(format!("database URL: {e}")))?;
    let (ssl_mode, check) = match mode.as_deref().unwrap_or("prefer") {
        "disable" => (SslMode::Disable, Check::Nothing),
        "allow" | "prefer" => (SslMode::Prefer, Check::Nothing),
        "require" => (SslMode::Require, Check::Nothing),
        "verify-ca" => (SslMode::Require, Check::Ca),
        "verify-full" => (SslMode::Require, Check::CaAndHost),
        other => {
            return Err(Error::Config(format!(
                "database URL: sslmode={other} is not one of disable, allow, prefer, require, \
                 verify-ca, verify-full"
            )))
        }
    };
    config
        .ssl_mode(ssl_mode)
        .connect_timeout(CONNECT_TIMEOUT)
        .keepalives(true)
        .application_name("turnstream");
    let tls = tls_config(check, root.as_deref())?;
    Ok(Target {
        config,
        tls: MakeRustlsConnect::new(tls),
    })
}

/// `url` without its `sslmode` and `sslrootcert` parameters (tokio-postgres knows neither
/// `verify-*` nor `sslrootcert`), and their values. Other parameters are kept as written.
fn take_tls_params(url: &str) -> Result<(String, Option<String>, Option<String>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), None, None));
    };
    let (mut mode, mut root, mut kept) = (None, None, Vec::new());
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = || {
            percent_encoding::percent_decode_str(value)
                .decode_utf8()
                .map(|v| v.into_owned())
                .map_err(|_| Error::Config(format!("database URL: {key} is not UTF-8")))
        };
        match key {
            "sslmode" => mode = Some(decoded()?),
            "sslrootcert" => root = Some(decoded()?),
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, mode, root))
}

fn tls_config(check: Check, root: Option<&str>) -> Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("database TLS: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        Check::Nothing => Arc::new(EncryptOnly::new(provider)),
        Check::Ca | Check::CaAndHost => {
            let path = root.ok_or_else(|| {
                Error::Config(
                    "database URL: sslmode=verify-ca and verify-full need sslrootcert=PATH \
                     (the CA certificates, PEM, that signed the database's certificate)"
                        .into(),
                )
            })?;
            let roots = read_roots(path)?;
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| Error::Config(format!("database TLS: {e}")))?;
            if check == Check::Ca {
                Arc::new(AnyName { inner: webpki })
            } else {
                webpki
            }
        }
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

fn read_roots(path: &str) -> Result<RootCertStore> {
    let refused =
        |e: &dyn std::fmt::Display| Error::Config(format!("database URL: sslrootcert: {e}"));
    let mut roots = RootCertStore::empty();
    for cert in read_certificates(Path::new(path)).map_err(|e| refused(&e))? {
        roots.add(cert).map_err(|e| refused(&e))?;
    }
    Ok(roots)
}

/// `verify-ca`: the chain must lead to `sslrootcert`; the name in the certificate is not checked.
#[derive(Debug)]
struct AnyName {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_are_taken_out_and_the_rest_kept_as_written() -> Result<()> {
        let (rest, mode, root) = take_tls_params(
            "postgres://u:p@db.example:5432/app?sslmode=verify-full&connect_timeout=3&sslrootcert=%2Fetc%2Fca.pem",
        )?;
        assert_eq!(rest, "postgres://u:p@db.example:5432/app?connect_timeout=3");
        assert_eq!(mode.as_deref(), Some("verify-full"));
        assert_eq!(root.as_deref(), Some("/etc/ca.pem"));
        let (rest, mode, root) = take_tls_params("postgres://localhost/app")?;
        assert_eq!(
            (rest.as_str(), mode, root),
            ("postgres://localhost/app", None, None)
        );
        let (rest, _, _) = take_tls_params("postgres://localhost/app?sslmode=require")?;
        assert_eq!(rest, "postgres://localhost/app");
        Ok(())
    }

    #[test]
    fn modes_map_to_libpq_meanings() -> Result<()> {
        for (mode, want) in [
            ("disable", SslMode::Disable),
            ("allow", SslMode::Prefer),
            ("prefer", SslMode::Prefer),
            ("require", SslMode::Require),
        ] {
            let t = target(&format!("postgres://localhost/app?sslmode={mode}"))?;
            assert_eq!(t.config.get_ssl_mode(), want, "{mode}");
        }
        assert_eq!(
            target("postgres://localhost/app")?.config.get_ssl_mode(),
            SslMode::Prefer
        );
        Ok(())
    }

    #[test]
    fn bad_tls_settings_are_clear_config_errors() {
        let err = |url: &str| match target(url) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        };
        assert!(err("postgres://h/app?sslmode=verify-full").contains("need sslrootcert"));
        assert!(err("postgres://h/app?sslmode=strict").contains("not one of"));
        assert!(
            err("postgres://h/app?sslmode=verify-ca&sslrootcert=/no/such.pem")
                .contains("/no/such.pem")
        );
    }
}
