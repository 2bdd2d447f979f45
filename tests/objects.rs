//! Object storage end to end, against moto's S3 server on loopback
//! (`util::S3Server`): the sample read from and written to a bucket equals
//! the local run row for row; runs writing to a bucket killed at random
//! moments resume; three shards share a prefix; a tenth of requests
//! failing or reset through the fault proxy costs retries, not rows; and
//! failures that outlast the retries exit retryable with a resumable
//! output. While runs write, a watcher lists the prefix and reads every
//! object under a final name whole.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::util::*;

/// `segpredict ARGS` with the store's environment (the server's endpoint,
/// or the fault proxy's).
pub(crate) fn command(endpoint: &str, args: &[&str]) -> Command {
    let mut command = Command::new(bin());
    command.args(args);
    configure_s3(quiet_env(&mut command), endpoint);
    command
}

/// Whether a commit record under `out` (a prefix of `bucket`) names a part
/// whose name starts with `part` (committed, not merely uploaded).
pub(crate) fn committed_in_bucket(server: &S3Server, bucket: &str, out: &str, part: &str) -> bool {
    let records: Vec<serde_json::Value> = server
        .list(bucket, &format!("{out}/_progress/log/"))
        .iter()
        .filter(|key| !key.rsplit('/').next().unwrap_or_default().starts_with('.'))
        .filter_map(|key| serde_json::from_slice(&server.get(bucket, key)).ok())
        .collect();
    recorded_files(&records)
        .iter()
        .any(|(key, _, _)| key.starts_with(part))
}

/// `segpredict run FILE ARGS`, waiting for the lease a killed run left
/// (the test pipelines' leases last 3 s).
pub(crate) fn run_s3(endpoint: &str, file: &Path, args: &[&str], out: &Path) -> RunResult {
    let mut all = vec!["run", file.to_str().unwrap(), "--wait-for-lock=30s"];
    all.extend_from_slice(args);
    run_command(&mut command(endpoint, &all), out)
}

pub(crate) fn spawn_s3(endpoint: &str, file: &Path, args: &[&str]) -> Child {
    let mut all = vec!["run", file.to_str().unwrap()];
    all.extend_from_slice(args);
    command(endpoint, &all)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting segpredict")
}

/// The input uploaded to `bucket` under `in/`; its URL.
pub(crate) fn upload_input(server: &S3Server, bucket: &str, input: &Path) -> PathBuf {
    server.put(bucket, "in/input.parquet", &std::fs::read(input).unwrap());
    PathBuf::from(format!("s3://{bucket}/in/"))
}

/// The objects under `prefix`, downloaded into `dir` (which is returned).
pub(crate) fn download(server: &S3Server, bucket: &str, prefix: &str, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    server.client().download(bucket, prefix, dir);
    dir.to_path_buf()
}

/// Whether an object is whole: a Parquet object parses to its end.
fn is_whole(key: &str, bytes: &[u8]) -> bool {
    if !key.ends_with(".parquet") {
        return true;
    }
    let bytes = bytes::Bytes::copy_from_slice(bytes);
    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map(|reader| reader.into_iter().all(|batch| batch.is_ok()))
        .unwrap_or(false)
}

