//! Start-up that tells the truth: a server that cannot serve exits non-zero without ever printing
//! `turnstream listening on ...`, and what it prints names the cause in the database's (or the
//! pooler's) own words, with the URL and without its password: a database nobody answers at, a
//! wrong password, a pooler refusing a startup parameter, a role that may not create the schema,
//! an empty service key.
//!
//! The PostgreSQL cases need `TURNSTREAM_TEST_DATABASE_URL` (the private cluster of `./run test`,
//! where the role `ts_password` must give a password), the pooler's need
//! `TURNSTREAM_TEST_POOLER_URL` (`scripts/pg-pooler.sh`); without them each says so and returns.

mod support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{listening_url, pg, Api, TestResult, DEADLINE};

/// A password the tests write into URLs: it must never be printed.
const SECRET: &str = "s3cret-never-printed";

/// What a server that could not start printed, and how it exited.
struct Failed {
    stdout: String,
    stderr: String,
}

/// Runs `turnstream serve` with `args` and expects it to exit non-zero before serving.
fn must_fail(args: &[&str]) -> TestResult<Failed> {
    let dir = tempfile::tempdir()?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstream"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("`serve {args:?}` did not exit").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    if let Some(mut o) = child.stdout.take() {
        o.read_to_string(&mut stdout)?;
    }
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut stderr)?;
    }
    assert!(!status.success(), "`serve {args:?}` exited {status}");
    assert!(
        !stdout.contains("turnstream listening on"),
        "a server that could not start said it was listening: {stdout}"
    );
    assert!(
        !stderr.contains(SECRET) && !stdout.contains(SECRET),
        "the password was printed: {stderr}"
    );
    eprintln!("serve {args:?} printed:\n{stderr}");
    Ok(Failed { stdout, stderr })
}

/// Checks that `printed` contains each of `words`.
fn names(printed: &str, words: &[&str]) {
    for w in words {
        assert!(printed.contains(w), "{w:?} is not named in:\n{printed}");
    }
}

/// `url` with `user:password` in place of its user.
fn as_user(url: &str, user: &str, password: Option<&str>) -> TestResult<String> {
    let (scheme, rest) = url.split_once("://").ok_or("a URL has a scheme")?;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    Ok(match password {
        Some(p) => format!("{scheme}://{user}:{p}@{rest}"),
        None => format!("{scheme}://{user}@{rest}"),
    })
}

/// Creates `role` (LOGIN, the cluster-wide kind) unless it exists; `password` sets one.
fn ensure_role(admin: &str, role: &str, password: Option<&str>) -> TestResult {
    let with = password.map_or(String::new(), |p| format!(" PASSWORD '{p}'"));
    pg::sql(
        admin,
        &format!(
            "DO $$ BEGIN CREATE ROLE {role} LOGIN{with}; \
             EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        ),
    )?;
    Ok(())
}

fn skipped(test: &str, needs: &str) -> TestResult {
    eprintln!("{test}: skipped: needs {needs}");
    Ok(())
}

#[test]
fn a_database_nobody_answers_at_is_named_with_its_url_and_cause() -> TestResult {
    // A port just freed: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("postgres://app:{SECRET}@127.0.0.1:{port}/chat");
    let out = must_fail(&["--db", &url])?;
    names(
        &out.stderr,
        &[
            &format!("postgres://app@127.0.0.1:{port}/chat"),
            "cannot connect to the database",
            "Connection refused",
            "is the database, or its pooler, running there?",
        ],
    );
    Ok(())
}

#[test]
fn a_wrong_password_is_named() -> TestResult {
    let Some(admin) = pg::admin_url() else {
        return skipped("a_wrong_password_is_named", "TURNSTREAM_TEST_DATABASE_URL");
    };
    // The private cluster (and the pooler in front of it) asks this role for a password; it
    // has one, which is not this one.
    ensure_role(&admin, "ts_password", Some("the-right-one-is-elsewhere"))?;
    let db = pg::TestDatabase::create(&admin)?;
    // PostgreSQL's words, then PgBouncer's (SCRAM, as it checks passwords itself).
    let mut urls = vec![(db.url.clone(), "password authentication failed")];
    if db.server_url != db.url {
        urls.push((db.server_url.clone(), "SASL authentication failed"));
    }
    for (url, words) in urls {
        let url = as_user(&url, "ts_password", Some(SECRET))?;
        let out = must_fail(&["--db", &url])?;
        names(
            &out.stderr,
            &[
                &as_user(&url, "ts_password", None)?,
                words,
                "check the user and the password",
            ],
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_pooler_refusing_a_startup_parameter_is_named() -> TestResult {
    let (Some(admin), Some(_)) = (pg::admin_url(), pg::pooler_url()) else {
        return skipped(
            "a_pooler_refusing_a_startup_parameter_is_named",
            "TURNSTREAM_TEST_POOLER_URL",
        );
    };
    let db = pg::TestDatabase::create(&admin)?;
    // What a user may well add to a URL; PgBouncer refuses it unless told to ignore it.
    let url = format!("{}?options=-c%20statement_timeout%3D5s", db.server_url);
    let out = must_fail(&["--db", &url])?;
    names(
        &out.stderr,
        &[
            &db.server_url,
            "unsupported startup parameter: options",
            "ignore_startup_parameters",
        ],
    );
    // Without it, the same pooler serves.
    let mut ok = support::TestServer::start(&[])?;
    let (status, _) = ok.get_json("/readyz").await?;
    assert_eq!(status, 200);
    ok.terminate()?;
    Ok(())
}

#[test]
fn a_role_that_may_not_create_the_schema_is_named() -> TestResult {
    let Some(admin) = pg::admin_url() else {
        return skipped(
            "a_role_that_may_not_create_the_schema_is_named",
            "TURNSTREAM_TEST_DATABASE_URL",
        );
    };
    ensure_role(&admin, "ts_noschema", None)?;
    let db = pg::TestDatabase::create(&admin)?;
    let url = as_user(&db.server_url, "ts_noschema", None)?;
    let out = must_fail(&["--db", &url])?;
    names(
        &out.stderr,
        &[
            &url,
            "cannot create or migrate the turnstream schema",
            &format!("permission denied for database {}", db.name),
            "GRANT CREATE ON DATABASE",
        ],
    );
    // An administrator created the schema, but gave the role nothing on it.
    pg::sql(&db.url, "CREATE SCHEMA turnstream")?;
    let out = must_fail(&["--db", &url])?;
    names(
        &out.stderr,
        &[
            "permission denied for schema turnstream",
            "GRANT USAGE, CREATE ON SCHEMA turnstream",
        ],
    );
    Ok(())
}

#[test]
fn an_empty_service_key_is_refused_before_listening() -> TestResult {
    let out = must_fail(&["--service-key", ""])?;
    names(&out.stderr, &["a service key is empty"]);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    Ok(())
}

/// The line scripts wait for comes once the server answers: the first request after it is
/// served, with the journal ready.
#[tokio::test]
async fn the_listening_line_means_the_server_answers() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstream"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(dir.path().join("t.db"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let api = Api {
        url: listening_url(&mut child)?,
        http: reqwest::Client::builder().timeout(DEADLINE).build()?,
    };
    let (status, body) = api.get_json("/readyz").await?;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200, "{body}");
    Ok(())
}
