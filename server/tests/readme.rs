//! The README's shell snippets of contract v1.2 (`<!-- snippet: NAME -->` before a `sh` block),
//! run as written with bash and curl against the real binary (`$TS` is its URL): what a reader
//! pastes is what this runs.

mod support;

use std::process::Command;

use support::*;

/// The `sh` block after `<!-- snippet: marker -->` in the README.
fn snippet(marker: &str) -> TestResult<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))?;
    let at = readme
        .find(&format!("<!-- snippet: {marker} -->"))
        .ok_or_else(|| format!("no snippet {marker} in README.md"))?;
    let rest = &readme[at..];
    let start = rest.find("```sh\n").ok_or("no sh block")? + "```sh\n".len();
    let end = rest[start..].find("\n```").ok_or("unclosed block")?;
    Ok(rest[start..start + end].to_string())
}

/// Runs `script` with bash (`-eu -o pipefail`), `$TS` set to the server; returns its output.
fn run(s: &TestServer, script: &str) -> TestResult<String> {
    let out = Command::new("timeout")
        .args(["60", "bash", "-eu", "-o", "pipefail", "-c", script])
        .env("TS", &s.url)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(format!(
            "the snippet failed ({}): {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(stdout)
}

#[tokio::test]
async fn the_agents_that_ask_snippet_runs_as_written() -> TestResult {
    let s = TestServer::start(&[])?;
    let out = run(&s, &snippet("agents-that-ask")?)?;
    assert!(out.contains(r#""state":"running""#), "{out}");
    assert!(out.contains(r#""text":"Approved: deploy prod""#), "{out}");
    Ok(())
}

#[tokio::test]
async fn the_branches_snippet_runs_as_written() -> TestResult {
    let s = TestServer::start(&[])?;
    let out = run(&s, &snippet("branches")?)?;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [r#""index":1,"count":2"#, r#""index":0,"count":2"#],
        "{out}"
    );
    Ok(())
}
