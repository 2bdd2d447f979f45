//! The output is owned by the run that writes it: files segpredict did not
//! write are never removed, one writer per shard at a time, a finished
//! run's exit code comes back on the same command, `check` gives `run`'s
//! verdict, and a start-up refused before its first row writes nothing.

use std::collections::BTreeMap;
use std::path::Path;

use crate::util::*;

fn check_file(file: &Path, args: &[&str]) -> RunResult {
    let out = std::env::temp_dir();
    run_command(
        std::process::Command::new(bin())
            .arg("check")
            .arg(file)
            .args(args),
        &out,
    )
}

/// Every file under `dir` with its bytes.
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut all = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            all.insert(file_name(&path), std::fs::read(&path).unwrap());
        }
    }
    all
}

#[test]
fn files_segpredict_did_not_write_survive_overwrite_and_the_run_is_refused() {
    let dir = tmp();
    let out = dir.path().join("spark-dataset");
    std::fs::create_dir_all(&out).unwrap();
    // Spark's and Hive's own names: a part file, `_SUCCESS`, a checksum.
    let theirs = sample_subset(dir.path(), "theirs.parquet", 20);
    std::fs::copy(&theirs, out.join("part-00000-7d4e.snappy.parquet")).unwrap();
    std::fs::write(out.join("_SUCCESS"), b"").unwrap();
    std::fs::write(out.join(".part-00000-7d4e.snappy.parquet.crc"), b"crc").unwrap();
    let before = contents(&out);
    let input = sample_subset(dir.path(), "in.parquet", 40);
    let file = Pipeline::new(&input, &out).write(&dir.path().join("p.toml"));
    let ran = run_file(&file, &["--overwrite"], &out);
    let reason = expect_one_line_error(&ran);
    assert_eq!(ran.code, 2, "{}", ran.describe());
    assert!(reason.contains("did not write"), "{reason}");
    assert_eq!(contents(&out), before, "files that were not ours changed");
    assert!(
        !out.join("_progress").exists(),
        "the refused run wrote into it"
    );
    let checked = check_file(&file, &["--overwrite"]);
    assert_eq!((checked.code, &checked.stderr), (ran.code, &ran.stderr));
}

#[test]
fn two_runs_started_at_once_give_every_id_once_and_success_after_one_rerun() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 600);
    let out = dir.path().join("out");
    let file = slowed(&input, &out).write(&dir.path().join("p.toml"));
    let runs = [spawn(&file, &[]), spawn(&file, &[])];
    let mut refused = 0;
    for run in runs {
        let ended = run.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&ended.stderr);
        match ended.status.code() {
            Some(0) => {}
            // The other held the shard (or finished first, then this is 0).
            Some(1) => {
                assert!(stderr.contains("another process"), "{stderr}");
                refused += 1;
            }
            other => panic!("exit {other:?}: {stderr}"),
        }
    }
    assert!(refused <= 1, "both runs were refused");
    // One plain rerun at most: the refused run's finds the run complete.
    if refused == 1 {
        run_file(&file, &[], &out).expect_code(0);
    }
    let ids = ids_of(&read_input(&input));
    assert_each_id_once(ids.iter().map(String::as_str), &read_output(&out), &[]);
    assert!(out.join("_SUCCESS").exists());
}

#[test]
fn a_held_shard_lock_refuses_run_and_check_with_exit_1_naming_the_holder() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 40);
    let out = dir.path().join("out");
    let file = Pipeline::new(&input, &out).write(&dir.path().join("p.toml"));
    // Another process's lock, as segpredict takes it: flock, holder inside.
    std::fs::create_dir_all(out.join("_progress")).unwrap();
    let mut held = std::fs::File::create(out.join("_progress/lock-s000of001")).unwrap();
    held.write_all(b"pid 999 on nightly-7, since 1").unwrap();
    // SAFETY: `held` is an open descriptor for the duration of the call.
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
    let checked = check_file(&file, &[]);
    let ran = run_file(&file, &[], &out);
    for result in [&checked, &ran] {
        assert_eq!(result.code, 1, "{}", result.describe());
        let reason = error_lines(&result.stderr).join("\n");
        assert!(reason.contains("pid 999 on nightly-7"), "{reason}");
    }
    assert!(
        !out.join("_run.json").exists(),
        "the refused run wrote its manifest"
    );
    drop(held);
    run_file(&file, &[], &out).expect_code(0);
}

