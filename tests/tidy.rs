//! Tidy: the architecture's rules, checked on the source text (as
//! rust-analyzer's tidy test does), so a change that breaks one fails here.

use std::path::{Path, PathBuf};

/// The stages; each may use `message` (and `cpu`), never another stage.
const STAGES: [&str; 5] = ["reader", "bucketing", "worker", "writer", "report"];
/// Longest function body allowed in `src/`, in lines.
const MAX_FN_LINES: usize = 60;
/// `pipeline.rs` only wires the stages.
const MAX_PIPELINE_LINES: usize = 250;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("reading src") {
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

/// The stage a file belongs to: `src/<stage>.rs` or `src/<stage>/...`.
fn stage_of(path: &Path) -> Option<&'static str> {
    let relative = path.strip_prefix(src()).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    STAGES.iter().copied().find(|s| *s == name)
}

/// Module names a line reaches through `crate::`, grouped imports included.
fn crate_paths(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            found.extend(group[..end].split(',').map(|p| head(p.trim())));
        } else {
            found.push(head(rest));
        }
    }
    found
}

fn head(path: &str) -> String {
    path.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()
        .unwrap_or("")
        .to_string()
}

#[test]
fn no_stage_imports_another_stage() {
    let mut offences = Vec::new();
    for file in rust_files(&src()) {
        let Some(stage) = stage_of(&file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for module in crate_paths(code) {
                if module != stage && STAGES.contains(&module.as_str()) {
                    offences.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        offences.is_empty(),
        "stages may share only `message` types:\n{}",
        offences.join("\n")
    );
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
        if let Some(len) = lines[i..].iter().position(|l| *l == closing) {
            found.push((head(after), i + 1, len + 1));
        }
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
    for file in rust_files(&src()) {
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

/// Lines of `src/` (outside unit tests) for which `offends` holds.
fn offending_lines(offends: impl Fn(&Path, &str) -> bool) -> Vec<String> {
    let mut offences = Vec::new();
    for file in rust_files(&src()) {
        let text = std::fs::read_to_string(&file).unwrap();
        let code_before_tests = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in code_before_tests.lines().enumerate() {
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
    let offences = offending_lines(|_, code| code.contains("unbounded"));
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
    let worker = src().join("worker");
    let offences = offending_lines(|file, code| !file.starts_with(&worker) && names_libtorch(code));
    assert!(
        offences.is_empty(),
        "the model worker owns the model and the device:\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_check() {
    // Guards against a tidy test that passes because it reads nothing.
    assert_eq!(
        crate_paths("use crate::{message, worker::Worker};"),
        ["message", "worker"]
    );
    assert_eq!(crate_paths("x = crate::reader::IdKind::Str;"), ["reader"]);
    let text =
        "pub fn a() {\n    one();\n}\nfn decl();\n    fn b(\n        x: u8,\n    ) {\n    }\n\
                fn multi_line_decl(\n    x: u8,\n) -> u8;\n}\n";
    let found: Vec<_> = functions(text)
        .into_iter()
        .map(|(n, _, len)| (n, len))
        .collect();
    assert_eq!(found, [("a".to_string(), 3), ("b".to_string(), 4)]);
    assert!(rust_files(&src()).len() > 20);
    assert!(names_libtorch("use tch::Device;") && names_libtorch("(tch::Kind::Float)"));
    assert!(!names_libtorch("arrow::record_batch::RecordBatch"));
}
