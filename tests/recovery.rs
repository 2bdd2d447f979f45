//! Bad values reject their rows, an out-of-memory rejects only rows that do
//! not fit alone, and Ctrl-C leaves no half-written file under a final name.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

#[test]
fn undecodable_rows_mid_file_are_rejected_and_the_rest_predicted() {
    let dir = tmp();
    let input_path = dir.path().join("bad.parquet");
    let made = fixture("bad-values", &sample(), &input_path, &["--rows", "300"]);
    // {"bad_segment_size": 150, "null_segments": 40, "no_segments": 250}
    let bad: BTreeMap<String, i64> = serde_json::from_str(made.trim()).unwrap();
    assert_eq!(bad.len(), 3);
    let input = read_input(&input_path);
    assert_eq!(input.len(), 300);

    let pipeline = Pipeline::new(&input_path, dir.path().join("out"));
    let RejectingRun {
        run,
        out,
        output,
        rejects,
    } = run_with_rejects(&pipeline, &input);
    assert_eq!(output.len(), 297);
    assert_eq!(rejects.len(), 3, "{rejects:?}");
    let found: BTreeMap<String, i64> = rejects
        .iter()
        .map(|r| (r.kind.clone(), r.source_row))
        .collect();
    assert_eq!(found, bad);
    for reject in &rejects {
        let row = reject.source_row as usize;
        assert_eq!(
            reject.id.as_deref(),
            Some(input[row].id.as_str()),
            "{reject:?}"
        );
        assert_eq!(Path::new(&reject.source_file), input_path, "{reject:?}");
        assert!(!reject.reason.trim().is_empty(), "{reject:?}");
    }
    let short = rejects
        .iter()
        .find(|r| r.kind == "bad_segment_size")
        .unwrap();
    assert!(short.reason.contains("63"), "{short:?}");
    // The other rows predict as in the original file.
    assert_same_predictions_as_baseline(&output);
    let report = read_report(&out);
    assert_eq!(report_u64(&report, "rows_rejected"), 3);
    assert_eq!(report_u64(&report, "rows_out"), 297);
    assert!(run.stderr.contains(REJECTS_FILE), "{}", run.describe());
}

#[test]
fn injected_out_of_memory_rejects_only_rows_too_big_alone() {
    const LIMIT: usize = 1000;
    let dir = tmp();
    let input = read_input(&sample());
    let too_big: BTreeSet<&str> = input
        .iter()
        .filter(|r| r.n_segments.unwrap() > LIMIT)
        .map(|r| r.id.as_str())
        .collect();
    assert!(
        too_big.len() >= 4,
        "the sample has rows over {LIMIT} segments"
    );

    let mut pipeline = Pipeline::new(sample(), dir.path().join("out"));
    pipeline.max_segments = 4096;
    pipeline
        .model_extra
        .push(format!("fault_oom_above_segments = {LIMIT}"));
    let run = pipeline.run(&[]);
    run.expect_code(3);
    let out = &run.out_dir;
    assert!(out.join("_SUCCESS").is_file());
    let output = read_output(out);
    let rejects = read_rejects(out);
    assert_each_id_once(input.iter().map(|r| r.id.as_str()), &output, &rejects);

    let rejected: BTreeSet<&str> = rejects.iter().map(|r| r.id.as_deref().unwrap()).collect();
    let kinds: BTreeSet<&str> = rejects.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(
        rejected,
        too_big,
        "rejected rows other than those over {LIMIT} segments: {:?}",
        rejects
            .iter()
            .filter(|r| !too_big.contains(r.id.as_deref().unwrap()))
            .collect::<Vec<_>>()
    );
    assert_eq!(kinds, BTreeSet::from(["oom_single_row"]));
    for reject in &rejects {
        let row = &input[reject.source_row as usize];
        assert_eq!(reject.id.as_deref(), Some(row.id.as_str()), "{reject:?}");
        assert!(reject.reason.contains("out of memory"), "{reject:?}");
    }
    assert_same_predictions_as_baseline(&output);

    let report = read_report(out);
    assert!(report_u64(&report, "oom_events") > 0, "{report}");
    assert!(
        report_u64(&report, "final_max_segments") <= LIMIT as u64,
        "{report}"
    );
    assert_eq!(
        report_u64(&report, "oom_rejected_rows"),
        too_big.len() as u64
    );
    assert_eq!(report_u64(&report, "rows_rejected"), too_big.len() as u64);
    assert_eq!(
        report_u64(&report, "rows_out"),
        (input.len() - too_big.len()) as u64
    );
    for record in read_batch_records(out) {
        assert!(
            record["padded_segments"].as_u64().unwrap() <= LIMIT as u64,
            "a batch over the injected limit reached the model: {record}"
        );
    }
}

