//! The docs: `README.md` and the book under `docs/` (an mdBook: `just docs`
//! builds it, and `just test` builds it before these tests run). Every
//! relative link resolves to a file of the repository, and to a heading of
//! it when it names one; no link leaves the repository; every `segpredict`
//! command quoted in them names a subcommand of the built binary and only
//! long flags that its `--help` lists, so a flag that goes stale fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{bin, repo};

/// The README's first screen: lines up to its "Where next" list.
const README_SCREEN_LINES: usize = 80;

/// One Markdown file, split into what a reader sees as prose (code spans
/// blanked) and what it sees as code (fenced blocks and code spans).
struct Doc {
    path: PathBuf,
    text: String,
    prose: String,
    code: Vec<String>,
}

impl Doc {
    fn new(path: PathBuf, text: String) -> Doc {
        let (prose, code) = split_code(&text);
        Doc {
            path,
            text,
            prose,
            code,
        }
    }

    fn name(&self) -> String {
        let root = root();
        let path = self.path.strip_prefix(&root).unwrap_or(&self.path);
        path.display().to_string()
    }
}

/// The repository's root, as the links resolve to it.
fn root() -> PathBuf {
    repo().canonicalize().expect("the repository")
}

/// README.md and every Markdown file under docs/.
fn docs() -> Vec<Doc> {
    let mut paths = vec![root().join("README.md")];
    paths.extend(markdown_under(&root().join("docs")));
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            Doc::new(path, text)
        })
        .collect()
}

fn markdown_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("reading docs/") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(markdown_under(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// Fenced blocks and code spans out of the text: the prose with each code
/// span blanked (a link's text may hold one), and the code, one item per
/// block or span (a span may cross a line break).
fn split_code(text: &str) -> (String, Vec<String>) {
    let mut prose = String::new();
    let mut code = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~");
        match (&mut block, fence) {
            (None, true) => block = Some(String::new()),
            (Some(b), true) => {
                code.push(std::mem::take(b));
                block = None;
            }
            (Some(b), false) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, false) => {
                prose.push_str(line);
                prose.push('\n');
            }
        }
    }
    let (prose, spans) = split_spans(&prose);
    code.extend(spans);
    (prose, code)
}

/// Code spans: a run of n backticks up to the next run of exactly n.
fn split_spans(text: &str) -> (String, Vec<String>) {
    let chars: Vec<char> = text.chars().collect();
    let (mut prose, mut spans, mut i) = (String::new(), Vec::new(), 0);
    while i < chars.len() {
        if chars[i] != '`' {
            prose.push(chars[i]);
            i += 1;
            continue;
        }
        let n = chars[i..].iter().take_while(|&&c| c == '`').count();
        let close = (i + n..chars.len()).find(|&j| {
            chars[j..].iter().take_while(|&&c| c == '`').count() == n
                && (j == 0 || chars[j - 1] != '`')
        });
        match close {
            Some(j) => {
                let span: String = chars[i + n..j].iter().collect();
                spans.push(span.replace('\n', " "));
                prose.push_str(" code ");
                i = j + n;
            }
            None => {
                prose.extend(&chars[i..i + n]);
                i += n;
            }
        }
    }
    (prose, spans)
}

/// Every link target in the prose: inline links and images `[..](target)`,
/// reference definitions `[..]: target`, and autolinks `<scheme:...>`.
fn link_targets(prose: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = prose;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        targets.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    for line in prose.lines() {
        let line = line.trim_start();
        if let Some((label, target)) = line.split_once("]:") {
            if label.starts_with('[') && !label.contains(' ') {
                targets.push(target.trim().to_string());
            }
        }
        for (i, _) in line.match_indices('<') {
            let tail = &line[i + 1..];
            if let Some(end) = tail.find('>') {
                if tail[..end].contains("://") || tail[..end].starts_with("mailto:") {
                    targets.push(tail[..end].to_string());
                }
            }
        }
    }
    targets
}

/// A heading's anchor as mdBook and GitHub make it: lowercase, letters,
/// digits, `-` and `_` kept, spaces to `-`, anything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings (outside fenced blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut anchors = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            anchors.insert(slug(&line.trim_start_matches('#').replace('`', "")));
        }
    }
    anchors
}

