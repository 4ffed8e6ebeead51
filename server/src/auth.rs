//! Who may do what (contract v1.1): verifies the app's signed tokens and its service keys, and
//! mints tokens for scripts and tests. Knows nothing of HTTP; the gateway's `access` module reads
//! the credential off a request and maps [`AuthError`] to answers.
//!
//! A token is a JWT the app's backend signs (HS256 with a shared secret, or EdDSA / RS256 with a
//! private key whose public half the server holds). Its claims say which user it is (`sub`),
//! until when (`exp`), which sessions (`sessions`, where `prefix*` covers every session id that
//! starts with `prefix`) and what (`scope`: `read`, `write`, `cancel`; all three by default).

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use turnstream_protocol::limits::is_valid_id;

/// Seconds a token stays valid past its `exp` (clock skew between the app and this server).
pub const EXP_LEEWAY_SECS: u64 = 5;
/// Seconds of skew allowed on `nbf` and `iat` (a token minted by a clock slightly ahead).
pub const NBF_LEEWAY_SECS: u64 = 30;
/// Longest credential read from a request, in bytes; longer is refused as `invalid_token`.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// Most entries of a token's `sessions` claim.
pub const MAX_TOKEN_SESSIONS: usize = 256;
/// Longest `sub` (and author), in bytes.
pub const MAX_SUB_BYTES: usize = 256;
/// Shortest HS256 secret accepted: a shorter one could be brute-forced from one token.
pub const MIN_SECRET_BYTES: usize = 32;

/// What a credential may be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// History, the stream, a turn's status.
    Read,
    /// Posting a message, clearing a session's realtime events.
    Write,
    /// Cancelling a turn.
    Cancel,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Cancel => "cancel",
        }
    }

    fn parse(s: &str) -> Option<Scope> {
        Some(match s {
            "read" => Scope::Read,
            "write" => Scope::Write,
            "cancel" => Scope::Cancel,
            _ => return None,
        })
    }
}

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// No auth is configured: anyone may do anything (contract v1).
    Open,
    /// The app's backend, by service key: every session and scope, and the worker API.
    Service,
    /// A user, by token.
    User(UserGrant),
}

/// What a verified token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserGrant {
    pub sub: String,
    sessions: Vec<String>,
    scopes: Vec<Scope>,
    /// Unix seconds.
    pub exp: u64,
}

impl Principal {
    /// Whether this principal may do `scope` on `session`.
    pub fn allows(&self, scope: Scope, session: &str) -> bool {
        match self {
            Principal::Open | Principal::Service => true,
            Principal::User(g) => g.scopes.contains(&scope) && g.covers(session),
        }
    }

    /// The user a message posted by this principal is written by (`None` without a token).
    pub fn author(&self) -> Option<&str> {
        match self {
            Principal::User(g) => Some(&g.sub),
            Principal::Open | Principal::Service => None,
        }
    }

    /// When the credential stops being valid (a stream ends then), if ever.
    pub fn expires_at(&self) -> Option<SystemTime> {
        match self {
            Principal::User(g) => Some(UNIX_EPOCH + Duration::from_secs(g.exp)),
            Principal::Open | Principal::Service => None,
        }
    }
}

impl UserGrant {
    fn covers(&self, session: &str) -> bool {
        self.sessions.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => session.starts_with(prefix),
            None => p == session,
        })
    }
}

/// Why a credential was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error(
        "this server requires a token: send `Authorization: Bearer <token>` or `access_token`"
    )]
    Missing,
    #[error("the token is not valid: {0}")]
    Invalid(String),
    #[error("the token has expired")]
    Expired,
}

/// Claims of a turnstream token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<u64>,
    pub sessions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopeClaim>,
}

/// `scope`: a list (`["read"]`), or the OAuth form, one space-separated string (`"read write"`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ScopeClaim {
    List(Vec<String>),
    Spaced(String),
}

/// The keys this server trusts. Empty: auth is off and everything is [`Principal::Open`].
#[derive(Default)]
pub struct Authenticator {
    /// HS256 secrets (more than one during a rotation).
    secrets: Vec<DecodingKey>,
    /// Public keys with the algorithm each verifies.
    public_keys: Vec<(DecodingKey, Algorithm)>,
    service_keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a secret.
        f.debug_struct("Authenticator")
            .field("secrets", &self.secrets.len())
            .field("public_keys", &self.public_keys.len())
            .field("service_keys", &self.service_keys.len())
            .finish()
    }
}

