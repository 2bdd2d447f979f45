//! The nightly job survives: a run killed with SIGKILL at any moment and run
//! again finishes with the output an uninterrupted run gives, redoing only
//! what was not committed; a finished run is left alone; another run's
//! output is refused naming the difference; shards share one directory.
//!
//! Runs here are slowed (`util::slowed`: tiny batches, so thousands of
//! forward passes) and commit every 0.2 s, so that a kill lands mid-run
//! after some commits. Kill moments are random; the seed is printed and
//! `SEGPREDICT_TEST_SEED` replays it.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::util::*;

#[test]
fn runs_killed_at_random_moments_resume_to_the_uninterrupted_output() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 600);
    let started = Instant::now();
    let reference = Reference::of(&slowed(&input, &dir.path().join("reference")), &input);
    let duration = started.elapsed();

    let mut moments = Moments::seeded();
    let mut resumed_trials = 0;
    for trial in 0..6 {
        let out = dir.path().join(format!("trial-{trial}"));
        let file = slowed(&input, &out).write(&dir.path().join(format!("trial-{trial}.toml")));
        // Trial 5 waits for a committed part, so at least one trial is
        // killed after a commit whatever the random moments; trial 4 is
        // killed twice before its rerun.
        let kills = if trial == 4 { 2 } else { 1 };
        let mut committed_at_kill = 0;
        for _ in 0..kills {
            let attempts_before = attempt_markers(&out);
            let mut child = spawn(&file, &[]);
            let after = duration.mul_f64(0.1 + 0.8 * moments.next());
            if trial == 4 {
                // An attempt counts once its marker is written: on a loaded
                // machine a kill at a random moment can land before that,
                // and the trial's third attempt would be its second.
                let marked = || attempt_markers(&out) > attempts_before;
                wait_until(&mut child, Instant::now() + duration * 4, marked);
            }
            let deadline = Instant::now() + if trial == 5 { duration * 2 } else { after };
            let wait_for_commit = || trial == 5 && has_part(&out, "part-");
            let killed = kill_when(&mut child, deadline, wait_for_commit);
            committed_at_kill = committed_rows(&out);
            eprintln!(
                "trial {trial}: killed after {after:?} (running: {killed}), {committed_at_kill} rows committed"
            );
        }
        // On a loaded machine a run may finish before its kill; its rerun
        // then finds it complete and leaves it (and its report) alone. Killed
        // after its shard was done but before the commit, the rerun only
        // commits, and the report is the finished attempt's.
        let finished_before_rerun = out.join("_SUCCESS").exists();
        let shard_done = list_dir(&out.join("_progress"))
            .into_iter()
            .find(|p| file_name(p).starts_with("done-"));
        let expected_resumed = match (finished_before_rerun, &shard_done) {
            (true, _) => report_u64(&read_report(&out), "rows_resumed") as usize,
            (false, Some(marker)) => {
                let done: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(marker).unwrap()).unwrap();
                report_u64(&done, "rows_resumed") as usize
            }
            (false, None) => committed_at_kill,
        };
        let finished_before_rerun = finished_before_rerun || shard_done.is_some();
        let rerun = run_file(&file, &[], &out);
        reference.assert_complete(&rerun);
        let report = read_report(&out);
        let resumed = report_u64(&report, "rows_resumed") as usize;
        assert_eq!(
            resumed, expected_resumed,
            "trial {trial}: the rerun must skip exactly the committed rows: {report}"
        );
        if committed_at_kill > 0 && !finished_before_rerun {
            resumed_trials += 1;
            assert!(report_u64(&report, "attempts") >= 2, "{report}");
        }
        if trial == 4 && committed_at_kill > 0 && !finished_before_rerun {
            assert_eq!(report_u64(&report, "attempts"), 3, "{report}");
        }
    }
    assert!(resumed_trials >= 1);
}

/// Every file under `dir` with its size, modification time and inode.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, i64, i64, u64)> {
    let mut files = BTreeMap::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for path in list_dir(&folder) {
            let meta = std::fs::metadata(&path).unwrap();
            if meta.is_dir() {
                folders.push(path.clone());
            }
            files.insert(
                path,
                (meta.len(), meta.mtime(), meta.mtime_nsec(), meta.ino()),
            );
        }
    }
    files
}

#[test]
fn rerunning_a_finished_run_exits_0_and_touches_nothing() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 40);
    let out = dir.path().join("out");
    let pipeline = Pipeline::new(&input, &out);
    pipeline.run(&[]).expect_code(0);
    let before = snapshot(&out);
    let run = pipeline.run(&[]);
    run.expect_code(0);
    assert_eq!(snapshot(&out), before, "a finished run's files changed");
    assert!(
        run.stderr.contains("already complete") || run.stdout.contains("already complete"),
        "{}",
        run.describe()
    );
}

