//! The module layout of the repository's crates, read from their `crate::` and `super::` paths:
//! no import circle among the modules of one parent (a crate's components, and the modules inside
//! each of them) in any crate (`server`, `protocol`, `client-wasm`, `bench`), and in the server no
//! module but the crate root using an item of the crate root. Test code
//! (`#[cfg(test)]` modules, `tests.rs` files, `tests/` folders) is left out: it may reach
//! across for fixtures.
//!
//! A path names the deepest module it reaches; two modules of one parent depend on each other
//! when any file under one names anything under the other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// One file of the crate: its module path (`["journal", "writer"]`) and its code without comments
/// or test modules, line by line.
struct Source {
    module: Vec<String>,
    file: PathBuf,
    lines: Vec<(usize, String)>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// `journal/mod.rs` is `journal`, `journal/writer.rs` is `journal::writer`, `lib.rs` the root.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of `text` without comments and without `#[cfg(test)]` modules.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        let trimmed = line.trim();
        if trimmed == "#[cfg(test)]" {
            let next = lines.peek().map(|(_, l)| l.trim().to_string());
            if let Some(next) = next.filter(|l| l.starts_with("mod ") || l.starts_with("pub mod "))
            {
                lines.next();
                if next.ends_with('{') {
                    // Skip to the module's closing brace.
                    let mut depth = 1i32;
                    for (_, l) in lines.by_ref() {
                        depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
                        if depth <= 0 {
                            break;
                        }
                    }
                }
                continue;
            }
        }
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        out.push((i + 1, code.to_string()));
    }
    out
}

/// The files of the crate whose sources are under `root`. `binary`: `main.rs` is the crate root
/// (the bench); else it is a crate of its own and left out (the server's binary). Programs under
/// `bin/` are crates of their own.
fn sources(root: &Path, binary: bool) -> Result<Vec<Source>, Box<dyn std::error::Error>> {
    let mut files = Vec::new();
    rust_files(root, &mut files)?;
    let mut out = Vec::new();
    for file in files {
        let rel = file.strip_prefix(root)?.to_path_buf();
        let name = rel.file_name().map(|n| n.to_string_lossy().to_string());
        // The binary is a crate of its own; test files (`tests.rs`, a `tests/` folder of
        // modules) are test code.
        let test_code = name.as_deref() == Some("tests.rs") || rel.iter().any(|p| p == "tests");
        let other_crate = (!binary && rel == Path::new("main.rs")) || rel.starts_with("bin");
        if test_code || other_crate {
            continue;
        }
        let text = std::fs::read_to_string(&file)?;
        out.push(Source {
            module: module_of(&rel),
            file: rel,
            lines: code_lines(&text),
        });
    }
    Ok(out)
}

/// The paths a line names from the crate root: `crate::a::b` and each branch of
/// `crate::{a::b, c}`, and `super::x` resolved against `module`.
fn paths_in(line: &str, module: &[String]) -> Vec<Vec<String>> {
    let ident = |s: &str| -> Vec<String> {
        s.split("::")
            .map(|seg| {
                seg.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .take_while(|seg| !seg.is_empty())
            .collect()
    };
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        // `$crate::` in macros is the same crate; skip other words ending in `crate`.
        let before = rest[..at].chars().last();
        let tail = &rest[at + "crate::".len()..];
        rest = tail;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = tail.strip_prefix('{') {
            let mut depth = 0;
            let mut branch = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(ident(branch.trim()));
                        branch.clear();
                        continue;
                    }
                    _ => {}
                }
                branch.push(c);
            }
            out.push(ident(branch.trim()));
        } else {
            out.push(ident(tail));
        }
    }
    let mut rest = line;
    while let Some(at) = rest.find("super::") {
        let before = rest[..at].chars().last();
        let mut tail = &rest[at..];
        // The module the code is in (a `mod.rs` file's is its folder's): `super` is its parent,
        // and each further `super` the parent's.
        let mut base = module.to_vec();
        while let Some(next) = tail.strip_prefix("super::") {
            tail = next;
            base.pop();
        }
        rest = tail;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut path = base;
        path.extend(ident(tail));
        out.push(path);
    }
    out.retain(|p| !p.is_empty());
    out
}

/// Every module of the crate, by path.
fn modules(sources: &[Source]) -> BTreeSet<Vec<String>> {
    sources.iter().map(|s| s.module.clone()).collect()
}

/// The deepest module `path` reaches, and whether it names an item of the crate root.
fn target(path: &[String], modules: &BTreeSet<Vec<String>>) -> Vec<String> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
        .unwrap_or_default()
}

/// One dependency between modules of one parent, with where it is seen.
type Edges = BTreeMap<Vec<String>, BTreeMap<(String, String), String>>;

fn edges(sources: &[Source]) -> (Edges, Vec<String>) {
    let modules = modules(sources);
    let mut edges = Edges::new();
    let mut root_items = Vec::new();
    for s in sources {
        if s.module.is_empty() {
            continue; // the crate root assembles everything
        }
        for (line_no, line) in &s.lines {
            for path in paths_in(line, &s.module) {
                let to = target(&path, &modules);
                let at = format!("{}:{line_no}: {}", s.file.display(), line.trim());
                if to.is_empty() {
                    root_items.push(at);
                    continue;
                }
                // The modules of one parent that the two paths go through.
                let common = s.module.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common == s.module.len() || common == to.len() {
                    continue; // a module and its own ancestor or descendant
                }
                let parent = to[..common].to_vec();
                edges
                    .entry(parent)
                    .or_default()
                    .entry((s.module[common].clone(), to[common].clone()))
                    .or_insert(at);
            }
        }
    }
    (edges, root_items)
}