/// A configuration the server cannot start with.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("an auth secret is {0} bytes; use at least {MIN_SECRET_BYTES} random bytes")]
    ShortSecret(usize),
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{0} is not an Ed25519 or RSA public key in PEM")]
    NotAPublicKey(String),
    #[error("a service key is empty")]
    EmptyServiceKey,
}

/// Reads a secret file: its content without the trailing newline an editor adds.
pub fn read_secret_file(path: &Path) -> Result<String, KeyError> {
    let text = std::fs::read_to_string(path).map_err(|error| KeyError::Read {
        path: path.display().to_string(),
        error,
    })?;
    Ok(text.trim_end_matches(['\n', '\r']).to_string())
}

impl Authenticator {
    /// Builds the verifier from secrets, public key files (PEM) and service keys.
    pub fn new(
        secrets: &[String],
        public_key_files: &[std::path::PathBuf],
        service_keys: &[String],
    ) -> Result<Authenticator, KeyError> {
        let mut auth = Authenticator::default();
        for s in secrets {
            if s.len() < MIN_SECRET_BYTES {
                return Err(KeyError::ShortSecret(s.len()));
            }
            let key = DecodingKey::from_secret(s.as_bytes())
                .map_err(|_| KeyError::ShortSecret(s.len()))?;
            auth.secrets.push(key);
        }
        for path in public_key_files {
            let pem = std::fs::read(path).map_err(|error| KeyError::Read {
                path: path.display().to_string(),
                error,
            })?;
            let key = if let Ok(k) = DecodingKey::from_ed_pem(&pem) {
                (k, Algorithm::EdDSA)
            } else if let Ok(k) = DecodingKey::from_rsa_pem(&pem) {
                (k, Algorithm::RS256)
            } else {
                return Err(KeyError::NotAPublicKey(path.display().to_string()));
            };
            auth.public_keys.push(key);
        }
        for k in service_keys {
            if k.is_empty() {
                return Err(KeyError::EmptyServiceKey);
            }
            auth.service_keys.push(k.as_bytes().to_vec());
        }
        Ok(auth)
    }

    /// Whether any credential is required (else every request is [`Principal::Open`]).
    pub fn enabled(&self) -> bool {
        !(self.secrets.is_empty() && self.public_keys.is_empty() && self.service_keys.is_empty())
    }

    /// Who presents `credential` (a token or a service key), at `now`.
    pub fn authenticate(
        &self,
        credential: Option<&str>,
        now: SystemTime,
    ) -> Result<Principal, AuthError> {
        if !self.enabled() {
            return Ok(Principal::Open);
        }
        let Some(credential) = credential.map(str::trim).filter(|c| !c.is_empty()) else {
            return Err(AuthError::Missing);
        };
        if credential.len() > MAX_TOKEN_BYTES {
            return Err(AuthError::Invalid(format!(
                "longer than {MAX_TOKEN_BYTES} bytes"
            )));
        }
        if self.is_service_key(credential.as_bytes()) {
            return Ok(Principal::Service);
        }
        self.verify_token(credential, now).map(Principal::User)
    }

    /// Compares with every service key in constant time (no early exit: the time taken says
    /// nothing of which key, or how much of one, matched).
    fn is_service_key(&self, candidate: &[u8]) -> bool {
        let mut found = subtle::Choice::from(0);
        for key in &self.service_keys {
            found |= key.as_slice().ct_eq(candidate);
        }
        found.into()
    }