/// The one error line of a refused run: exit 2, no panic.
fn expect_refused(run: &RunResult) -> String {
    assert_eq!(run.code, 2, "expected exit code 2: {}", run.describe());
    assert!(!run.stderr.contains("panicked"), "{}", run.describe());
    let lines = error_lines(&run.stderr);
    assert_eq!(lines.len(), 1, "{}", run.describe());
    lines[0].to_string()
}

#[test]
fn a_changed_input_file_or_model_is_refused_naming_the_difference() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 40);
    let out = dir.path().join("out");
    let mut pipeline = Pipeline::new(&input, &out);
    pipeline.run(&[]).expect_code(0);
    let before = read_output(&out);

    // The same path, other content.
    sample_subset(dir.path(), "in.parquet", 30);
    let line = expect_refused(&pipeline.run(&[]));
    assert!(
        line.contains("in.parquet") && line.contains("changed"),
        "{line}"
    );
    assert!(line.contains("rows 40 -> 30"), "{line}");
    assert!(line.contains("--overwrite"), "{line}");
    assert_eq!(
        read_output(&out),
        before,
        "a refused run touched the output"
    );

    // Another model (same predictions, other file content).
    sample_subset(dir.path(), "in.parquet", 40);
    let other_out = dir.path().join("other");
    pipeline.output = other_out.clone();
    pipeline.run(&[]).expect_code(0);
    let other_model = dir.path().join("other.pt");
    fixture("other-model", &model(), &other_model, &[]);
    pipeline.model = other_model;
    let line = expect_refused(&pipeline.run(&[]));
    assert!(line.contains("model differs"), "{line}");

    // --overwrite replaces the other run's output.
    pipeline.run(&["--overwrite"]).expect_code(0);
    assert_eq!(read_output(&other_out).len(), 40);
}