/// Lists `prefix` every 50 ms until `stop`, reading each new Parquet
/// object whole; returns how many it checked and the keys that were not.
fn watch(server: &S3Server, bucket: &str, prefix: &str, stop: &AtomicBool) -> (usize, Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    let mut partial = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        for key in server.list(bucket, prefix) {
            if !seen.insert(key.clone()) {
                continue;
            }
            // Removed between listing and reading (a replaced attempt's): gone, not partial.
            let got = server
                .client()
                .request("GET", &format!("/{bucket}/{key}"), &[], &[], b"");
            if let Ok(response) = got {
                if response.status == 200 && !is_whole(&key, &response.body) {
                    partial.push(key);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (seen.len(), partial)
}

/// The output's rows by id, their source named by its row alone (the
/// file is a path in one run, a URL in the other).
fn sorted_rows(dir: &Path) -> Vec<OutRow> {
    let mut rows = read_output(dir);
    rows.iter_mut().for_each(|r| r.source_file.clear());
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    rows
}

#[test]
fn the_sample_read_from_and_written_to_s3_equals_the_local_run_row_for_row() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("sample");
    let dir = tmp();
    let input = upload_input(server, &bucket, &sample());
    let local = Pipeline::new(sample(), dir.path().join("local"));
    local.run(&[]).expect_code(0);
    let remote = Pipeline::new(&input, format!("s3://{bucket}/out/"));
    let file = remote.write(&dir.path().join("s3.toml"));
    let endpoint = server.endpoint();
    let run = run_s3(endpoint, &file, &[], dir.path());
    run.expect_code(0);
    assert!(
        run.stdout.contains("object storage: "),
        "{}",
        run.describe()
    );
    let out = download(server, &bucket, "out/", &dir.path().join("s3"));
    assert_eq!(sorted_rows(&out), sorted_rows(&local.output));
    assert_eq!(read_output(&out).len(), SAMPLE_ROWS);
    assert!(out.join("_SUCCESS").is_file());
    let report = read_report(&out);
    assert!(
        report["store_requests"]["requests"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert!(!report.to_string().contains("secret"), "{report}");
    let locks: Vec<String> = server.list(&bucket, "out/_progress/lock");
    assert!(locks.is_empty(), "a finished run leaves no lock: {locks:?}");
    // The rerun finds it complete; check and inspect read the bucket too.
    let again = run_s3(endpoint, &file, &[], dir.path());
    again.expect_code(0);
    assert!(
        again.stderr.contains("already complete"),
        "{}",
        again.describe()
    );
    let check = run_command(
        &mut command(endpoint, &["check", file.to_str().unwrap()]),
        dir.path(),
    );
    check.expect_code(0);
    let url = input.to_str().unwrap();
    let inspect = run_command(&mut command(endpoint, &["inspect", url]), dir.path());
    inspect.expect_code(0);
    assert!(inspect.stdout.contains("2000"), "{}", inspect.describe());
}

/// A slowed pipeline from `input` into `s3://bucket/prefix/`.
pub(crate) fn slowed_into(input: &Path, bucket: &str, prefix: &str) -> Pipeline {
    let mut p = slowed(input, Path::new(&format!("s3://{bucket}/{prefix}/")));
    p.storage_extra.push("lock_lease_s = 3".into());
    p
}

/// A completed run's output under `prefix`, downloaded, checked against
/// the uninterrupted run; its report.
pub(crate) fn assert_complete_in_bucket(
    server: &S3Server,
    bucket: &str,
    prefix: &str,
    reference: &Reference,
    run: &RunResult,
    dir: &Path,
) -> serde_json::Value {
    let out = download(server, bucket, &format!("{prefix}/"), &dir.join(prefix));
    let downloaded = RunResult {
        code: run.code,
        stdout: run.stdout.clone(),
        stderr: run.stderr.clone(),
        out_dir: out.clone(),
    };
    reference.assert_complete(&downloaded);
    read_report(&out)
}

#[test]
fn runs_writing_to_s3_killed_at_random_moments_resume_with_no_partial_object_ever_visible() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("kills");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 600);
    let input = upload_input(server, &bucket, &local);
    let started = Instant::now();
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    let duration = started.elapsed();
    let mut moments = Moments::seeded();
    let (stop, mut resumed) = (AtomicBool::new(false), 0);
    let (checked, partial) = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| watch(server, &bucket, "", &stop));
        for trial in 0..3 {
            let prefix = format!("trial-{trial}");
            let file = slowed_into(&input, &bucket, &prefix)
                .write(&dir.path().join(format!("{prefix}.toml")));
            let mut child = spawn_s3(server.endpoint(), &file, &[]);
            // Trial 0 waits for a committed part, so one kill at least
            // lands after a commit whatever the random moments.
            let after = duration.mul_f64(0.2 + 0.8 * moments.next());
            let parts = || trial == 0 && committed_in_bucket(server, &bucket, &prefix, "part-");
            let deadline = Instant::now() + if trial == 0 { duration * 3 } else { after };
            let killed = kill_when(&mut child, deadline, parts);
            let committed = server.list(&bucket, &format!("{prefix}/part-")).len();
            eprintln!(
                "trial {trial}: killed after {after:?} (running: {killed}), {committed} parts"
            );
            let rerun = run_s3(server.endpoint(), &file, &[], dir.path());
            let report =
                assert_complete_in_bucket(server, &bucket, &prefix, &reference, &rerun, dir.path());
            if killed && report_u64(&report, "rows_resumed") > 0 {
                resumed += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        watcher.join().unwrap()
    });
    assert!(resumed >= 1, "no rerun resumed committed rows");
    assert!(checked > 10, "the watcher saw only {checked} objects");
    assert!(
        partial.is_empty(),
        "objects not whole under final names: {partial:?}"
    );
}

#[test]
fn three_shards_into_one_prefix_with_one_killed_give_one_processs_output() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("shards");
    let dir = tmp();
    let local = rowgroups_input(dir.path(), 360, 20);
    let input = upload_input(server, &bucket, &local);
    let reference = Reference::of(&slowed(&local, &dir.path().join("single")), &local);
    let file = slowed_into(&input, &bucket, "sharded").write(&dir.path().join("sharded.toml"));
    let mut shards: Vec<Child> = (0..3)
        .map(|i| spawn_s3(server.endpoint(), &file, &["--shard", &format!("{i}/3")]))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    let killed = kill_when(&mut shards[1], deadline, || {
        committed_in_bucket(server, &bucket, "sharded", "part-s001of003-")
    });
    assert!(killed, "shard 1 finished before it could be killed");
    for (i, shard) in shards.into_iter().enumerate().filter(|(i, _)| *i != 1) {
        let output = shard.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "shard {i}: {stderr}");
    }
    assert!(
        server.list(&bucket, "sharded/_SUCCESS").is_empty(),
        "_SUCCESS while shard 1 is not done"
    );
    let rerun = run_s3(server.endpoint(), &file, &["--shard", "1/3"], dir.path());
    let report =
        assert_complete_in_bucket(server, &bucket, "sharded", &reference, &rerun, dir.path());
    assert_eq!(report_u64(&report, "rows_in"), 360, "{report}");
    assert!(report_u64(&report, "rows_resumed") > 0, "{report}");
}

