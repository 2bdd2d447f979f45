//! The object-store scenarios, each written once against
//! [`TestBucket`] and run by thin `#[test]`s for each store: S3 against
//! moto (`objects.rs`, `fenced.rs`), Azure Blob against Azurite
//! (`azure.rs`). The store conformance suite; the sample read from and
//! written to a bucket equals the local run row for row; runs killed at
//! random moments resume, with no partial object ever visible under a
//! final name; three shards share a prefix with one killed; a live lease
//! refuses a second run naming its holder until `--wait-for-lock`, and an
//! expired one is taken over; a tenth of requests failing or reset costs
//! retries, not rows; failures that outlast the retries exit retryable; a
//! part PUT landing after its writer was killed never counts; a writer
//! stopped past its lease is fenced; two writers of one hostname and PID
//! never share the lease.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use segpredict_checkpoint::store::{conformance, BucketStore};
use segpredict_storage::ObjectUrl;
use tempfile::TempDir;

use crate::util::*;

/// A new bucket holding the first `rows` of the sample as its input (the
/// URL returned), and the slowed pipeline's uninterrupted run of them on
/// local disk (the reference) and how long it took.
fn slowed_in_bucket<'s>(
    store: &'s dyn TestBucket,
    hint: &str,
    rows: usize,
) -> (Bucket<'s>, TempDir, PathBuf, Reference, Duration) {
    let bucket = Bucket::new(store, hint);
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", rows);
    let input = bucket.upload_input(&local);
    let started = Instant::now();
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    (bucket, dir, input, reference, started.elapsed())
}

/// The checkpoint crate's store conformance suite, in this process,
/// against a prefix of a new bucket, which it leaves empty.
pub(crate) fn conformance_suite(store: &dyn TestBucket) {
    let bucket = Bucket::new(store, "conformance");
    let options = store.store_options();
    let options: Vec<(&str, &str)> = options.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let url = ObjectUrl::with_options(&bucket.url("out"), &options).unwrap();
    conformance::run_all(&BucketStore::new(url, Duration::from_secs(60)));
    assert!(bucket.list("").is_empty());
}

