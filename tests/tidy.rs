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

/// The crate graph ARCHITECTURE.md draws: which of our crates each may
/// depend on. The compiler holds every `use` to it; this holds the
/// manifests to the drawing.
const LAYERS: [(&str, &[&str]); 8] = [
    ("segpredict-core", &[]),
    ("segpredict-storage", &["segpredict-core"]),
    ("segpredict-bucketing", &["segpredict-core"]),
    (
        "segpredict-reader",
        &["segpredict-core", "segpredict-storage"],
    ),
    ("segpredict-worker", &["segpredict-core"]),
    ("segpredict-report", &["segpredict-core"]),
    (
        "segpredict-store",
        &["segpredict-core", "segpredict-storage"],
    ),
    (
        "segpredict-checkpoint",
        &["segpredict-core", "segpredict-report", "segpredict-store"],
    ),
];

#[test]
fn the_crate_graph_is_the_architectures() {
    let mut offences = Vec::new();
    let mut seen = Vec::new();
    for dir in crate_dirs() {
        let manifest = dir.join("Cargo.toml");
        let table: toml::Table = std::fs::read_to_string(&manifest).unwrap().parse().unwrap();
        let name = table["package"]["name"].as_str().unwrap().to_string();
        let Some((_, allowed)) = LAYERS.iter().find(|(n, _)| *n == name) else {
            offences.push(format!("{name}: not in ARCHITECTURE.md's crate graph"));
            continue;
        };
        for dep in dependencies(&manifest) {
            let ours = dep.starts_with("segpredict");
            if ours && !allowed.contains(&dep.as_str()) {
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
        if dep == "tch" || dep == "torch-sys" {
            offences.push(format!(
                "segpredict links libtorch ({dep}); only segpredict-worker may"
            ));
        }
    }
    assert_eq!(seen.len(), LAYERS.len(), "crates: {seen:?}");
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
    assert_eq!(crate_dirs().len(), LAYERS.len());
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