    fn verify_token(&self, token: &str, now: SystemTime) -> Result<UserGrant, AuthError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| AuthError::Invalid(format!("malformed: {e}")))?;
        let keys: Vec<&DecodingKey> = match header.alg {
            Algorithm::HS256 => self.secrets.iter().collect(),
            alg @ (Algorithm::EdDSA | Algorithm::RS256) => self
                .public_keys
                .iter()
                .filter(|(_, a)| *a == alg)
                .map(|(k, _)| k)
                .collect(),
            other => {
                return Err(AuthError::Invalid(format!(
                    "algorithm {other:?} is not accepted"
                )))
            }
        };
        if keys.is_empty() {
            return Err(AuthError::Invalid(format!(
                "this server has no key for algorithm {:?}",
                header.alg
            )));
        }
        let mut validation = Validation::new(header.alg);
        validation.leeway = EXP_LEEWAY_SECS;
        validation.validate_nbf = false; // checked below, with its own leeway
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp", "sub"]);
        let mut last = AuthError::Invalid("bad signature".into());
        for key in keys {
            match jsonwebtoken::decode::<Claims>(token, key, &validation) {
                Ok(data) => return grant(data.claims, now),
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind;
                    last = match e.kind() {
                        // The signature checked out (it is verified first): the token is ours.
                        ErrorKind::ExpiredSignature => return Err(AuthError::Expired),
                        ErrorKind::InvalidSignature => AuthError::Invalid("bad signature".into()),
                        ErrorKind::MissingRequiredClaim(c) => {
                            return Err(AuthError::Invalid(format!("no `{c}` claim")))
                        }
                        ErrorKind::Json(_) | ErrorKind::InvalidClaimFormat(_) => {
                            return Err(AuthError::Invalid(format!("claims: {e}")))
                        }
                        _ => AuthError::Invalid(e.to_string()),
                    };
                }
            }
        }
        Err(last)
    }
}

/// Checks what the signature library does not, and turns claims into a grant.
fn grant(claims: Claims, now: SystemTime) -> Result<UserGrant, AuthError> {
    let now = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if claims.exp.saturating_add(EXP_LEEWAY_SECS) < now {
        return Err(AuthError::Expired);
    }
    if claims.nbf.is_some_and(|nbf| nbf > now + NBF_LEEWAY_SECS) {
        return Err(AuthError::Invalid("not valid yet (`nbf`)".into()));
    }
    if claims.iat.is_some_and(|iat| iat > now + NBF_LEEWAY_SECS) {
        return Err(AuthError::Invalid("issued in the future (`iat`)".into()));
    }
    if claims.sub.is_empty() || claims.sub.len() > MAX_SUB_BYTES {
        return Err(AuthError::Invalid(format!(
            "`sub` must be 1 to {MAX_SUB_BYTES} bytes"
        )));
    }
    if claims.sessions.len() > MAX_TOKEN_SESSIONS {
        return Err(AuthError::Invalid(format!(
            "`sessions` has more than {MAX_TOKEN_SESSIONS} entries"
        )));
    }
    for s in &claims.sessions {
        if !is_session_pattern(s) {
            return Err(AuthError::Invalid(format!(
                "`sessions` entry {s:?} is neither a session id nor a prefix ending in `*`"
            )));
        }
    }
    let scopes = match &claims.scope {
        None => vec![Scope::Read, Scope::Write, Scope::Cancel],
        Some(ScopeClaim::List(list)) => parse_scopes(list.iter().map(String::as_str))?,
        Some(ScopeClaim::Spaced(s)) => parse_scopes(s.split_whitespace())?,
    };
    Ok(UserGrant {
        sub: claims.sub,
        sessions: claims.sessions,
        scopes,
        exp: claims.exp,
    })
}

fn parse_scopes<'a>(items: impl Iterator<Item = &'a str>) -> Result<Vec<Scope>, AuthError> {
    items
        .map(|s| {
            Scope::parse(s).ok_or_else(|| {
                AuthError::Invalid(format!("unknown scope {s:?} (known: read, write, cancel)"))
            })
        })
        .collect()
}

/// A session id, or a prefix of one followed by `*` (`*` alone covers every session).
pub fn is_session_pattern(p: &str) -> bool {
    match p.strip_suffix('*') {
        Some("") => true,
        Some(prefix) => is_valid_id(prefix),
        None => is_valid_id(p),
    }
}