/// The sample read from and written to a bucket equals the local run row
/// for row; the report counts requests and shows no credential; no lock
/// is left; the rerun finds it complete; `check` and `inspect` read the
/// bucket too.
pub(crate) fn sample_round_trip(store: &dyn TestBucket) {
    let bucket = Bucket::new(store, "sample");
    let dir = tmp();
    let input = bucket.upload_input(&sample());
    let local = Pipeline::new(sample(), dir.path().join("local"));
    local.run(&[]).expect_code(0);
    let remote = Pipeline::new(&input, bucket.url("out/"));
    let file = remote.write(&dir.path().join("remote.toml"));
    let endpoint = bucket.endpoint();
    let run = bucket.run(endpoint, &file, &[], dir.path());
    run.expect_code(0);
    assert!(
        run.stdout.contains("object storage: "),
        "{}",
        run.describe()
    );
    let out = bucket.download("out/", &dir.path().join("remote"));
    assert_eq!(sorted_rows(&out), sorted_rows(&local.output));
    assert_eq!(read_output(&out).len(), SAMPLE_ROWS);
    assert!(out.join("_SUCCESS").is_file());
    let report = read_report(&out);
    assert!(
        report_u64(&report["store_requests"], "requests") > 0,
        "{report}"
    );
    let text = report.to_string();
    for marker in store.leak_markers() {
        assert!(!text.contains(marker), "{marker} in the report: {report}");
    }
    let locks = bucket.list("out/_progress/lock");
    assert!(locks.is_empty(), "a finished run leaves no lock: {locks:?}");
    let again = bucket.run(endpoint, &file, &[], dir.path());
    again.expect_code(0);
    assert!(
        again.stderr.contains("already complete"),
        "{}",
        again.describe()
    );
    let file_arg = file.to_str().unwrap();
    let check = run_command(
        &mut bucket.command(endpoint, &["check", file_arg]),
        dir.path(),
    );
    check.expect_code(0);
    let url = input.to_str().unwrap();
    let inspect = run_command(&mut bucket.command(endpoint, &["inspect", url]), dir.path());
    inspect.expect_code(0);
    assert!(inspect.stdout.contains("2000"), "{}", inspect.describe());
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
fn watch(bucket: &Bucket, prefix: &str, stop: &AtomicBool) -> (usize, Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    let mut partial = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        for key in bucket.list(prefix) {
            if !seen.insert(key.clone()) {
                continue;
            }
            // Removed between listing and reading (a replaced attempt's): gone, not partial.
            if let Some(body) = bucket.try_get(&key) {
                if !is_whole(&key, &body) {
                    partial.push(key);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (seen.len(), partial)
}

/// Runs killed at random moments resume to the uninterrupted output,
/// while a watcher lists the bucket and reads every object under a final
/// name whole.
pub(crate) fn kills_at_random_moments_resume(store: &dyn TestBucket) {
    let (bucket, dir, input, reference, duration) = slowed_in_bucket(store, "kills", 600);
    let mut moments = Moments::seeded();
    let (stop, mut resumed) = (AtomicBool::new(false), 0);
    let (checked, partial) = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| watch(&bucket, "", &stop));
        for trial in 0..3 {
            let prefix = format!("trial-{trial}");
            let file = bucket
                .slowed_into(&input, &prefix)
                .write(&dir.path().join(format!("{prefix}.toml")));
            let mut child = bucket.spawn(bucket.endpoint(), &file, &[]);
            // Trial 0 waits for a committed part, so one kill at least
            // lands after a commit whatever the random moments.
            let after = duration.mul_f64(0.2 + 0.8 * moments.next());
            let parts = || trial == 0 && bucket.committed(&prefix, "part-");
            let deadline = Instant::now() + if trial == 0 { duration * 3 } else { after };
            let killed = kill_when(&mut child, deadline, parts);
            let committed = bucket.list(&format!("{prefix}/part-")).len();
            eprintln!(
                "trial {trial}: killed after {after:?} (running: {killed}), {committed} parts"
            );
            let rerun = bucket.run(bucket.endpoint(), &file, &[], dir.path());
            let report = bucket.assert_complete(&prefix, &reference, &rerun, dir.path());
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

/// Three shards write one prefix; shard 1 is killed after a commit; the
/// others finish without `_SUCCESS`, and shard 1's rerun completes the
/// output as one process's, resuming what it committed.
pub(crate) fn three_shards_one_killed(store: &dyn TestBucket) {
    let bucket = Bucket::new(store, "shards");
    let dir = tmp();
    let local = rowgroups_input(dir.path(), 360, 20);
    let input = bucket.upload_input(&local);
    let reference = Reference::of(&slowed(&local, &dir.path().join("single")), &local);
    let mut pipeline = bucket.slowed_into(&input, "sharded");
    // Six parts a shard: killed at its first commit, shard 1 has most of
    // its work left (with two, a loaded machine let it finish in between).
    pipeline.rows_per_file = Some(20);
    let file = pipeline.write(&dir.path().join("sharded.toml"));
    let endpoint = bucket.endpoint();
    let mut shards: Vec<Child> = (0..3)
        .map(|i| bucket.spawn(endpoint, &file, &["--shard", &format!("{i}/3")]))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    let shard_1_log = "sharded/_progress/log/s001of003/";
    let killed = kill_when(&mut shards[1], deadline, || {
        recorded_files(&bucket.log_records(shard_1_log))
            .iter()
            .any(|(key, _, _)| key.starts_with("part-s001of003-"))
    });
    assert!(killed, "shard 1 finished before it could be killed");
    let kinds: Vec<String> = bucket
        .log_records(shard_1_log)
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        !kinds.iter().any(|k| k == "done"),
        "shard 1 was done before the kill landed: {kinds:?}"
    );
    for (i, shard) in shards.into_iter().enumerate().filter(|(i, _)| *i != 1) {
        let (code, stderr) = finished(shard);
        assert_eq!(code, Some(0), "shard {i}: {stderr}");
    }
    assert!(
        bucket.list("sharded/_SUCCESS").is_empty(),
        "_SUCCESS while shard 1 is not done"
    );
    let rerun = bucket.run(endpoint, &file, &["--shard", "1/3"], dir.path());
    let report = bucket.assert_complete("sharded", &reference, &rerun, dir.path());
    assert_eq!(report_u64(&report, "rows_in"), 360, "{report}");
    assert!(report_u64(&report, "rows_resumed") > 0, "{report}");
}

/// A running writer's lease refuses a second run, which names the lease's
/// expiry and `--wait-for-lock`; with it, the second run waits for the
/// first to finish and finds the output complete, nothing twice.
pub(crate) fn a_running_writers_lease_refuses_a_second_run(store: &dyn TestBucket) {
    let (bucket, dir, input, reference, _) = slowed_in_bucket(store, "lease", 300);
    let file = bucket
        .slowed_into(&input, "out")
        .write(&dir.path().join("p.toml"));
    let endpoint = bucket.endpoint();
    let mut first = bucket.spawn(endpoint, &file, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    assert!(
        wait_until(&mut first, deadline, || {
            !bucket.list("out/_progress/lock").is_empty()
        }),
        "the first run never took its lease"
    );
    let file_arg = file.to_str().unwrap();
    let refused = run_command(
        &mut bucket.command(endpoint, &["run", file_arg]),
        dir.path(),
    );
    assert_eq!(refused.code, 1, "{}", refused.describe());
    for said in ["its lease expires 20", "--wait-for-lock"] {
        assert!(
            refused.stderr.contains(said),
            "{said}: {}",
            refused.describe()
        );
    }
    // Waiting, the second run starts once the first is done: complete, nothing twice.
    let waited = bucket.run(endpoint, &file, &[], dir.path());
    let (code, stderr) = finished(first);
    assert_eq!(code, Some(0), "{stderr}");
    waited.expect_code(0);
    bucket.assert_complete("out", &reference, &waited, dir.path());
}

/// A lease object as another writer's process leaves it.
fn lease(holder: &str, expires_ms: u128) -> Vec<u8> {
    let text = format!(r#"{{"token":"0badc0de","holder":"{holder}","expires_ms":{expires_ms}}}"#);
    text.into_bytes()
}

/// Another host's live lease refuses `run` and `check`, naming its holder,
/// when it expires and `--wait-for-lock`, before anything is written; once
/// expired, a run takes it over and releases it.
pub(crate) fn another_hosts_lease_refuses_then_is_taken_over(store: &dyn TestBucket) {
    let bucket = Bucket::new(store, "lease");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 40);
    let input = bucket.upload_input(&local);
    let file = Pipeline::new(&input, bucket.url("out/")).write(&dir.path().join("p.toml"));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let key = "out/_progress/lock-s000of001";
    bucket.put(
        key,
        &lease("pid 999 on nightly-7, since 1", now_ms + 600_000),
    );
    let endpoint = bucket.endpoint();
    let file_arg = file.to_str().unwrap();
    let checked = run_command(
        &mut bucket.command(endpoint, &["check", file_arg]),
        dir.path(),
    );
    let ran = run_command(
        &mut bucket.command(endpoint, &["run", file_arg]),
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
        bucket.list("out/_run.json").is_empty(),
        "the refused run wrote its manifest"
    );
    // Expired: its holder stopped renewing it a while ago.
    bucket.put(key, &lease("pid 999 on nightly-7, since 1", now_ms - 1_000));
    let taken = bucket.run(endpoint, &file, &[], dir.path());
    taken.expect_code(0);
    assert_eq!(
        read_output(&bucket.download("out/", &dir.path().join("out"))).len(),
        40
    );
    assert!(bucket.list(key).is_empty(), "the lease was not released");
}

/// Through the fault proxy, a tenth of requests failing (503) or reset:
/// the output is complete, the retries counted in the report and in the
/// Prometheus metrics.
pub(crate) fn a_tenth_of_requests_failing_costs_retries_not_rows(store: &dyn TestBucket) {
    let bucket = Bucket::new(store, "faults");
    let dir = tmp();
    let local = rowgroups_input(dir.path(), 400, 20);
    let input = bucket.upload_input(&local);
    let mut pipeline = Pipeline::new(&local, dir.path().join("reference"));
    pipeline.rows_per_file = Some(50);
    let reference = Reference::of(&pipeline, &local);
    let rates = FaultRates {
        fail: 0.05,
        reset: 0.05,
        ..FaultRates::default()
    };
    let proxy = FaultProxy::start_seeded(store.port(), rates, 7);
    pipeline.input = input;
    pipeline.output = PathBuf::from(bucket.url("out/"));
    let file = pipeline.write(&dir.path().join("faults.toml"));
    let metrics = dir.path().join("metrics.prom");
    let metrics_arg = format!("--metrics-file={}", metrics.display());
    let run = bucket.run(proxy.endpoint(), &file, &[&metrics_arg], dir.path());
    let stats = proxy.stats();
    let report = bucket.assert_complete("out", &reference, &run, dir.path());
    assert!(stats.fail + stats.reset > 0, "{stats:?}");
    let failed = report_u64(&report["store_requests"], "failed");
    assert!(failed > 0, "retries not counted: {report}");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("segpredict_store_request_failures_total"))
        .unwrap_or_else(|| panic!("no failures metric: {text}"));
    assert!(!line.ends_with(" 0"), "{line}");
}

/// A bucket (container) that does not exist, as the input and as the
/// output: exit 2 (permanent) at once, one line naming the URL and the
/// store's code, no XML body; a few requests, not retries for
/// `retry_timeout_s` (Azure answers a listing of a missing container 404
/// in a generic error, which once read as a server failure kept a run
/// retrying for 3 minutes).
pub(crate) fn a_missing_bucket_fails_at_once_in_one_line(store: &dyn TestBucket) {
    let bucket = Bucket::new(store, "missing");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 40);
    let missing = format!("{}://no-such-{}", store.scheme(), std::process::id());
    let code = match store.scheme() {
        "az" => "ContainerNotFound",
        _ => "NoSuchBucket",
    };
    for (what, input, output) in [
        (
            "input",
            format!("{missing}/in/"),
            dir.path().join("out").display().to_string(),
        ),
        (
            "output",
            local.display().to_string(),
            format!("{missing}/out/"),
        ),
    ] {
        let proxy = FaultProxy::start(store.port(), FaultRates::default());
        let file = Pipeline::new(&input, &output).write(&dir.path().join(format!("{what}.toml")));
        let args = ["run", file.to_str().unwrap()];
        let run = run_command(
            &mut bucket.command(proxy.endpoint(), &args),
            &dir.path().join(what),
        );
        let line = expect_one_line_error(&run);
        assert!(
            line.contains(&format!("{missing}/")) && line.contains(code) && !line.contains("<?xml"),
            "{what}: {line}"
        );
        let requests = proxy.stats().requests;
        assert!(
            requests <= 10,
            "{what}: {requests} requests, retried: {line}"
        );
    }
}

/// Every request failing after a commit, for longer than the retries
/// last: the run exits 1 (retryable), and the rerun resumes.
pub(crate) fn failures_outlasting_the_retries_exit_retryable(store: &dyn TestBucket) {
    let (bucket, dir, input, reference, _) = slowed_in_bucket(store, "outlast", 600);
    let proxy = FaultProxy::start_seeded(store.port(), FaultRates::default(), 11);
    let mut pipeline = bucket.slowed_into(&input, "out");
    pipeline
        .storage_extra
        .extend(["max_retries = 1".into(), "retry_timeout_s = 2".into()]);
    let file = pipeline.write(&dir.path().join("outlast.toml"));
    let mut child = bucket.spawn(proxy.endpoint(), &file, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let committed = wait_until(&mut child, deadline, || bucket.committed("out", "part-"));
    assert!(committed, "the run ended before committing a part");
    // Every request fails from now on: more than any retry can outlast.
    proxy.set_rates(FaultRates {
        fail: 1.0,
        ..FaultRates::default()
    });
    let (code, stderr) = finished(child);
    assert_eq!(code, Some(1), "retryable exit expected: {stderr}");
    proxy.set_rates(FaultRates::default());
    let rerun = bucket.run(proxy.endpoint(), &file, &[], dir.path());
    let report = bucket.assert_complete("out", &reference, &rerun, dir.path());
    assert!(report_u64(&report, "rows_resumed") > 0, "{report}");
}

/// Every part PUT of a first run held 25 s by the proxy, the run killed
/// meanwhile: the rerun ends before the held PUT lands; the late part is
/// never counted, and a plain rerun ends exact and removes it.
pub(crate) fn a_late_part_put_never_counts(store: &dyn TestBucket) {
    let (bucket, dir, input, reference, _) = slowed_in_bucket(store, "zombie-put", 300);
    // Every part PUT of the first run is held 25 s, then lands anyway.
    let held = FaultRates {
        hold: 1.0,
        hold_seconds: 25.0,
        methods: "PUT",
        path_contains: "/out/part-",
        ..FaultRates::default()
    };
    let proxy = FaultProxy::start_seeded(store.port(), held, 3);
    let file = bucket
        .slowed_into(&input, "out")
        .write(&dir.path().join("p.toml"));
    let mut first = bucket.spawn(proxy.endpoint(), &file, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    assert!(
        kill_when(&mut first, deadline, || proxy.stats().hold > 0),
        "the first run ended before a part PUT was held"
    );
    let started = Instant::now();
    let rerun = bucket.run(bucket.endpoint(), &file, &[], dir.path());
    rerun.expect_code(0);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the rerun must end before the held PUT lands"
    );
    wait_for("the held PUT to land", Duration::from_secs(40), || {
        proxy.stats().held_landed > 0
    });
    let strays = bucket.list("out/part-a001-");
    assert!(!strays.is_empty(), "no late part landed");
    // The stray is never counted: a plain rerun ends exact and removes it.
    let again = bucket.run(bucket.endpoint(), &file, &[], dir.path());
    bucket.assert_complete("out", &reference, &again, dir.path());
    let left = bucket.list("out/part-a001-");
    assert!(
        left.is_empty(),
        "the stray part stayed: {left:?} of {strays:?}"
    );
}

/// A writer stopped (SIGSTOP) past its 1.5 s lease while a newer attempt
/// takes over: resumed, it stops retryably naming why, never with an
/// internal error; the newer attempt finishes, with no false rejects.
pub(crate) fn a_writer_stopped_past_its_lease_is_fenced(store: &dyn TestBucket) {
    let (bucket, dir, input, reference, _) = slowed_in_bucket(store, "stalled", 600);
    let mut pipeline = bucket.slowed_into(&input, "out");
    pipeline.storage_extra = vec!["lock_lease_s = 1.5".into()];
    let file = pipeline.write(&dir.path().join("p.toml"));
    let endpoint = bucket.endpoint();
    let mut stale = bucket.spawn(endpoint, &file, &[]);
    let committed = wait_until(&mut stale, Instant::now() + Duration::from_secs(60), || {
        !bucket.list("out/part-a001-").is_empty()
    });
    assert!(committed, "the first run ended before committing a part");
    signal(&stale, libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(2500));
    let newer = bucket.spawn(endpoint, &file, &["--wait-for-lock=30s"]);
    wait_for(
        "the second attempt's first part",
        Duration::from_secs(60),
        || !bucket.list("out/part-a002-").is_empty(),
    );
    signal(&stale, libc::SIGCONT);
    let (code, stderr) = finished(stale);
    assert_eq!(
        code,
        Some(1),
        "the stale writer must stop retryably: {stderr}"
    );
    assert!(
        stderr.contains("lost the shard's lock") || stderr.contains("superseded by attempt 2"),
        "{stderr}"
    );
    assert!(!stderr.contains("INTERNAL ASSERT"), "{stderr}");
    let (code, stderr) = finished(newer);
    assert_eq!(code, Some(0), "{stderr}");
    let again = bucket.run(endpoint, &file, &[], dir.path());
    let report = bucket.assert_complete("out", &reference, &again, dir.path());
    assert_eq!(
        report_u64(&report, "rows_rejected"),
        0,
        "false rejects: {report}"
    );
}

/// `segpredict run FILE ARGS` in a PID namespace of its own (and a fresh
/// /proc), on this machine's hostname: as two pods of one Deployment with
/// hostNetwork, or two containers, see each other.
fn spawn_in_own_pid_namespace(bucket: &Bucket, file: &Path, args: &[&str]) -> Child {
    let segpredict = bucket.command(bucket.endpoint(), &[]);
    let mut unshare = Command::new("unshare");
    unshare.args(["--pid", "--fork", "--mount-proc", bin(), "run"]);
    unshare.arg(file).args(args);
    unshare.envs(segpredict.get_envs().filter_map(|(k, v)| Some((k, v?))));
    unshare
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare")
}

/// Two writers with one hostname and, in their PID namespaces, one
/// process id: the second is refused the live lease, a third waits, and
/// the output is complete.
pub(crate) fn one_hostname_and_pid_never_share_the_lease(store: &dyn TestBucket) {
    let (bucket, dir, input, reference, _) = slowed_in_bucket(store, "one-host", 600);
    let file = bucket
        .slowed_into(&input, "out")
        .write(&dir.path().join("p.toml"));
    let mut first = spawn_in_own_pid_namespace(&bucket, &file, &[]);
    let committed = wait_until(&mut first, Instant::now() + Duration::from_secs(60), || {
        !bucket.list("out/part-").is_empty()
    });
    assert!(committed, "the first run ended before committing a part");
    // The same hostname and, in its namespace, the same process id.
    let refused = spawn_in_own_pid_namespace(&bucket, &file, &[]);
    let (code, stderr) = finished(refused);
    assert_eq!(code, Some(1), "a live lease must be refused: {stderr}");
    assert!(stderr.contains("its lease expires"), "{stderr}");
    let waiting = spawn_in_own_pid_namespace(&bucket, &file, &["--wait-for-lock=120s"]);
    let (code, stderr) = finished(first);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = finished(waiting);
    assert_eq!(
        code,
        Some(0),
        "the waiting run finds the run complete: {stderr}"
    );
    let again = bucket.run(bucket.endpoint(), &file, &[], dir.path());
    bucket.assert_complete("out", &reference, &again, dir.path());
}
