//! The output directory may not overlap the input: a run whose output is
//! (or lies in) its input folder would read its own part files as input on
//! the next run, and `--overwrite` would delete input.

use std::path::{Component, Path, PathBuf};

use super::discover::{glob_root, is_glob, literal_components};
use super::ReaderError;

/// Refuses an output directory that is the input directory, lies inside
/// it, or contains the input. `input` is the `[readers] path` setting (a
/// file, a directory or a glob). For a glob, the output lies inside it when
/// the glob could match files in the output directory: `data/*.parquet`
/// with the output at `data/predictions/` is accepted (no match can lie
/// there), `data/**/*.parquet` is not. Paths are compared canonicalized
/// (symbolic links and `..` resolved); the output need not exist yet.
pub fn check_output_outside_input(input: &Path, output: &Path) -> Result<(), ReaderError> {
    let (input_text, output_text) = (input.to_string_lossy(), output.to_string_lossy());
    match (is_url(&input_text), is_url(&output_text)) {
        (false, false) => {}
        (true, true) => return check_urls(input, output),
        // One local, one in a bucket: they cannot overlap.
        _ => return Ok(()),
    }
    let output_real = resolved(output)?;
    let (root, glob_rest) = if is_glob(input) {
        let root = glob_root(input);
        let rest: Vec<String> = input
            .components()
            .skip(literal_components(input).count())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        (root, Some(rest))
    } else {
        (input.to_path_buf(), None)
    };
    let root_real = resolved(&root)?;
    let refuse = |how: &'static str| {
        Err(ReaderError::OutputOverlapsInput {
            output: output.to_path_buf(),
            input: input.to_path_buf(),
            how,
        })
    };
    if root_real == output_real {
        return refuse("is");
    }
    if root_real.starts_with(&output_real) {
        return refuse("contains");
    }
    let Ok(below) = output_real.strip_prefix(&root_real) else {
        return Ok(());
    };
    match glob_rest {
        Some(rest) if !glob_reaches(&rest, below) => Ok(()),
        _ => refuse("lies inside"),
    }
}

fn is_url(text: &str) -> bool {
    text.contains("://")
}

/// Two object-store locations: the output may not be the input's prefix,
/// lie below it (below a glob's literal part, conservatively) or hold it.
fn check_urls(input: &Path, output: &Path) -> Result<(), ReaderError> {
    let trimmed = |p: &Path| p.to_string_lossy().trim_end_matches('/').to_string();
    let (input_text, output_text) = (trimmed(input), trimmed(output));
    let root = match input_text.find(['*', '?', '[']) {
        Some(at) => input_text[..at]
            .rsplit_once('/')
            .map_or("", |(r, _)| r)
            .to_string(),
        None => input_text.clone(),
    };
    let below = |inner: &str, outer: &str| inner.starts_with(&format!("{outer}/"));
    let how = if output_text == root {
        "is"
    } else if below(&output_text, &root) {
        "lies inside"
    } else if below(&root, &output_text) {
        "contains"
    } else {
        return Ok(());
    };
    Err(ReaderError::OutputOverlapsInput {
        output: output.to_path_buf(),
        input: input.to_path_buf(),
        how,
    })
}

/// Whether the glob components `rest` (below the literal root) could match
/// a file inside the folder `below` (relative to the same root).
fn glob_reaches(rest: &[String], below: &Path) -> bool {
    let mut rest = rest.iter();
    for part in below.components() {
        let Some(pattern) = rest.next() else {
            // The output lies deeper than any match.
            return false;
        };
        if pattern == "**" {
            return true;
        }
        let name = part.as_os_str().to_string_lossy();
        match glob::Pattern::new(pattern) {
            Ok(p) if !p.matches(&name) => return false,
            // A bad pattern fails discovery with its own error; until
            // then it counts as matching.
            _ => {}
        }
    }
    // Components are left for the files inside the output.
    rest.next().is_some()
}