/// Mints an HS256 token (for `turnstream token`, scripts and tests).
pub fn mint(
    secret: &str,
    sub: &str,
    sessions: &[String],
    scope: Option<&[Scope]>,
    ttl: Duration,
    now: SystemTime,
) -> Result<String, jsonwebtoken::errors::Error> {
    let now = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let claims = Claims {
        sub: sub.to_string(),
        exp: now + ttl.as_secs(),
        nbf: None,
        iat: Some(now),
        sessions: sessions.to_vec(),
        scope: scope.map(|s| ScopeClaim::List(s.iter().map(|x| x.as_str().into()).collect())),
    };
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes())?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn auth() -> Authenticator {
        match Authenticator::new(&[SECRET.into()], &[], &["svc-key-1".into()]) {
            Ok(a) => a,
            Err(e) => panic!("{e}"),
        }
    }

    fn token(sessions: &[&str], scope: Option<&[Scope]>, ttl: u64) -> String {
        let sessions: Vec<String> = sessions.iter().map(|s| s.to_string()).collect();
        match mint(
            SECRET,
            "u1",
            &sessions,
            scope,
            Duration::from_secs(ttl),
            SystemTime::now(),
        ) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn off_without_keys() {
        let a = Authenticator::default();
        assert!(!a.enabled());
        assert_eq!(a.authenticate(None, SystemTime::now()), Ok(Principal::Open));
    }

    #[test]
    fn tokens_cover_sessions_prefixes_and_scopes() {
        let a = auth();
        let now = SystemTime::now();
        let p = a
            .authenticate(Some(&token(&["s1", "user-42:*"], None, 60)), now)
            .unwrap_or(Principal::Open);
        let Principal::User(_) = &p else {
            panic!("not a user: {p:?}")
        };
        assert!(p.allows(Scope::Read, "s1"));
        assert!(p.allows(Scope::Cancel, "user-42:abc"));
        assert!(!p.allows(Scope::Read, "s2"));
        assert!(!p.allows(Scope::Read, "user-43:abc"));
        assert_eq!(p.author(), Some("u1"));
        let ro = a
            .authenticate(Some(&token(&["s1"], Some(&[Scope::Read]), 60)), now)
            .unwrap_or(Principal::Open);
        assert!(ro.allows(Scope::Read, "s1"));
        assert!(!ro.allows(Scope::Write, "s1"));
        assert!(!ro.allows(Scope::Cancel, "s1"));
    }

    #[test]
    fn service_keys_and_refusals() {
        let a = auth();
        let now = SystemTime::now();
        assert_eq!(
            a.authenticate(Some("svc-key-1"), now),
            Ok(Principal::Service)
        );
        assert_eq!(a.authenticate(None, now), Err(AuthError::Missing));
        assert!(matches!(
            a.authenticate(Some("svc-key-2"), now),
            Err(AuthError::Invalid(_))
        ));
        // Expired by more than the leeway.
        let old = token(&["s1"], None, 0);
        let later = now + Duration::from_secs(EXP_LEEWAY_SECS + 2);
        assert_eq!(a.authenticate(Some(&old), later), Err(AuthError::Expired));
        // Within the leeway it still works.
        assert!(a
            .authenticate(Some(&old), now + Duration::from_secs(1))
            .is_ok());
        // Signed with another secret.
        let other = mint(
            "another-secret-of-enough-length!!",
            "u1",
            &["s1".into()],
            None,
            Duration::from_secs(60),
            now,
        )
        .unwrap_or_default();
        assert!(matches!(
            a.authenticate(Some(&other), now),
            Err(AuthError::Invalid(_))
        ));
    }

    /// `{"alg":"none","typ":"JWT"}`, base64url: an unsigned token's header.
    const ALG_NONE_HEADER: &str = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0";

    #[test]
    fn alg_none_and_garbage_are_invalid() {
        let a = auth();
        let now = SystemTime::now();
        // Valid claims (a real token's), with the header swapped for `alg: none`.
        let real = token(&["s1"], None, 60);
        let claims = real.split('.').nth(1).unwrap_or_default();
        for t in [
            format!("{ALG_NONE_HEADER}.{claims}."),
            format!("{ALG_NONE_HEADER}.{claims}"),
            "x.y.z".to_string(),
            "not a token".to_string(),
            "a".repeat(MAX_TOKEN_BYTES + 1),
        ] {
            assert!(
                matches!(a.authenticate(Some(&t), now), Err(AuthError::Invalid(_))),
                "{t:.40} should be invalid"
            );
        }
    }

    #[test]
    fn claims_are_checked() {
        let a = auth();
        let now = SystemTime::now();
        let bad_session = mint(
            SECRET,
            "u1",
            &["a/b".into()],
            None,
            Duration::from_secs(60),
            now,
        )
        .unwrap_or_default();
        assert!(matches!(
            a.authenticate(Some(&bad_session), now),
            Err(AuthError::Invalid(_))
        ));
        assert!(is_session_pattern("user-42:*"));
        assert!(is_session_pattern("*"));
        assert!(!is_session_pattern("**"));
        assert!(!is_session_pattern(""));
    }
}