/// What is wrong with one link of `doc`, if anything.
fn link_problem(doc: &Doc, target: &str, root: &Path) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return Some("leaves the repository: tell it in the docs' own words".into());
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    if path.is_empty() {
        let found = anchors(&doc.text).contains(anchor);
        return (!found).then(|| format!("names no heading #{anchor}"));
    }
    let file = doc.path.parent().expect("a doc's folder").join(path);
    let Ok(file) = file.canonicalize() else {
        return Some("names no file".into());
    };
    if !file.starts_with(root) {
        return Some("leaves the repository".into());
    }
    let book = root.join("docs/src");
    if doc.path.starts_with(&book) && !file.starts_with(&book) {
        return Some(
            "leaves the book (the built book has only docs/src/; name the file in code)".into(),
        );
    }
    let markdown = file.extension().is_some_and(|e| e == "md");
    if anchor.is_empty() || !markdown {
        return None;
    }
    let text = std::fs::read_to_string(&file).ok()?;
    (!anchors(&text).contains(anchor)).then(|| format!("names no heading #{anchor}"))
}

fn link_problems(doc: &Doc, root: &Path) -> Vec<String> {
    let mut problems: Vec<String> = link_targets(&doc.prose)
        .iter()
        .filter_map(|t| {
            link_problem(doc, t, root).map(|why| format!("{}: link {t}: {why}", doc.name()))
        })
        .collect();
    for include in includes(&doc.text) {
        let file = doc.path.parent().expect("a doc's folder").join(&include);
        if !file.is_file() {
            problems.push(format!("{}: include {include}: names no file", doc.name()));
        }
    }
    if doc.text.contains("../shared/") {
        problems.push(format!(
            "{}: names ../shared/, which is not in the repository",
            doc.name()
        ));
    }
    problems
}

/// mdBook's `{{#include PATH}}` (and `#rustdoc_include`), anchors dropped.
fn includes(text: &str) -> Vec<String> {
    text.match_indices("{{#")
        .filter_map(|(i, _)| {
            let body = &text[i + 3..i + 3 + text[i + 3..].find("}}")?];
            let (directive, path) = body.split_once(' ')?;
            directive
                .ends_with("include")
                .then(|| path.trim().split(':').next().unwrap_or("").to_string())
        })
        .collect()
}

#[test]
fn docs_links_resolve_inside_the_repository() {
    let root = root();
    let docs = docs();
    let problems: Vec<String> = docs.iter().flat_map(|d| link_problems(d, &root)).collect();
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
    // Every chapter is in the book's table of contents (mdBook builds only those).
    let summary = docs
        .iter()
        .find(|d| d.path.ends_with("docs/src/SUMMARY.md"))
        .expect("docs/src/SUMMARY.md");
    let listed: BTreeSet<String> = link_targets(&summary.prose).into_iter().collect();
    for doc in docs
        .iter()
        .filter(|d| d.path.starts_with(root.join("docs/src")))
    {
        let name = doc.path.file_name().unwrap().to_string_lossy().to_string();
        let nested = doc
            .path
            .strip_prefix(root.join("docs/src"))
            .unwrap()
            .to_string_lossy()
            .to_string();
        assert!(
            name == "SUMMARY.md" || listed.contains(&nested),
            "{nested} is not in docs/src/SUMMARY.md"
        );
    }
}

/// A subcommand's long flags as its `--help` lists them (`""`: the top level).
fn help_flags(subcommand: &str) -> BTreeSet<String> {
    let mut command = Command::new(bin());
    if !subcommand.is_empty() {
        command.arg(subcommand);
    }
    let output = command
        .arg("--help")
        .output()
        .expect("running segpredict --help");
    assert!(
        output.status.success(),
        "segpredict {subcommand} --help failed"
    );
    long_flags(&String::from_utf8_lossy(&output.stdout))
}

fn long_flags(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|t| t.starts_with("--") && t.len() > 2)
        .map(str::to_string)
        .collect()
}

/// The subcommands `segpredict --help` lists, each with its flags; `""` is
/// the top level (`--help`, `--version`, the global flags).
fn cli() -> BTreeMap<String, BTreeSet<String>> {
    let output = Command::new(bin())
        .arg("--help")
        .output()
        .expect("running segpredict --help");
    let help = String::from_utf8_lossy(&output.stdout).to_string();
    let commands = help
        .split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("Options:").next())
        .expect("segpredict --help lists its commands");
    let mut cli: BTreeMap<String, BTreeSet<String>> = commands
        .lines()
        // "  name  about"; a wrapped about is indented further.
        .filter(|l| {
            l.strip_prefix("  ")
                .is_some_and(|rest| !rest.starts_with(' '))
        })
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(|name| (name.to_string(), help_flags(name)))
        .collect();
    cli.insert(String::new(), long_flags(&help));
    cli
}

