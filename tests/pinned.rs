//! Inputs pinned to what the run recorded, and object storage's failures
//! told and ridden out (issues 30 and 35): an input object replaced
//! mid-run fails the run naming it, with nothing of the new object
//! committed; two footer-identical files swapped after a kill are refused
//! as changed; a file truncated while a skip run reads it has its unread
//! rows rejected and the rerun says it changed; two spellings of an input
//! path resume one output; a range damaged in transit is fetched again; a
//! burst of 503s and a 25 s outage are ridden out; a missing bucket is one
//! line and exit 2.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// Held rows small, so the readers stay close behind the model and a file
/// changed mid-run is changed before most of it is read.
const HELD_ROWS: &str = "max_held_rows = 128";

/// Writes `pipeline` to `dir/name` with bucketing holding few rows.
fn write_close_behind(pipeline: &Pipeline, path: &Path) -> PathBuf {
    let text = pipeline.toml().replace("max_held_rows = 16384", HELD_ROWS);
    assert!(
        text.contains(HELD_ROWS),
        "the pipeline text changed: {text}"
    );
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// `segpredict ARGS` pointed at the S3 endpoint `endpoint`.
fn s3_command(endpoint: &str, args: &[&str]) -> Command {
    let mut command = Command::new(bin());
    command.args(args);
    configure_s3(quiet_env(&mut command), endpoint);
    command
}

fn spawn_piped(mut command: Command) -> Child {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting segpredict")
}

/// Runs a Python snippet with the venv's pyarrow; `args` are its argv[1:].
fn python_snippet(script: &str, args: &[&Path]) {
    let output = Command::new(python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("running python");
    assert!(
        output.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The sample's first `rows` rows as `a`, and as `b` with every id's
/// `item-` made `twin-`: no statistics, no compression, no dictionary,
/// `group` rows a row group, so the two footers are byte-identical.
fn footer_twins(a: &Path, b: &Path, rows: usize, group: usize) {
    let script = format!(
        "import sys, pyarrow.parquet as pq, pyarrow.compute as pc\n\
         t = pq.read_table(sys.argv[1]).slice(0, {rows}).combine_chunks()\n\
         o = dict(compression='none', use_dictionary=False, write_statistics=False, row_group_size={group})\n\
         pq.write_table(t, sys.argv[2], **o)\n\
         t = t.set_column(0, 'id', pc.replace_substring(t.column('id'), 'item-', 'twin-'))\n\
         pq.write_table(t, sys.argv[3], **o)\n"
    );
    python_snippet(&script, &[&sample(), a, b]);
}

/// The sample's first `rows` rows, `group` rows a row group, with page
/// checksums (a flipped byte in a page is then detected).
fn checksummed(path: &Path, rows: usize, group: usize) {
    let script = format!(
        "import sys, pyarrow.parquet as pq\n\
         t = pq.read_table(sys.argv[1]).slice(0, {rows})\n\
         pq.write_table(t, sys.argv[2], row_group_size={group}, write_page_checksum=True)\n"
    );
    python_snippet(&script, &[&sample(), path]);
}

/// A Parquet file's footer: its last `8 + length` bytes.
fn footer_bytes(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let n = bytes.len();
    let length = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
    bytes[n - 8 - length..].to_vec()
}

fn stderr_of(child: Child) -> (Option<i32>, String) {
    let output = child.wait_with_output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn an_input_object_replaced_mid_run_fails_naming_it_and_nothing_of_the_new_one_is_committed() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("replaced");
    let dir = tmp();
    let (original, twin) = (dir.path().join("a.parquet"), dir.path().join("b.parquet"));
    footer_twins(&original, &twin, 1200, 20);
    server.put(
        &bucket,
        "in/input.parquet",
        &std::fs::read(&original).unwrap(),
    );
    let url = format!("s3://{bucket}/in/input.parquet");
    let out = dir.path().join("out");
    let file = write_close_behind(&slowed(Path::new(&url), &out), &dir.path().join("p.toml"));
    let mut child = spawn_piped(s3_command(
        server.endpoint(),
        &["run", file.to_str().unwrap()],
    ));
    let deadline = Instant::now() + Duration::from_secs(120);
    let running = wait_until(&mut child, deadline, || has_part(&out, "part-"));
    assert!(running, "the run ended before committing a part");
    server.put(&bucket, "in/input.parquet", &std::fs::read(&twin).unwrap());
    let (code, stderr) = stderr_of(child);
    assert_eq!(code, Some(2), "a permanent failure expected: {stderr}");
    assert!(
        stderr.contains(&url) && stderr.contains("changed while the run read it"),
        "{stderr}"
    );
    assert!(!out.join("_SUCCESS").exists());
    let committed = read_output(&out);
    assert!(!committed.is_empty());
    let new: Vec<_> = committed
        .iter()
        .filter(|r| !r.id.starts_with("item-"))
        .collect();
    assert!(new.is_empty(), "rows of the new object committed: {new:?}");
}

#[test]
fn footer_identical_files_swapped_after_a_kill_are_refused_as_changed_never_mixed() {
    let dir = tmp();
    let input = dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    let (a, b) = (input.join("a.parquet"), input.join("b.parquet"));
    footer_twins(&a, &b, 400, 20);
    assert_eq!(footer_bytes(&a), footer_bytes(&b), "the test needs twins");
    let out = dir.path().join("out");
    let file = slowed(&input, &out).write(&dir.path().join("p.toml"));
    let mut child = spawn(&file, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    assert!(
        kill_when(&mut child, deadline, || has_part(&out, "part-")),
        "the run ended before committing a part"
    );
    // A re-export swaps them, each name keeping its modification time.
    let mtime = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let (mtime_a, mtime_b) = (mtime(&a), mtime(&b));
    let aside = input.join("swap.tmp");
    std::fs::rename(&a, &aside).unwrap();
    std::fs::rename(&b, &a).unwrap();
    std::fs::rename(&aside, &b).unwrap();
    for (path, time) in [(&a, mtime_a), (&b, mtime_b)] {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(time).unwrap();
    }
    let rerun = run_file(&file, &[], &out);
    let line = expect_one_line_error(&rerun);
    assert!(
        line.contains("a.parquet changed since the output was started")
            && line.contains("inode")
            && line.contains("put the original back"),
        "{line}"
    );
    assert!(!out.join("_SUCCESS").exists());
}

#[test]
fn a_file_truncated_while_a_skip_run_reads_it_has_its_unread_rows_rejected_and_the_rerun_says_changed(
) {
    let dir = tmp();
    let input = dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    let (a, b) = (input.join("a.parquet"), input.join("b.parquet"));
    footer_twins(&a, &b, 1200, 20);
    let out = dir.path().join("out");
    let file = write_close_behind(&slowed(&input, &out), &dir.path().join("p.toml"));
    let mut child = spawn(&file, &["--on-bad-file", "skip"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let running = wait_until(&mut child, deadline, || has_part(&out, "part-"));
    assert!(running, "the run ended before committing a part");
    let size = std::fs::metadata(&a).unwrap().len();
    std::fs::File::options()
        .write(true)
        .open(&a)
        .unwrap()
        .set_len(size / 2)
        .unwrap();
    let (code, stderr) = stderr_of(child);
    assert_eq!(code, Some(3), "exit 3 (rows rejected) expected: {stderr}");
    let (output, rejects) = (read_output(&out), read_rejects(&out));
    assert_eq!(output.len() + rejects.len(), 2400, "every row once");
    assert!(
        !rejects.is_empty(),
        "the truncation landed after a was read"
    );
    for reject in &rejects {
        assert!(reject.source_file.ends_with("a.parquet"), "{reject:?}");
        assert_eq!(reject.kind, "bad_row_group", "{reject:?}");
        assert!(
            reject.reason.contains("changed while the run read it"),
            "{reject:?}"
        );
    }
    let twins = output.iter().filter(|r| r.id.starts_with("twin-")).count();
    assert_eq!(twins, 1200, "b.parquet is predicted whole");
    let rerun = run_file(&file, &["--on-bad-file", "skip"], &out);
    let line = expect_one_line_error(&rerun);
    assert!(
        line.contains("a.parquet changed since the output was started")
            && line.contains(&format!("size {size} -> {}", size / 2))
            && !line.contains("no longer in the input"),
        "{line}"
    );
}

#[test]
fn two_spellings_of_an_input_path_resume_one_output() {
    let dir = tmp();
    let input = dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    let local = sample_subset(&input, "sample.parquet", 600);
    let reference = Reference::of(&slowed(&input, &dir.path().join("reference")), &local);
    let out = dir.path().join("out");
    let file = slowed(&input, &out).write(&dir.path().join("p.toml"));
    let mut relative = Command::new(bin());
    relative
        .current_dir(dir.path())
        .args(["run", file.to_str().unwrap(), "--input", "./in/"]);
    quiet_env(&mut relative);
    let mut child = spawn_piped(relative);
    let deadline = Instant::now() + Duration::from_secs(120);
    assert!(
        kill_when(&mut child, deadline, || has_part(&out, "part-")),
        "the run ended before committing a part"
    );
    let absolute = input.display().to_string();
    let rerun = run_file(&file, &["--input", &absolute], &out);
    reference.assert_complete(&rerun);
    assert!(report_u64(&read_report(&out), "rows_resumed") > 0);
    let url = format!("file://{}/../in", input.display());
    run_file(&file, &["--input", &url], &out).expect_code(0);
}

/// The sample's first 600 rows, checksummed, in `bucket` under `in/`, and
/// the uninterrupted local run's output.
fn checksummed_in_bucket(server: &S3Server, bucket: &str, dir: &Path) -> (String, Reference) {
    let local = dir.join("input.parquet");
    checksummed(&local, 600, 20);
    server.put(bucket, "in/input.parquet", &std::fs::read(&local).unwrap());
    let reference = Reference::of(&slowed(&local, &dir.join("reference")), &local);
    (format!("s3://{bucket}/in/"), reference)
}

/// A completed run's output in `bucket` under `out/`, downloaded and
/// checked against the uninterrupted run; its report.
fn assert_complete_in(
    server: &S3Server,
    bucket: &str,
    run: &RunResult,
    reference: &Reference,
) -> serde_json::Value {
    let out = run.out_dir.clone();
    std::fs::create_dir_all(&out).unwrap();
    server.client().download(bucket, "out/", &out);
    reference.assert_complete(run);
    read_report(&out)
}

#[test]
fn ranges_damaged_in_transit_are_fetched_again_and_the_run_is_exact() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("corrupt");
    let dir = tmp();
    let (input, reference) = checksummed_in_bucket(server, &bucket, dir.path());
    let proxy = FaultProxy::start(
        server.port(),
        FaultRates {
            path_contains: "in/input.parquet",
            methods: "GET",
            ..FaultRates::default()
        },
    );
    // The footer's read and the first row groups' fetches.
    proxy.corrupt_next(4);
    let file = slowed(Path::new(&input), Path::new(&format!("s3://{bucket}/out/")))
        .write(&dir.path().join("p.toml"));
    let mut command = s3_command(proxy.endpoint(), &["run", file.to_str().unwrap()]);
    let run = run_command(&mut command, &dir.path().join("downloaded"));
    let report = assert_complete_in(server, &bucket, &run, &reference);
    assert_eq!(proxy.stats().corrupt, 4, "{:?}", proxy.stats());
    let refetched = report["store_requests"]["refetched_ranges"]
        .as_u64()
        .unwrap();
    assert!(refetched >= 1, "{report}");
}

#[test]
fn eleven_503s_in_a_row_and_a_25_second_outage_are_ridden_out() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("outage");
    let dir = tmp();
    let (input, reference) = checksummed_in_bucket(server, &bucket, dir.path());
    let proxy = FaultProxy::start(server.port(), FaultRates::default());
    proxy.fail_next(11);
    let file = slowed(Path::new(&input), Path::new(&format!("s3://{bucket}/out/")))
        .write(&dir.path().join("p.toml"));
    let mut child = spawn_piped(s3_command(
        proxy.endpoint(),
        &["run", file.to_str().unwrap()],
    ));
    let deadline = Instant::now() + Duration::from_secs(120);
    let running = wait_until(&mut child, deadline, || {
        !server.list(&bucket, "out/part-").is_empty()
    });
    assert!(running, "the run ended before committing a part");
    assert_eq!(proxy.stats().fail, 11, "the burst came first");
    proxy.set_rates(FaultRates {
        fail: 1.0,
        ..FaultRates::default()
    });
    std::thread::sleep(Duration::from_secs(25));
    proxy.set_rates(FaultRates::default());
    let (code, stderr) = stderr_of(child);
    let run = RunResult {
        code: code.unwrap_or(-1),
        stdout: String::new(),
        stderr,
        out_dir: dir.path().join("downloaded"),
    };
    assert_complete_in(server, &bucket, &run, &reference);
    assert!(proxy.stats().fail > 11, "{:?}", proxy.stats());
}