/// A circle in `graph`, as the modules on it, if there is one.
fn circle(graph: &BTreeMap<(String, String), String>) -> Option<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in graph.keys() {
        next.entry(a).or_default().push(b);
    }
    fn visit<'a>(
        node: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| *n == node) {
            let mut c: Vec<String> = stack[at..].iter().map(|s| s.to_string()).collect();
            c.push(node.to_string());
            return Some(c);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node);
        for n in next.get(node).into_iter().flatten() {
            if let Some(c) = visit(n, next, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    for node in next.keys() {
        if let Some(c) = visit(node, &next, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The circles among the modules of one parent, each with the lines that make it.
fn circles(edges: &Edges) -> Vec<String> {
    let mut circles = Vec::new();
    for (parent, graph) in edges {
        if let Some(c) = circle(graph) {
            let seen: Vec<String> = c
                .windows(2)
                .filter_map(|w| graph.get(&(w[0].clone(), w[1].clone())).cloned())
                .collect();
            let parent = if parent.is_empty() {
                "crate".to_string()
            } else {
                format!("crate::{}", parent.join("::"))
            };
            circles.push(format!(
                "in {parent}: {}\n  {}",
                c.join(" -> "),
                seen.join("\n  ")
            ));
        }
    }
    circles
}

#[test]
fn no_import_circle_and_nothing_uses_the_crate_root() -> TestResult {
    let sources = sources(&src(), false)?;
    assert!(sources.len() > 40, "found only {} files", sources.len());
    let (edges, root_items) = edges(&sources);
    // The check reads what it should: dependencies it must see are there.
    let top = edges
        .get(&Vec::new())
        .ok_or("no dependency between components")?;
    for (from, to) in [
        ("gateway", "journal"),
        ("turns", "journal"),
        ("turns", "agent"),
    ] {
        assert!(
            top.contains_key(&(from.to_string(), to.to_string())),
            "{from} -> {to} not seen"
        );
    }
    assert!(
        root_items.is_empty(),
        "only the crate root may use the crate root's items:\n{}",
        root_items.join("\n")
    );
    let circles = circles(&edges);
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
    Ok(())
}

/// The other crates of the workspace have no import circle either (their roots re-export and
/// share helpers, so only circles are checked there).
#[test]
fn no_import_circle_in_the_other_crates() -> TestResult {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no repository folder")?;
    let mut found = Vec::new();
    for (krate, binary, at_least, must_see) in [
        ("protocol", false, 8, ("event", "message")),
        ("client-wasm", false, 20, ("browser", "codec")),
        ("bench", true, 15, ("report", "stats")),
    ] {
        let sources = sources(&repo.join(krate).join("src"), binary)?;
        assert!(
            sources.len() >= at_least,
            "{krate}: found only {} files",
            sources.len()
        );
        let (edges, _) = edges(&sources);
        let top = edges
            .get(&Vec::new())
            .ok_or_else(|| format!("{krate}: no dependency between modules"))?;
        assert!(
            top.contains_key(&(must_see.0.to_string(), must_see.1.to_string())),
            "{krate}: {} -> {} not seen",
            must_see.0,
            must_see.1
        );
        found.extend(circles(&edges).into_iter().map(|c| format!("{krate}: {c}")));
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
    Ok(())
}

/// The check sees what it must: a circle through a grouped import and `super::`, and a root
/// item.
#[test]
fn the_check_finds_circles_and_root_items() {
    let src = |module: &[&str], file: &str, code: &str| Source {
        module: module.iter().map(|s| s.to_string()).collect(),
        file: PathBuf::from(file),
        lines: code_lines(code),
    };
    let sources = vec![
        src(&[], "lib.rs", "pub fn lock() {}"),
        src(&["a"], "a.rs", "use crate::{b::X, c};\n"),
        src(&["b"], "b/mod.rs", "mod inner;\n"),
        src(
            &["b", "inner"],
            "b/inner.rs",
            "use super::super::a::Y; // crate::c\n",
        ),
        src(
            &["c"],
            "c.rs",
            "fn f() { crate::lock(); }\n#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n",
        ),
    ];
    let (edges, root_items) = edges(&sources);
    let top = &edges[&Vec::<String>::new()];
    assert!(top.contains_key(&("a".into(), "b".into())));
    assert!(top.contains_key(&("a".into(), "c".into())));
    assert!(top.contains_key(&("b".into(), "a".into())));
    assert!(
        !top.contains_key(&("c".into(), "a".into())),
        "test modules are left out"
    );
    assert!(
        !top.contains_key(&("b".into(), "c".into())),
        "comments are left out"
    );
    assert_eq!(circle(top), Some(vec!["a".into(), "b".into(), "a".into()]));
    assert_eq!(root_items.len(), 1);
    assert!(root_items[0].starts_with("c.rs:1"), "{root_items:?}");
}