#[test]
fn a_tenth_of_requests_failing_or_reset_costs_retries_not_rows() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("faults");
    let dir = tmp();
    let local = rowgroups_input(dir.path(), 400, 20);
    let input = upload_input(server, &bucket, &local);
    let mut pipeline = Pipeline::new(&local, dir.path().join("reference"));
    pipeline.rows_per_file = Some(50);
    let reference = Reference::of(&pipeline, &local);
    let rates = FaultRates {
        fail: 0.05,
        reset: 0.05,
        ..FaultRates::default()
    };
    let proxy = FaultProxy::start_seeded(server.port(), rates, 7);
    pipeline.input = input.clone();
    pipeline.output = PathBuf::from(format!("s3://{bucket}/out/"));
    let file = pipeline.write(&dir.path().join("faults.toml"));
    let metrics = dir.path().join("metrics.prom");
    let metrics_arg = format!("--metrics-file={}", metrics.display());
    let run = run_s3(proxy.endpoint(), &file, &[&metrics_arg], dir.path());
    let stats = proxy.stats();
    let report = assert_complete_in_bucket(server, &bucket, "out", &reference, &run, dir.path());
    assert!(stats.fail + stats.reset > 0, "{stats:?}");
    let failed = report["store_requests"]["failed"].as_u64().unwrap();
    assert!(failed > 0, "retries not counted: {report}");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("segpredict_store_request_failures_total"))
        .unwrap_or_else(|| panic!("no failures metric: {text}"));
    assert!(!line.ends_with(" 0"), "{line}");
}