/// Copies of the sample in one directory: a run long enough to interrupt.
const CTRL_C_COPIES: usize = 5;

#[test]
fn ctrl_c_exits_130_leaving_only_complete_parts() {
    let dir = tmp();
    let input = dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    for copy in 0..CTRL_C_COPIES {
        std::fs::copy(sample(), input.join(format!("copy-{copy}.parquet"))).unwrap();
    }
    let out = dir.path().join("out");
    let mut pipeline = Pipeline::new(&input, &out);
    // Small batches: thousands of forward passes, many seconds on CPU.
    pipeline.max_segments = 64;
    pipeline.max_rows = 16;
    pipeline.batch_rows = 16;
    pipeline.rows_per_file = Some(100);
    let file = pipeline.write(&dir.path().join("pipeline.toml"));
    let started = Instant::now();
    let mut child = quiet_env(Command::new(bin()).arg("run").arg(&file))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting segpredict");
    // Signal once predictions are being written (the handler is installed
    // long before), while the run is still going.
    let deadline = started + Duration::from_secs(60);
    while !is_writing(&out) && Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended before it could be interrupted; make it longer"
    );
    assert!(is_writing(&out), "no predictions written within a minute");
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success());
    let signalled_at = started.elapsed();
    let result = child.wait_with_output().expect("waiting for segpredict");
    let code = result.status.code().unwrap_or(-1);
    let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
    let describe = format!(
        "exit code {code} after {:?} (signal at {signalled_at:?})\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        started.elapsed()
    );

    assert_eq!(code, 130, "expected the interrupted exit code\n{describe}");
    assert!(stderr.contains("interrupted"), "{describe}");
    assert!(!stderr.contains("panicked"), "{describe}");
    assert!(
        !out.join("_SUCCESS").exists(),
        "an interrupted run is marked complete\n{describe}"
    );
    let leftovers: Vec<String> = list_dir(&out)
        .iter()
        .map(|p| file_name(p))
        .filter(|n| n.ends_with(".inprogress") || n.starts_with(".segpredict"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporary files left: {leftovers:?}\n{describe}"
    );
    let mut rows_in_parts = 0;
    for part in part_files(&out) {
        let batches = read_batches(&part)
            .unwrap_or_else(|e| panic!("a final-named part is not whole Parquet: {e}\n{describe}"));
        rows_in_parts += batches.iter().map(|b| b.num_rows()).sum::<usize>();
    }
    assert!(
        rows_in_parts < CTRL_C_COPIES * SAMPLE_ROWS,
        "every row was written: the signal did not arrive mid-run\n{describe}"
    );
    // What was written is whole: no input row twice.
    let output = read_output(&out);
    assert_eq!(output.len(), rows_in_parts);
    let mut written = HashSet::new();
    for row in &output {
        let key = (row.source_file.as_str(), row.source_row);
        assert!(written.insert(key), "{key:?} written twice\n{describe}");
    }
}

/// A part file, finished or in progress, exists in `out`.
fn is_writing(out: &Path) -> bool {
    list_dir(out).iter().any(|p| {
        let name = file_name(p);
        name.starts_with(".part-") || name.starts_with("part-")
    })
}

/// A row that fits under the memory limit on its own must not be rejected
/// just because its batch was padded past the limit: alone, it runs unpadded.
#[test]
fn injected_out_of_memory_does_not_reject_a_lone_row_that_fits_unpadded() {
    const LIMIT: usize = 1000;
    let dir = tmp();
    let sample_rows = read_input(&sample());
    // The largest row within the limit whose size class (1024 under the
    // default ladder for 4096: 256, 512, 1024, ...) is over it.
    let (index, row) = sample_rows
        .iter()
        .enumerate()
        .filter(|(_, r)| (513..=LIMIT).contains(&r.n_segments.unwrap()))
        .max_by_key(|(_, r)| r.n_segments)
        .expect("the sample has a row of 513..=1000 segments");
    let input_path = dir.path().join("one-row.parquet");
    fixture(
        "take",
        &sample(),
        &input_path,
        &["--indices", &index.to_string()],
    );

    let mut pipeline = Pipeline::new(&input_path, dir.path().join("out"));
    pipeline.max_segments = 4096;
    pipeline
        .model_extra
        .push(format!("fault_oom_above_segments = {LIMIT}"));
    let run = pipeline.run(&[]);
    let out = &run.out_dir;
    let rejects = if out.join(REJECTS_FILE).is_file() {
        read_rejects(out)
    } else {
        Vec::new()
    };
    assert!(
        rejects.is_empty(),
        "a row of {} segments (<= {LIMIT}) was rejected: {rejects:?}\n{}",
        row.n_segments.unwrap(),
        run.describe()
    );
    run.expect_code(0);
    let output = read_output(out);
    assert_each_id_once([row.id.as_str()], &output, &rejects);
    assert_same_predictions_as_baseline(&output);
    let report = read_report(out);
    let classes: Vec<u64> = report["size_classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert!(
        classes.contains(&1024),
        "the scenario needs the 1024 size class: {classes:?}"
    );
}