#[test]
fn the_same_command_on_a_finished_exit_3_run_exits_3_and_check_says_so() {
    let dir = tmp();
    let input = dir.path().join("bad.parquet");
    fixture("bad-values", &sample(), &input, &["--rows", "300"]);
    let out = dir.path().join("out");
    let file = Pipeline::new(&input, &out).write(&dir.path().join("p.toml"));
    run_file(&file, &[], &out).expect_code(3);
    let before = contents(&out);
    run_file(&file, &[], &out).expect_code(3);
    assert_eq!(contents(&out), before, "a finished run was touched");
    check_file(&file, &[]).expect_code(3);
    // With the fraction allowed, the same finished run is a success.
    run_file(&file, &["--max-reject-fraction", "0.5"], &out).expect_code(0);
    check_file(&file, &["--max-reject-fraction", "0.5"]).expect_code(0);
}

#[test]
fn run_and_check_give_the_same_verdict_on_the_same_directories() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 40);
    let other_input = sample_subset(dir.path(), "other.parquet", 30);
    let finished = dir.path().join("finished");
    run_file(
        &Pipeline::new(&input, &finished).write(&dir.path().join("f.toml")),
        &[],
        &finished,
    )
    .expect_code(0);
    let foreign = dir.path().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), b"mine").unwrap();
    let cases: [(&str, &Path, &Path, i32); 4] = [
        ("a finished run", &input, &finished, 0),
        ("another run's output", &other_input, &finished, 2),
        ("a directory with other files", &input, &foreign, 2),
        ("a new directory", &input, &dir.path().join("new"), 0),
    ];
    for (what, input, out, code) in cases {
        let file = Pipeline::new(input, out).write(&dir.path().join("case.toml"));
        let checked = check_file(&file, &[]);
        let before = out.exists().then(|| contents(out));
        let ran = run_file(&file, &[], out);
        assert_eq!(
            checked.code,
            code,
            "check on {what}: {}",
            checked.describe()
        );
        assert_eq!(ran.code, code, "run on {what}: {}", ran.describe());
        if code != 0 {
            assert_eq!(checked.stderr, ran.stderr, "{what}");
            assert_eq!(out.exists().then(|| contents(out)), before, "{what}");
        }
    }
}

#[test]
fn a_device_that_cannot_work_leaves_no_run_behind() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 20);
    let out = dir.path().join("out");
    let pipeline = Pipeline::new(&input, &out);
    let ran = pipeline.run(&["--device", "tpu"]);
    assert_eq!(ran.code, 2, "{}", ran.describe());
    assert!(
        !out.exists() || list_dir(&out).is_empty(),
        "{:?}",
        list_dir(&out)
    );
    pipeline.run(&[]).expect_code(0);
}

/// Two files of the same size whose ids differ: the sample's first `rows`
/// rows, uncompressed and without dictionaries, once as they are and once
/// with every id reversed (same lengths, so the same bytes counted).
fn same_size_pair(dir: &Path, rows: usize) -> (std::path::PathBuf, std::path::PathBuf) {
    let (a, b) = (dir.join("a.parquet"), dir.join("b.parquet"));
    const SCRIPT: &str = r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
src, rows, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
t = pq.read_table(src).slice(0, rows)
opts = dict(compression="none", use_dictionary=False)
pq.write_table(t, a, **opts)
ids = pa.array([s[::-1] for s in t.column("id").to_pylist()])
pq.write_table(t.set_column(t.schema.get_field_index("id"), "id", ids), b, **opts)
"#;
    let made = std::process::Command::new(python())
        .args(["-c", SCRIPT])
        .arg(sample())
        .arg(rows.to_string())
        .args([&a, &b])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    (a, b)
}

#[test]
fn an_input_swapped_for_one_of_equal_size_and_kept_mtime_is_refused_naming_it() {
    let dir = tmp();
    let inputs = dir.path().join("in");
    std::fs::create_dir_all(&inputs).unwrap();
    let (a, b) = same_size_pair(&inputs, 60);
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    assert_eq!(size(&a), size(&b), "the pair must be the same size");
    let out = dir.path().join("out");
    let file = Pipeline::new(&a, &out).write(&dir.path().join("p.toml"));
    run_file(&file, &[], &out).expect_code(0);
    // What `cp -p` or `rsync -a` does: other bytes, the same size and mtime.
    let mtime = std::fs::metadata(&a).unwrap().modified().unwrap();
    std::fs::copy(&b, &a).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&a)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert_eq!(std::fs::metadata(&a).unwrap().modified().unwrap(), mtime);
    let rerun = run_file(&file, &[], &out);
    let reason = expect_one_line_error(&rerun);
    assert!(
        reason.contains("a.parquet changed") && reason.contains("footer"),
        "{reason}"
    );
    let checked = check_file(&file, &[]);
    assert_eq!((checked.code, &checked.stderr), (rerun.code, &rerun.stderr));
}