/// Every `segpredict SUBCOMMAND ... --flag` in a piece of code: the
/// subcommand (`""` for flags straight after `segpredict`) and its flags. A
/// command runs to the end of its line (`\` continues it), a comment, or a
/// pipe, redirection or `;` outside brackets (a synopsis's `[a | b]`).
fn quoted_commands(code: &str) -> Vec<(String, Vec<String>)> {
    let joined = code.replace("\\\n", " ");
    let mut commands = Vec::new();
    for line in joined.lines() {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        for (i, token) in tokens.iter().enumerate() {
            if *token != "segpredict" && !token.ends_with("/segpredict") {
                continue;
            }
            let Some(next) = tokens.get(i + 1) else {
                continue;
            };
            let sub = if next.starts_with("--") { "" } else { next };
            if !sub.is_empty() && !sub.chars().all(|c| c.is_ascii_lowercase()) {
                continue; // a placeholder (COMMAND), a path, an image name
            }
            commands.push((sub.to_string(), flags_of(&tokens[i + 1..])));
        }
    }
    commands
}

fn flags_of(tokens: &[&str]) -> Vec<String> {
    let (mut flags, mut depth) = (Vec::new(), 0i32);
    for token in tokens {
        if token.starts_with('#')
            || (depth == 0 && ["|", ">", ">>", ";", "&&", "||", "2>"].contains(token))
        {
            break;
        }
        depth += token.matches('[').count() as i32 - token.matches(']').count() as i32;
        let bare = token.trim_start_matches(['[', '(', '"', '\'']);
        if bare.starts_with("--") && bare.len() > 2 {
            let flag: String = bare
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            flags.push(flag);
        }
    }
    flags
}

/// What is wrong with the commands quoted in `code`, against `cli`.
fn command_problems(
    name: &str,
    code: &str,
    cli: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (sub, flags) in quoted_commands(code) {
        let Some(known) = cli.get(&sub) else {
            problems.push(format!("{name}: `segpredict {sub}`: no such subcommand"));
            continue;
        };
        for flag in flags.iter().filter(|f| !known.contains(*f)) {
            problems.push(format!(
                "{name}: `segpredict {sub} {flag}`: `segpredict {sub} --help` has no {flag}"
            ));
        }
    }
    problems
}