fn send(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) on a process this test started and has not reaped.
    unsafe { libc::kill(pid as libc::pid_t, signal) };
}

/// A signal at many moments across a run's end: before the shard's `done`
/// record it exits 129/130/143 and the rerun resumes to the exact output;
/// after it the commit finishes and it exits 0 with `_SUCCESS` and the
/// exact output (never exit 0 without them).
#[test]
fn a_signal_at_any_moment_around_the_end_exits_0_complete_or_1xx_resumable() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 200);
    let started = Instant::now();
    let reference = Reference::of(&slowed(&input, &dir.path().join("reference")), &input);
    let whole = started.elapsed();
    let mut moments = Moments::seeded();
    let signals = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
    let mut codes = BTreeMap::new();
    for trial in 0..9 {
        let out = dir.path().join(format!("trial-{trial}"));
        let file = slowed(&input, &out).write(&dir.path().join(format!("t{trial}.toml")));
        let child = spawn(&file, &[]);
        std::thread::sleep(whole.mul_f64(0.8 + 0.35 * moments.next()));
        send(child.id(), signals[trial % 3]);
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let code = output.status.code();
        *codes.entry(code).or_insert(0) += 1;
        match code {
            Some(0) => assert!(
                out.join("_SUCCESS").is_file(),
                "exit 0 without _SUCCESS: {stderr}"
            ),
            Some(129 | 130 | 143) => {}
            other => panic!("trial {trial}: exit {other:?}: {stderr}"),
        }
        // Exit 0: the rerun touches nothing and the output is checked as it
        // is; otherwise the rerun resumes it.
        reference.assert_complete(&run_file(&file, &[], &out));
    }
    eprintln!("exit codes over the trials: {codes:?}");
}

/// The parent of `--local-shards` names a child killed by a signal: its
/// shard, pid and signal, and that a rerun resumes it.
#[test]
fn a_local_shard_killed_by_a_signal_is_named_by_index_pid_and_signal() {
    let dir = tmp();
    let input = rowgroups_input(dir.path(), 600, 20);
    let out = dir.path().join("out");
    let file = slowed(&input, &out).write(&dir.path().join("p.toml"));
    let mut parent = spawn(&file, &["--local-shards", "2"]);
    // Every process whose parent is `pid` (its threads fork them).
    let children = |pid: u32| -> Vec<u32> {
        let parent_of = |stat: String| -> Option<u32> {
            stat.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        };
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|child| {
                let stat = std::fs::read_to_string(format!("/proc/{child}/stat"));
                stat.ok().and_then(parent_of) == Some(pid)
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let parent_pid = parent.id();
    let ready = wait_until(&mut parent, deadline, || {
        children(parent_pid).len() == 2 && has_part(&out, "part-s001of002-")
    });
    if !ready {
        let output = parent.wait_with_output().unwrap();
        panic!(
            "the shards ended before one could be killed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let victim = *children(parent_pid).iter().max().unwrap();
    send(victim, libc::SIGKILL);
    let output = parent.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let named = format!("(pid {victim}) was killed by SIGKILL (signal 9)");
    assert!(stderr.contains(&named), "{named}: {stderr}");
    assert!(
        stderr.contains("running the same command again resumes it"),
        "{stderr}"
    );
    let rerun = run_file(&file, &["--local-shards", "2"], &out);
    rerun.expect_code(0);
    let ids = ids_of(&read_input(&input));
    assert_each_id_once(
        ids.iter().map(String::as_str),
        &read_output(&out),
        &read_rejects(&out),
    );
}