#[test]
fn failures_that_outlast_the_retries_exit_retryable_and_the_rerun_resumes() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("outlast");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 600);
    let input = upload_input(server, &bucket, &local);
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    let proxy = FaultProxy::start_seeded(server.port(), FaultRates::default(), 11);
    let mut pipeline = slowed_into(&input, &bucket, "out");
    pipeline
        .storage_extra
        .extend(["max_retries = 1".into(), "retry_timeout_s = 2".into()]);
    let file = pipeline.write(&dir.path().join("outlast.toml"));
    let mut child = spawn_s3(proxy.endpoint(), &file, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let committed = wait_until(&mut child, deadline, || {
        committed_in_bucket(server, &bucket, "out", "part-")
    });
    assert!(committed, "the run ended before committing a part");
    // Every request fails from now on: more than any retry can outlast.
    proxy.set_rates(FaultRates {
        fail: 1.0,
        ..FaultRates::default()
    });
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "retryable exit expected: {stderr}"
    );
    proxy.set_rates(FaultRates::default());
    let rerun = run_s3(proxy.endpoint(), &file, &[], dir.path());
    let report = assert_complete_in_bucket(server, &bucket, "out", &reference, &rerun, dir.path());
    assert!(report_u64(&report, "rows_resumed") > 0, "{report}");
}

/// A lease object as another writer's process leaves it.
fn lease(holder: &str, expires_ms: u128) -> Vec<u8> {
    let text = format!(r#"{{"token":"0badc0de","holder":"{holder}","expires_ms":{expires_ms}}}"#);
    text.into_bytes()
}

#[test]
fn a_live_lease_in_the_bucket_refuses_run_and_check_naming_the_holder_and_an_expired_one_is_taken_over(
) {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("lease");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 40);
    let input = upload_input(server, &bucket, &local);
    let file =
        Pipeline::new(&input, format!("s3://{bucket}/out/")).write(&dir.path().join("p.toml"));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let key = "out/_progress/lock-s000of001";
    server.put(
        &bucket,
        key,
        &lease("pid 999 on nightly-7, since 1", now_ms + 600_000),
    );
    let endpoint = server.endpoint();
    let checked = run_command(
        &mut command(endpoint, &["check", file.to_str().unwrap()]),
        dir.path(),
    );
    let ran = run_command(
        &mut command(endpoint, &["run", file.to_str().unwrap()]),
        dir.path(),
    );
    for result in [&checked, &ran] {
        assert_eq!(result.code, 1, "{}", result.describe());
        for said in ["pid 999 on nightly-7", "its lease expires 20", "(in 9 min)"] {
            assert!(
                result.stderr.contains(said),
                "{said}: {}",
                result.describe()
            );
        }
        assert!(
            result.stderr.contains("--wait-for-lock"),
            "{}",
            result.describe()
        );
    }
    assert!(
        server.list(&bucket, "out/_run.json").is_empty(),
        "the refused run wrote its manifest"
    );
    // Expired: its holder stopped renewing it a while ago.
    server.put(
        &bucket,
        key,
        &lease("pid 999 on nightly-7, since 1", now_ms - 1_000),
    );
    let taken = run_s3(endpoint, &file, &[], dir.path());
    taken.expect_code(0);
    assert_eq!(
        read_output(&download(server, &bucket, "out/", &dir.path().join("out"))).len(),
        40
    );
    assert!(
        server.list(&bucket, key).is_empty(),
        "the lease was not released"
    );
}