#[test]
fn docs_commands_take_the_flags_they_quote() {
    let cli = cli();
    assert!(
        cli.contains_key("run") && cli["run"].contains("--max-segments"),
        "{cli:?}"
    );
    let docs = docs();
    let quoted: usize = docs
        .iter()
        .flat_map(|d| &d.code)
        .map(|c| quoted_commands(c).len())
        .sum();
    assert!(
        quoted >= 20,
        "only {quoted} segpredict commands found in the docs: the parser broke"
    );
    let problems: Vec<String> = docs
        .iter()
        .flat_map(|d| {
            d.code
                .iter()
                .flat_map(|c| command_problems(&d.name(), c, &cli))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        problems.is_empty(),
        "stale commands in the docs:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_docs_checks_catch_a_stale_flag_a_broken_link_and_a_link_out() {
    let mut cli = BTreeMap::new();
    cli.insert(
        "run".to_string(),
        long_flags("--input <PATH> --output <DIR> --help"),
    );
    cli.insert(String::new(), long_flags("--help --version"));
    let text = "Run `segpredict run p.toml --input a\n--no-such-flag` or\n\n```sh\nsegpredict run p.toml [--output D | --gone]  # --fine\nsegpredict frobnicate\n```\n\
        See [the notes](../shared/seed.md), [a page](nothing-here.md), [out](https://example.com/) and [here](#no-heading).\n\n# A heading\n";
    let doc = Doc::new(root().join("docs/src/probe.md"), text.to_string());
    let commands: Vec<String> = doc
        .code
        .iter()
        .flat_map(|c| command_problems("probe", c, &cli))
        .collect();
    assert_eq!(commands.len(), 3, "{commands:#?}");
    for stale in ["--no-such-flag", "--gone", "frobnicate"] {
        assert!(
            commands.iter().any(|c| c.contains(stale)),
            "{stale}: {commands:#?}"
        );
    }
    let root = root();
    let links = link_problems(&doc, &root);
    assert_eq!(links.len(), 5, "{links:#?}"); // four links, and ../shared/ named
    assert!(
        links
            .iter()
            .any(|l| l.contains("https://example.com/") && l.contains("leaves")),
        "{links:#?}"
    );
    assert!(
        links
            .iter()
            .any(|l| l.contains("#no-heading") && l.contains("no heading")),
        "{links:#?}"
    );
    assert_eq!(slug("`[readers.columns]`"), "readerscolumns");
    assert_eq!(
        slug("Inspect: what is in the data"),
        "inspect-what-is-in-the-data"
    );
}

#[test]
fn the_readme_fits_one_screen() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let screen = readme
        .lines()
        .position(|l| {
            l.trim_start_matches('#')
                .trim()
                .eq_ignore_ascii_case("where next")
        })
        .expect("README.md has a \"Where next\" heading");
    assert!(
        screen <= README_SCREEN_LINES,
        "README.md has {screen} lines before \"Where next\"; one screen is {README_SCREEN_LINES}"
    );
}

/// A code span that names a test: `module::test_name` (a function of
/// `tests/module.rs`) or `file::tests::test_name` (a unit test in a
/// `file.rs` under crates/ or src/). Other paths (`std::thread::scope`,
/// `pipeline::run`) are not test names and are passed over.
fn named_test(span: &str) -> Option<(PathBuf, String)> {
    let parts: Vec<&str> = span.split("::").collect();
    let snake = |p: &&str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    if parts.len() < 2 || !parts.iter().all(snake) {
        return None;
    }
    let name = parts[parts.len() - 1].to_string();
    if let [module, _] = parts[..] {
        let file = root().join("tests").join(format!("{module}.rs"));
        return file.is_file().then_some((file, name));
    }
    let at = parts.iter().position(|p| *p == "tests")?;
    let file = parts.get(at.checked_sub(1)?)?;
    Some((PathBuf::from(format!("{file}.rs")), name))
}

/// Rust files under `dir` (target/ aside) whose file name is `name`.
fn rust_files_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for path in entries.map(|e| e.expect("a directory entry").path()) {
        if path.is_dir() && !path.ends_with("target") {
            found.extend(rust_files_named(&path, name));
        } else if path.file_name().is_some_and(|f| f == name) {
            found.push(path);
        }
    }
    found
}

/// Test names in `code` (a document's code spans) that name no function:
/// an invariant naming a renamed or deleted test proves nothing.
fn stale_test_names(code: &[String]) -> Vec<String> {
    let defines = |file: &Path, name: &str| {
        std::fs::read_to_string(file).is_ok_and(|t| t.contains(&format!("fn {name}(")))
    };
    let mut stale = Vec::new();
    for span in code {
        let Some((file, name)) = named_test(span.trim()) else {
            continue;
        };
        let found = match file.is_absolute() {
            true => defines(&file, &name),
            false => ["crates", "src"]
                .iter()
                .flat_map(|d| rust_files_named(&root().join(d), &file.to_string_lossy()))
                .any(|f| defines(&f, &name)),
        };
        if !found {
            stale.push(span.trim().to_string());
        }
    }
    stale
}

#[test]
fn every_test_the_docs_and_architecture_name_exists() {
    let mut paths = vec![root().join("ARCHITECTURE.md")];
    paths.extend(markdown_under(&root().join("benches")));
    let mut docs = docs();
    docs.extend(paths.into_iter().map(|path| {
        let text = std::fs::read_to_string(&path).unwrap();
        Doc::new(path, text)
    }));
    let mut checked = 0;
    let mut problems = Vec::new();
    for doc in &docs {
        checked += doc
            .code
            .iter()
            .filter(|s| named_test(s.trim()).is_some())
            .count();
        for name in stale_test_names(&doc.code) {
            problems.push(format!("{}: `{name}` names no test", doc.name()));
        }
    }
    assert!(
        checked >= 40,
        "only {checked} test names found: the check sees nothing"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // And it can fail: a renamed test and a unit test that is gone.
    let stale = ["resume::no_such_test", "stats::tests::no_such_test"].map(String::from);
    assert_eq!(stale_test_names(&stale), stale);
    let real = ["stats::tests::quantiles_are_within_one_percent_and_merge_exactly"];
    assert!(stale_test_names(&real.map(String::from)).is_empty());
}
