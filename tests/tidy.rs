//! Tidy: the architecture's rules, checked on the source text (as
//! rust-analyzer's tidy test does), so a change that breaks one fails here.

use std::path::{Path, PathBuf};

/// Longest function body allowed in the sources, in lines.
const MAX_FN_LINES: usize = 60;
/// `pipeline.rs` only wires the stages.
const MAX_PIPELINE_LINES: usize = 250;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn src() -> PathBuf {
    root().join("src")
}

/// Every Rust source of the workspace: the binary crate's `src/` and each
/// crate's `crates/*/src/`, whole files (unit tests included).
fn workspace_sources() -> Vec<PathBuf> {
    let mut files = rust_files(&src());
    for krate in crate_dirs() {
        files.extend(rust_files(&krate.join("src")));
    }
    files
}

fn crate_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .expect("reading crates/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("reading a source folder") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The names in a manifest's `[dependencies]` table (not dev- or build-).
fn dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let table: toml::Table = text.parse().unwrap();
    let deps = table.get("dependencies").and_then(|d| d.as_table());
    let mut names: Vec<String> = deps
        .map(|d| d.keys().cloned().collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// ARCHITECTURE.md's crate drawing: the code block under "## The crate
/// graph", as rows of characters.
fn architecture_drawing() -> Vec<Vec<char>> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let section = text
        .split_once("## The crate graph")
        .expect("ARCHITECTURE.md has a crate graph section")
        .1;
    let block = section
        .split("```")
        .nth(1)
        .expect("a drawing in a code block");
    block.lines().map(|l| l.chars().collect()).collect()
}

/// Where each crate's name is written in the drawing: `(row, first
/// column, name)`, a name being `segpredict` followed by `[a-z-]`.
fn drawn_names(rows: &[Vec<char>]) -> Vec<(usize, usize, String)> {
    let mut names = Vec::new();
    for (r, row) in rows.iter().enumerate() {
        let line: String = row.iter().collect();
        let mut from = 0;
        while let Some(at) = line[from..].find("segpredict") {
            let start = from + at;
            let name: String = line[start..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect();
            let column = line[..start].chars().count();
            from = start + name.len();
            names.push((r, column, name));
        }
    }
    names
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Going {
    Down,
    Left,
    Right,
}

/// Where a line entering `c` going `d` goes on: `│` and `─` run straight
/// (one drawn across the other is a crossing, not a join), corners turn,
/// `┬` and `┴` branch. A line goes only down or sideways: a crate depends
/// on the crates its lines reach below it.
fn onward(c: char, d: Going) -> Vec<Going> {
    use Going::*;
    match (c, d) {
        ('│' | '─', d) => vec![d],
        ('┐', Right) | ('┌', Left) => vec![Down],
        ('└', Down) => vec![Right],
        ('┘', Down) => vec![Left],
        ('┬', Left | Right) => vec![d, Down],
        ('┴', Down) => vec![Left, Right],
        ('┴', Left | Right) => vec![d],
        _ => vec![],
    }
}

/// The crates the lines leaving the name at `(row, column)` reach: each
/// starts below the name (past the text under it) at a line from above.
fn reached(
    rows: &[Vec<char>],
    names: &[(usize, usize, String)],
    at: (usize, usize, &str),
) -> Vec<String> {
    let cell = |r: usize, c: usize| rows.get(r).and_then(|row| row.get(c)).copied();
    let name_at = |r: usize, c: usize| {
        names
            .iter()
            .find(|(nr, nc, n)| *nr == r && (*nc..nc + n.chars().count()).contains(&c))
            .map(|(_, _, n)| n.clone())
    };
    let (row, column, name) = at;
    let mut todo = Vec::new();
    // Below the name, past its description (text or blanks), the first
    // piece of line in each of its columns: one that comes from above
    // starts a line of the name's.
    for c in column..column + name.chars().count() {
        for r in row + 1..rows.len() {
            let ch = cell(r, c).unwrap_or(' ');
            if name_at(r, c).is_some() {
                break;
            }
            if "│┴└┘─┌┐┬".contains(ch) {
                if "│┴└┘".contains(ch) {
                    todo.push((r, c, Going::Down));
                }
                break;
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    while let Some((r, c, d)) = todo.pop() {
        if !seen.insert((r, c, d)) {
            continue;
        }
        let Some(ch) = cell(r, c) else { continue };
        if d == Going::Down && ch != ' ' && !"│┴└┘─┌┐┬".contains(ch) {
            found.extend(name_at(r, c));
            continue;
        }
        for next in onward(ch, d) {
            match next {
                Going::Down => todo.push((r + 1, c, next)),
                Going::Left if c > 0 => todo.push((r, c - 1, next)),
                Going::Right => todo.push((r, c + 1, next)),
                Going::Left => {}
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// The crate graph ARCHITECTURE.md draws, read from the drawing itself:
/// each crate and every crate it may depend on (those its lines reach,
/// directly or through the crates they reach).
fn drawn_graph() -> std::collections::BTreeMap<String, Vec<String>> {
    let rows = architecture_drawing();
    let names = drawn_names(&rows);
    let direct: std::collections::BTreeMap<String, Vec<String>> = names
        .iter()
        .map(|(r, c, n)| (n.clone(), reached(&rows, &names, (*r, *c, n))))
        .collect();
    let mut graph = std::collections::BTreeMap::new();
    for name in direct.keys() {
        let (mut all, mut todo) = (Vec::new(), direct[name].clone());
        while let Some(next) = todo.pop() {
            if !all.contains(&next) {
                todo.extend(direct.get(&next).cloned().unwrap_or_default());
                all.push(next);
            }
        }
        all.sort();
        graph.insert(name.clone(), all);
    }
    graph
}

#[test]
fn the_crate_graph_is_the_architectures() {
    let graph = drawn_graph();
    let mut offences = Vec::new();
    let mut seen = Vec::new();
    for dir in crate_dirs() {
        let manifest = dir.join("Cargo.toml");
        let table: toml::Table = std::fs::read_to_string(&manifest).unwrap().parse().unwrap();
        let name = table["package"]["name"].as_str().unwrap().to_string();
        let Some(allowed) = graph.get(&name) else {
            offences.push(format!("{name}: not in ARCHITECTURE.md's crate graph"));
            continue;
        };
        for dep in dependencies(&manifest) {
            let ours = dep.starts_with("segpredict");
            if ours && !allowed.contains(&dep) {
                offences.push(format!("{name} depends on {dep}"));
            }
            let libtorch = dep == "tch" || dep == "torch-sys";
            if libtorch && name != "segpredict-worker" {
                offences.push(format!(
                    "{name} links libtorch ({dep}); only segpredict-worker may"
                ));
            }
        }
        seen.push(name);
    }
    for dep in dependencies(&root().join("Cargo.toml")) {
        if dep.starts_with("segpredict") && !graph["segpredict"].contains(&dep) {
            offences.push(format!("segpredict depends on {dep}"));
        }
        if dep == "tch" || dep == "torch-sys" {
            offences.push(format!(
                "segpredict links libtorch ({dep}); only segpredict-worker may"
            ));
        }
    }
    // Every crate drawn is a crate, and the binary sits on top of them all.
    assert_eq!(
        seen.len() + 1,
        graph.len(),
        "crates: {seen:?}, drawn: {graph:?}"
    );
    assert_eq!(graph["segpredict"].len(), seen.len(), "{graph:?}");
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

fn head(path: &str) -> String {
    path.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()
        .unwrap_or("")
        .to_string()
}

/// `(name, first line, length)` of every `fn` with a body: from its
/// signature to the closing brace at the signature's indentation.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let Some(after) = fn_keyword(trimmed) else {
            continue;
        };
        if is_declaration(&lines[i..]) {
            continue;
        }
        if line.trim_end().ends_with('}') {
            found.push((head(after), i + 1, 1));
            continue;
        }
        let indent = &line[..line.len() - trimmed.len()];
        let closing = format!("{indent}}}");
        // A function whose end is not found counts as running to the end
        // of the file, so an odd layout fails the check instead of
        // escaping it.
        let len = lines[i..]
            .iter()
            .position(|l| *l == closing)
            .map_or(lines.len() - i, |n| n + 1);
        found.push((head(after), i + 1, len));
    }
    found
}

/// The text after `fn ` when the line starts a function definition.
fn fn_keyword(line: &str) -> Option<&str> {
    let mut rest = line;
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
        "extern \"C\" ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    rest.strip_prefix("fn ")
}

/// A declaration without a body (in `extern` blocks or traits): its
/// signature, on one line or several, ends with `;` before a body opens.
fn is_declaration(from_signature: &[&str]) -> bool {
    from_signature
        .iter()
        .map(|l| l.split("//").next().unwrap_or("").trim_end())
        .find(|l| l.ends_with(['{', '}', ';']))
        .is_some_and(|l| l.ends_with(';'))
}

#[test]
fn no_function_in_src_is_over_60_lines() {
    let mut long = Vec::new();
    for file in workspace_sources() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (name, line, len) in functions(&text) {
            if len > MAX_FN_LINES {
                long.push(format!(
                    "{}:{line}: fn {name} is {len} lines",
                    file.display()
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn pipeline_only_wires() {
    let text = std::fs::read_to_string(src().join("pipeline.rs")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines < MAX_PIPELINE_LINES,
        "pipeline.rs has {lines} lines; assembly belongs to the stages"
    );
}

/// Lines of the workspace's sources (whole files, unit tests included)
/// for which `offends` holds.
fn offending_lines(offends: impl Fn(&Path, &str) -> bool) -> Vec<String> {
    let mut offences = Vec::new();
    for file in workspace_sources() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if offends(&file, code) {
                offences.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    offences
}

#[test]
fn every_channel_is_bounded() {
    let offences = offending_lines(|_, code| opens_an_unbounded_channel(code));
    assert!(
        offences.is_empty(),
        "channels are bounded, so host memory does not grow with the input:\n{}",
        offences.join("\n")
    );
}

#[test]
fn no_string_errors_in_src() {
    let offences = offending_lines(|_, code| {
        let string_result = code.contains("Result<") && code.contains(", String>");
        // An error variant filled with another error's text drops that
        // error: keep it as a `#[source]` instead.
        let stringified = code.contains("map_err(|e| ") && code.contains("e.to_string()");
        string_result || stringified
    });
    assert!(
        offences.is_empty(),
        "errors are typed (thiserror), not strings:\n{}",
        offences.join("\n")
    );
}

/// crossbeam's `unbounded`, std's `mpsc::channel` (unbounded; its bounded
/// one is `sync_channel`), tokio's `unbounded_channel`.
fn opens_an_unbounded_channel(code: &str) -> bool {
    code.contains("unbounded") || code.contains("mpsc::channel") || code.contains("mpsc::{channel")
}

/// `tch::` or `torch_sys` as a path, not the end of a longer name.
fn names_libtorch(code: &str) -> bool {
    ["tch::", "torch_sys"].iter().any(|needle| {
        code.match_indices(needle).any(|(at, _)| {
            let before = code[..at].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    })
}

#[test]
fn only_the_worker_touches_libtorch() {
    let worker = root().join("crates/worker");
    let offences = offending_lines(|file, code| !file.starts_with(&worker) && names_libtorch(code));
    assert!(
        offences.is_empty(),
        "the model worker owns the model and the device:\n{}",
        offences.join("\n")
    );
}

/// The one file allowed to change the environment: it does so before the
/// process starts any thread (`prepare_process`).
const ENVIRONMENT_OWNER: &str = "crates/worker/src/process.rs";

/// A call that changes the process's environment: std's `set_var` or
/// `remove_var`, or libc's `setenv`, `unsetenv` or `putenv`.
fn changes_the_environment(code: &str) -> bool {
    ["set_var(", "remove_var(", "setenv(", "putenv("]
        .iter()
        .any(|call| code.contains(call))
}

#[test]
fn the_environment_is_changed_only_before_any_thread() {
    let owner = root().join(ENVIRONMENT_OWNER);
    let offences = offending_lines(|file, code| file != owner && changes_the_environment(code));
    assert!(
        offences.is_empty(),
        "C and C++ code reads the environment without a lock: change it only in \
         {ENVIRONMENT_OWNER}, before any thread starts:\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_check() {
    // Guards against a tidy test that passes because it reads nothing.
    let text =
        "pub fn a() {\n    one();\n}\nfn decl();\n    fn b(\n        x: u8,\n    ) {\n    }\n\
                fn multi_line_decl(\n    x: u8,\n) -> u8;\nasync fn c() {\n    two();\n}\n  fn unclosed() {\n";
    let found: Vec<_> = functions(text)
        .into_iter()
        .map(|(n, _, len)| (n, len))
        .collect();
    let expected = [("a", 3), ("b", 4), ("c", 3), ("unclosed", 1)];
    let expected: Vec<(String, usize)> =
        expected.iter().map(|(n, l)| (n.to_string(), *l)).collect();
    assert_eq!(found, expected);
    assert!(workspace_sources().len() > 40);
    assert!(workspace_sources()
        .iter()
        .any(|f| f.ends_with("crates/bucketing/src/lib.rs")));
    // The drawing read as the architecture means it.
    let graph = drawn_graph();
    assert_eq!(graph.len(), crate_dirs().len() + 1, "{graph:?}");
    let may = |a: &str, b: &str| graph[a].iter().any(|n| n == b);
    assert!(
        may("segpredict-checkpoint", "segpredict-report"),
        "{graph:?}"
    );
    assert!(may("segpredict-reader", "segpredict-storage"), "{graph:?}");
    assert!(may("segpredict-worker", "segpredict-core"), "{graph:?}");
    assert!(!may("segpredict-worker", "segpredict-storage"), "{graph:?}");
    assert!(
        !may("segpredict-bucketing", "segpredict-reader"),
        "{graph:?}"
    );
    assert!(graph["segpredict-core"].is_empty(), "{graph:?}");
    assert!(names_libtorch("use tch::Device;") && names_libtorch("(tch::Kind::Float)"));
    assert!(!names_libtorch("arrow::record_batch::RecordBatch"));
    for unbounded in [
        "let (tx, rx) = crossbeam_channel::unbounded();",
        "let (tx, rx) = std::sync::mpsc::channel();",
        "use std::sync::mpsc::{channel, Sender};",
        "let (tx, rx) = tokio::sync::mpsc::unbounded_channel();",
    ] {
        assert!(opens_an_unbounded_channel(unbounded), "{unbounded}");
    }
    assert!(!opens_an_unbounded_channel("let (tx, rx) = bounded(4);"));
    for changes in [
        "std::env::set_var(\"A\", \"1\");",
        "    env::remove_var(VAR),",
        "unsafe { libc::setenv(name, value, 1) };",
        "libc::unsetenv(name);",
    ] {
        assert!(changes_the_environment(changes), "{changes}");
    }
    assert!(!changes_the_environment("let v = std::env::var_os(VAR);"));
    let owner = root().join(ENVIRONMENT_OWNER);
    let owned = std::fs::read_to_string(&owner).expect("the environment's owner exists");
    assert!(
        owned.lines().any(changes_the_environment),
        "{ENVIRONMENT_OWNER} changes no variable: the check reads the wrong file"
    );
}

/// The module path of a source file under `src`: `lib.rs` is `[]`,
/// `a.rs` and `a/mod.rs` are `[a]`, `a/b.rs` is `[a, b]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        path.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        path.pop();
    }
    path
}

/// The module paths a line names through `crate::` or `super::` (as many
/// `super::` as written; `use super::{a::X, b}` names `super::a` and
/// `super::b`), resolved against `module`, the line's module (inline
/// `mod` blocks included).
fn named_modules(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (at, _) in code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
    {
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if at >= 7 && code[..at].ends_with("super::") {
            continue; // counted from the first `super::`
        }
        let mut base: Vec<String> = Vec::new();
        let mut rest = &code[at..];
        if let Some(r) = rest.strip_prefix("crate::") {
            rest = r;
        } else {
            base = module.to_vec();
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
        }
        let path = segments(rest);
        let head = [base.clone(), path.clone()].concat();
        found.push(head.clone());
        // A group: `{a::X, b}` right after the path.
        let after: String = rest
            .split('{')
            .nth(1)
            .map(|g| g.split('}').next().unwrap_or("").to_string())
            .unwrap_or_default();
        let grouped = rest
            .trim_start_matches(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
            .starts_with('{');
        if grouped {
            for item in after.split(',') {
                found.push([head.clone(), segments(item.trim())].concat());
            }
        }
    }
    found
}

/// The leading lower-case segments of a path: `a::b::X` is `[a, b]`.
fn segments(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for piece in text.split("::") {
        let word: String = piece
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !word.starts_with(|c: char| c.is_ascii_lowercase()) {
            break;
        }
        let whole = word.len() == piece.len();
        out.push(word);
        if !whole {
            break;
        }
    }
    out
}

/// The code of `text` without comments, a `use` spread over lines joined
/// into one.
fn statements(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open_use = false;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        if open_use {
            out.last_mut().unwrap().push_str(code.trim());
        } else {
            out.push(code.to_string());
            let t = code.trim_start();
            open_use = t.starts_with("use ") || t.contains(" use ");
        }
        open_use = open_use && !code.contains(';');
    }
    out
}

/// Which source files of the crate at `src` each file names (`crate::`
/// and `super::` paths, resolved to the longest module with a file).
fn file_imports(src: &Path) -> Vec<(PathBuf, Vec<PathBuf>)> {
    let files = rust_files(src);
    let modules: Vec<(Vec<String>, PathBuf)> = files
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    let file_of = |path: &[String]| {
        (0..=path.len())
            .rev()
            .find_map(|n| modules.iter().find(|(m, _)| m.as_slice() == &path[..n]))
            .map(|(_, f)| f.clone())
    };
    let mut imports = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut module = module_of(src, file);
        let mut inline: Vec<(usize, i64)> = Vec::new(); // (module depth, brace depth at its opening)
        let mut depth = 0i64;
        let mut named = Vec::new();
        for code in statements(&text) {
            let code = code.as_str();
            for path in named_modules(code, &module) {
                named.extend(file_of(&path).filter(|f| f != file));
            }
            let words: Vec<&str> = code.split_whitespace().collect();
            if let Some(i) = words.iter().position(|w| *w == "mod") {
                if words.get(i + 2) == Some(&"{") {
                    module.push(words[i + 1].to_string());
                    inline.push((module.len(), depth));
                }
            }
            depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
            while inline.last().is_some_and(|(_, opened)| depth <= *opened) {
                inline.pop();
                module.pop();
            }
        }
        named.sort();
        named.dedup();
        imports.push((file.clone(), named));
    }
    imports
}

/// Pairs of files of `crates/NAME/src` that name each other.
fn import_cycles(krate: &str) -> Vec<(String, String)> {
    let src = root().join("crates").join(krate).join("src");
    let imports = file_imports(&src);
    let name = |f: &Path| f.strip_prefix(root()).unwrap().display().to_string();
    let mut cycles = Vec::new();
    for (a, named) in &imports {
        for b in named {
            let back = imports.iter().any(|(f, n)| f == b && n.contains(a));
            if back && a < b {
                cycles.push((name(a), name(b)));
            }
        }
    }
    cycles
}

/// Import cycles still allowed: none.
const KNOWN_CYCLES: [(&str, &str); 0] = [];

#[test]
fn no_two_files_of_reader_or_core_import_each_other() {
    let mut cycles = Vec::new();
    for krate in ["reader", "core"] {
        cycles.extend(import_cycles(krate));
    }
    let (known, new): (Vec<_>, Vec<_>) = cycles
        .into_iter()
        .partition(|(a, b)| KNOWN_CYCLES.contains(&(a.as_str(), b.as_str())));
    if !known.is_empty() {
        eprintln!("known import cycle(s), to be broken: {known:?}");
    }
    assert!(
        new.is_empty(),
        "files that import each other (one of them should not need the other):\n{new:?}"
    );
}

#[test]
fn the_import_check_sees_imports() {
    let module = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let named = named_modules(
        "use super::{error::ImageError, sniff};",
        &module(&["image", "fit"]),
    );
    assert!(named.contains(&module(&["image", "error"])), "{named:?}");
    assert!(named.contains(&module(&["image", "sniff"])), "{named:?}");
    let named = named_modules(
        "    let x = crate::panics::catch(|| 1);",
        &module(&["image"]),
    );
    assert_eq!(named, [module(&["panics", "catch"])]);
    let named = named_modules("use super::super::plan::Plan;", &module(&["a", "b"]));
    assert_eq!(named, [module(&["plan"])]);
    let joined = statements("use crate::{\n    a::X, // x\n    b,\n};\nfn f() {}");
    assert_eq!(joined, ["use crate::{a::X,b,};", "fn f() {}"]);
    // core's message.rs and stats.rs were a cycle: read from the files.
    let core = file_imports(&root().join("crates/core/src"));
    let stats = core.iter().find(|(f, _)| f.ends_with("stats.rs")).unwrap();
    assert!(stats.1.iter().any(|f| f.ends_with("record.rs")), "{core:?}");
    let message = core
        .iter()
        .find(|(f, _)| f.ends_with("message.rs"))
        .unwrap();
    assert!(
        message.1.iter().any(|f| f.ends_with("stats.rs")),
        "{core:?}"
    );
}