/// `path` made absolute and canonical: its nearest existing ancestor
/// canonicalized, the rest (not there yet) appended with `.` and `..`
/// resolved as text.
fn resolved(path: &Path) -> Result<PathBuf, ReaderError> {
    let absolute = std::path::absolute(path).map_err(|source| ReaderError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut existing = absolute.as_path();
    let mut missing = Vec::new();
    let real = loop {
        match existing.canonicalize() {
            Ok(real) => break real,
            Err(source) => {
                let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                    return Err(ReaderError::Io {
                        path: path.to_path_buf(),
                        source,
                    });
                };
                missing.push(name.to_os_string());
                existing = parent;
            }
        }
    };
    let mut out = real;
    for name in missing.iter().rev() {
        match Path::new(name).components().next() {
            Some(Component::ParentDir) => {
                out.pop();
            }
            Some(Component::CurDir) | None => {}
            _ => out.push(name),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(input: &Path, output: &Path) -> String {
        check_output_outside_input(input, output)
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn an_output_that_is_in_or_holds_the_input_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::create_dir_all(input.join("day=1")).unwrap();
        std::fs::write(input.join("a.parquet"), b"").unwrap();
        let message = refused(&input, &input);
        assert_eq!(
            message,
            format!(
                "the output directory {} is the input {}: write the output elsewhere",
                input.display(),
                input.display()
            )
        );
        // Through `..` and a trailing `.`, and not there yet.
        assert!(refused(&input, &input.join("day=1/../.")).contains(" is the input "));
        assert!(refused(&input, &input.join("out/new")).contains(" lies inside the input "));
        assert!(refused(&input, dir.path()).contains(" contains the input "));
        let file = input.join("a.parquet");
        assert!(refused(&file, &input).contains(" contains the input "));
        // Beside the input is fine; so is an output next to an input file.
        check_output_outside_input(&input, &dir.path().join("out")).unwrap();
        check_output_outside_input(&file, &input.join("out")).unwrap();
        check_output_outside_input(&input, &dir.path().join("in-out")).unwrap();
    }

    #[test]
    fn an_output_a_glob_could_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("2026-12-01")).unwrap();
        let glob = |p: &str| data.join(p);
        // The glob's literal root itself, and folders its matches can reach.
        assert!(refused(&glob("*.parquet"), &data).contains(" is the input "));
        let deep = refused(&glob("**/*.parquet"), &data.join("predictions"));
        assert!(deep.contains(" lies inside the input "), "{deep}");
        assert!(deep.contains("**/*.parquet"), "names the input: {deep}");
        assert!(
            refused(&glob("2026-*/part-*.parquet"), &data.join("2026-out"))
                .contains(" lies inside ")
        );
        assert!(refused(&glob("2026-*/*.parquet"), dir.path()).contains(" contains the input "));
        // Folders no match can lie in.
        check_output_outside_input(&glob("*.parquet"), &data.join("predictions")).unwrap();
        check_output_outside_input(&glob("2026-*/*.parquet"), &data.join("out")).unwrap();
        check_output_outside_input(&glob("2026-*/*.parquet"), &data.join("2026-12-01/out"))
            .unwrap();
    }

    #[test]
    fn a_symbolic_link_to_the_input_is_the_input() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::create_dir_all(&input).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        assert!(refused(&input, &link.join("out")).contains(" lies inside the input "));
    }

    #[test]
    fn bucket_prefixes_overlap_by_key_and_never_with_local_paths() {
        let check = |i: &str, o: &str| check_output_outside_input(Path::new(i), Path::new(o));
        let how = |i: &str, o: &str| check(i, o).unwrap_err().to_string();
        assert!(how("s3://b/in/", "s3://b/in").contains(" is the input "));
        assert!(how("s3://b/in", "s3://b/in/out/").contains(" lies inside "));
        assert!(how("s3://b/in/day-*/x.parquet", "s3://b/in/out").contains(" lies inside "));
        assert!(how("s3://b/in/x", "s3://b/in").contains(" contains "));
        assert!(check("s3://b/in/", "s3://b/input-predictions/").is_ok());
        assert!(check("s3://b/in/", "s3://other/in/").is_ok());
        assert!(check("s3://b/in/", "/tmp/out").is_ok());
    }
}