#[test]
fn three_shards_one_killed_and_rerun_give_one_processs_output() {
    let dir = tmp();
    let input = rowgroups_input(dir.path(), 360, 20);
    let reference = Reference::of(&slowed(&input, &dir.path().join("single")), &input);
    let out = dir.path().join("sharded");
    let mut pipeline = slowed(&input, &out);
    // Six parts a shard, so shard 1 killed at its first has most left.
    pipeline.rows_per_file = Some(20);
    let file = pipeline.write(&dir.path().join("sharded.toml"));
    let mut shards: Vec<Child> = (0..3)
        .map(|i| spawn(&file, &["--shard", &format!("{i}/3")]))
        .collect();
    // Shard 1 is killed as soon as it has committed a part.
    let deadline = Instant::now() + Duration::from_secs(60);
    let killed = kill_when(&mut shards[1], deadline, || {
        has_part(&out, "part-s001of003-")
    });
    assert!(killed, "shard 1 finished before it could be killed");
    for (i, shard) in shards.into_iter().enumerate() {
        if i != 1 {
            let output = shard.wait_with_output().unwrap();
            assert_eq!(
                output.status.code(),
                Some(0),
                "shard {i}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
    assert!(
        !out.join("_SUCCESS").exists(),
        "_SUCCESS written while shard 1 is not done"
    );
    let rerun = run_file(&file, &["--shard", "1/3"], &out);
    reference.assert_complete(&rerun);
    let report = read_report(&out);
    assert_eq!(report_u64(&report, "rows_in"), 360, "{report}");
    assert!(report_u64(&report, "rows_resumed") > 0, "{report}");
}

#[test]
fn local_shards_on_cpu_give_one_processs_output() {
    let dir = tmp();
    let input = rowgroups_input(dir.path(), 200, 25);
    let reference = Reference::of(&Pipeline::new(&input, dir.path().join("single")), &input);
    let out = dir.path().join("local");
    let run = Pipeline::new(&input, &out).run(&["--local-shards", "2"]);
    reference.assert_complete(&run);
    let parts: Vec<String> = part_files(&out).iter().map(|p| file_name(p)).collect();
    for shard in ["s000of002", "s001of002"] {
        assert!(
            parts.iter().any(|p| p.contains(shard)),
            "no part of shard {shard}: {parts:?}"
        );
    }
}

/// The pids of the processes whose parent is `parent`, from `/proc`.
fn children_of(parent: u32) -> Vec<u32> {
    list_dir(Path::new("/proc"))
        .iter()
        .filter_map(|p| {
            let pid: u32 = file_name(p).parse().ok()?;
            let stat = std::fs::read_to_string(p.join("stat")).ok()?;
            // `pid (comm) state ppid ...`; comm may hold spaces.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
            (ppid.parse::<u32>().ok()? == parent).then_some(pid)
        })
        .collect()
}

/// Whether `pid` still runs: there, and not a zombie left for its new
/// parent to reap.
fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| Some(!stat.rsplit_once(')')?.1.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

#[test]
fn local_shards_die_with_their_sigkilled_parent_and_the_rerun_completes() {
    let dir = tmp();
    let input = rowgroups_input(dir.path(), 1200, 50);
    let reference = Reference::of(&slowed(&input, &dir.path().join("single")), &input);
    let out = dir.path().join("local");
    let pipeline = slowed(&input, &out);
    let file = pipeline.write(&dir.path().join("p.toml"));
    let mut parent = spawn(&file, &["--local-shards", "2"]);
    let pid = parent.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    let running = wait_until(&mut parent, deadline, || {
        children_of(pid).len() == 2 && has_part(&out, "part-")
    });
    assert!(running, "the run ended before its shards committed");
    let shards = children_of(pid);
    // The shards write to the parent's stderr: it ends when they all have.
    let mut stderr = parent.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).ok();
        tx.send(text).ok();
    });
    // SIGKILL: the parent cannot forward it; the kernel must stop them.
    parent.kill().unwrap();
    parent.wait().unwrap();
    let stderr = rx.recv_timeout(Duration::from_secs(15));
    // Their stderr closes a moment before they are gone.
    let gone_by = Instant::now() + Duration::from_secs(5);
    while shards.iter().any(|&p| is_running(p)) && Instant::now() < gone_by {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = shards.into_iter().filter(|&p| is_running(p)).collect();
    assert!(left.is_empty(), "shards {left:?} outlived their parent");
    // Each stopped on the SIGTERM the kernel sent, not by finishing.
    let stderr = stderr.expect("the shards still hold stderr 15 s after their parent died");
    let stopped = stderr.matches("interrupted").count();
    assert_eq!(stopped, 2, "{stderr}");
    reference.assert_complete(&pipeline.run(&["--local-shards", "2"]));
}

#[test]
fn commit_by_hand_names_the_missing_shards() {
    let dir = tmp();
    let input = rowgroups_input(dir.path(), 100, 25);
    let out = dir.path().join("out");
    let pipeline = Pipeline::new(&input, &out);
    pipeline.run(&["--shard", "0/3"]).expect_code(0);
    pipeline.run(&["--shard", "2/3"]).expect_code(0);
    assert!(!out.join("_SUCCESS").exists());
    let commit = run_command(Command::new(bin()).arg("commit").arg(&out), &out);
    assert_ne!(commit.code, 0, "{}", commit.describe());
    assert!(commit.stderr.contains("shard 1"), "{}", commit.describe());
    pipeline.run(&["--shard", "1/3"]).expect_code(0);
    assert!(out.join("_SUCCESS").is_file());
    let commit = run_command(Command::new(bin()).arg("commit").arg(&out), &out);
    commit.expect_code(0);
}

#[test]
fn sigterm_exits_143_and_the_rerun_resumes() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 600);
    let ids = ids_of(&read_input(&input));
    let out = dir.path().join("out");
    let file = slowed(&input, &out).write(&dir.path().join("p.toml"));
    let mut child = spawn(&file, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let running = wait_until(&mut child, deadline, || has_part(&out, "part-"));
    assert!(running, "the run ended before its first commit");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("resumable"), "{stderr}");
    assert!(!out.join("_SUCCESS").exists());
    assert!(
        temporary_files(&out).is_empty(),
        "{:?}",
        temporary_files(&out)
    );
    let committed = committed_rows(&out);
    let rerun = run_file(&file, &[], &out);
    rerun.expect_code(0);
    let output = read_output(&out);
    assert_each_id_once(ids.iter().map(String::as_str), &output, &read_rejects(&out));
    let report = read_report(&out);
    assert_eq!(report_u64(&report, "rows_resumed") as usize, committed);
    // A signal lets the writers commit what they hold, batch records
    // included: the report's batches are both attempts', all in
    // _segpredict/batches.parquet.
    let records = read_batch_records(&out);
    assert_eq!(record_attempts(&records), [1, 2].into());
    assert_eq!(records.len() as u64, report_u64(&report, "batches"));
}

/// Attempt markers in `out`'s `_progress` (one per attempt begun).
fn attempt_markers(out: &Path) -> usize {
    list_dir(&out.join("_progress"))
        .iter()
        .filter(|p| file_name(p).starts_with("attempt-"))
        .count()
}
