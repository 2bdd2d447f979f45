//! Azure Blob Storage end to end, against Azurite on loopback
//! (`util::Azurite`), the same cases as S3's (`objects.rs`): the store
//! conformance suite (and the same suite against moto's S3 server); the
//! sample read from and written to `az://` equals the local run row for
//! row; runs killed at random moments resume; three shards share a prefix
//! with one killed; a live lease refuses a second run naming its holder;
//! a tenth of requests failing or reset through the fault proxy costs
//! retries, not rows; a part PUT landing after its writer was killed and a
//! writer stopped past its lease are fenced (as `fenced.rs` on S3).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use segpredict_checkpoint::store::{conformance, BucketStore};
use segpredict_storage::ObjectUrl;

use crate::util::*;

/// `segpredict ARGS` reaching Azurite (or the fault proxy) at `endpoint`.
fn command(endpoint: &str, args: &[&str]) -> Command {
    let mut command = Command::new(bin());
    command.args(args);
    configure_azure(quiet_env(&mut command), endpoint);
    command
}

/// `segpredict run FILE ARGS`, waiting for a lease a killed run left.
fn run_az(endpoint: &str, file: &Path, args: &[&str], out: &Path) -> RunResult {
    let mut all = vec!["run", file.to_str().unwrap(), "--wait-for-lock=30s"];
    all.extend_from_slice(args);
    run_command(&mut command(endpoint, &all), out)
}

fn spawn_az(endpoint: &str, file: &Path, args: &[&str]) -> Child {
    let mut all = vec!["run", file.to_str().unwrap()];
    all.extend_from_slice(args);
    command(endpoint, &all)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting segpredict")
}

/// The input uploaded to `container` under `in/`; its URL.
fn upload_input(azurite: &Azurite, container: &str, input: &Path) -> PathBuf {
    azurite.put(
        container,
        "in/input.parquet",
        &std::fs::read(input).unwrap(),
    );
    PathBuf::from(format!("az://{container}/in/"))
}

/// Whether a commit record under `out` names a part starting with `part`.
fn committed_in_container(azurite: &Azurite, container: &str, out: &str, part: &str) -> bool {
    let records: Vec<serde_json::Value> = azurite
        .list(container, &format!("{out}/_progress/log/"))
        .iter()
        .filter(|key| !key.rsplit('/').next().unwrap_or_default().starts_with('.'))
        .filter_map(|key| serde_json::from_slice(&azurite.get(container, key)).ok())
        .collect();
    recorded_files(&records)
        .iter()
        .any(|(key, _, _)| key.starts_with(part))
}

/// A slowed pipeline from `input` into `az://container/prefix/`, 3 s leases.
fn slowed_into(input: &Path, container: &str, prefix: &str) -> Pipeline {
    let mut p = slowed(input, Path::new(&format!("az://{container}/{prefix}/")));
    p.storage_extra.push("lock_lease_s = 3".into());
    p
}

/// The output under `prefix`, downloaded and checked against `reference`.
fn assert_complete_in_container(
    azurite: &Azurite,
    container: &str,
    prefix: &str,
    reference: &Reference,
    run: &RunResult,
    dir: &Path,
) -> serde_json::Value {
    let out = dir.join(prefix);
    std::fs::create_dir_all(&out).unwrap();
    azurite
        .client()
        .download(container, &format!("{prefix}/"), &out);
    let downloaded = RunResult {
        code: run.code,
        stdout: run.stdout.clone(),
        stderr: run.stderr.clone(),
        out_dir: out.clone(),
    };
    reference.assert_complete(&downloaded);
    read_report(&out)
}

/// The rows by id, their source file blanked (a path here, a URL there).
fn sorted_rows(dir: &Path) -> Vec<OutRow> {
    let mut rows = read_output(dir);
    rows.iter_mut().for_each(|r| r.source_file.clear());
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    rows
}

#[test]
fn azurites_shared_key_client_stores_lists_and_pages() {
    assert_eq!(base64_encode(b"segpredict"), "c2VncHJlZGljdA==");
    assert_eq!(base64_decode("c2VncHJlZGljdA=="), b"segpredict");
    assert_eq!(base64_decode(AZURITE_KEY).len(), 64);
    let azurite = Azurite::shared();
    let container = azurite.unique_container("harness");
    for key in ["out/a.parquet", "out/b b&c=d", "out/c/_SUCCESS", "outside"] {
        azurite.put(&container, key, key.as_bytes());
    }
    let listed = azurite.list(&container, "out/");
    assert_eq!(listed, ["out/a.parquet", "out/b b&c=d", "out/c/_SUCCESS"]);
    assert_eq!(azurite.get(&container, "out/b b&c=d"), b"out/b b&c=d");
    azurite.client().delete(&container, "outside");
    assert_eq!(azurite.list(&container, "").len(), 3);
}

#[test]
fn the_store_conformance_suite_passes_against_azurite() {
    let azurite = Azurite::shared();
    let container = azurite.unique_container("conformance");
    let endpoint = format!("{}/{AZURITE_ACCOUNT}", azurite.endpoint());
    let options = [
        ("azure_storage_account_name", AZURITE_ACCOUNT),
        ("azure_storage_account_key", AZURITE_KEY),
        ("azure_storage_endpoint", endpoint.as_str()),
        ("azure_allow_http", "true"),
    ];
    let url = ObjectUrl::with_options(&format!("az://{container}/out"), &options).unwrap();
    conformance::run_all(&BucketStore::new(url, Duration::from_secs(60)));
    assert!(azurite.list(&container, "").is_empty());
}

#[test]
fn the_store_conformance_suite_passes_against_the_s3_server() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("conformance");
    let options = [
        ("aws_endpoint", server.endpoint()),
        ("aws_access_key_id", S3_ACCESS_KEY),
        ("aws_secret_access_key", S3_SECRET_KEY),
        ("aws_region", S3_REGION),
        ("aws_allow_http", "true"),
    ];
    let url = ObjectUrl::with_options(&format!("s3://{bucket}/out"), &options).unwrap();
    conformance::run_all(&BucketStore::new(url, Duration::from_secs(60)));
    assert!(server.list(&bucket, "").is_empty());
}

#[test]
fn the_sample_read_from_and_written_to_azure_equals_the_local_run_row_for_row() {
    let azurite = Azurite::shared();
    let container = azurite.unique_container("sample");
    let dir = tmp();
    let input = upload_input(azurite, &container, &sample());
    let local = Pipeline::new(sample(), dir.path().join("local"));
    local.run(&[]).expect_code(0);
    let remote = Pipeline::new(&input, format!("az://{container}/out/"));
    let file = remote.write(&dir.path().join("az.toml"));
    let endpoint = azurite.endpoint();
    let run = run_az(endpoint, &file, &[], dir.path());
    run.expect_code(0);
    let out = dir.path().join("az");
    azurite.client().download(&container, "out/", &out);
    assert_eq!(sorted_rows(&out), sorted_rows(&local.output));
    assert_eq!(read_output(&out).len(), SAMPLE_ROWS);
    assert!(out.join("_SUCCESS").is_file());
    let report = read_report(&out);
    assert!(
        report_u64(&report["store_requests"], "requests") > 0,
        "{report}"
    );
    let text = report.to_string();
    assert!(
        !text.contains("Eby8vdM02"),
        "the key in the report: {report}"
    );
    let locks = azurite.list(&container, "out/_progress/lock");
    assert!(locks.is_empty(), "a finished run leaves no lock: {locks:?}");
    let again = run_az(endpoint, &file, &[], dir.path());
    again.expect_code(0);
    assert!(
        again.stderr.contains("already complete"),
        "{}",
        again.describe()
    );
    let file_arg = file.to_str().unwrap();
    run_command(&mut command(endpoint, &["check", file_arg]), dir.path()).expect_code(0);
    let url = input.to_str().unwrap();
    let inspect = run_command(&mut command(endpoint, &["inspect", url]), dir.path());
    inspect.expect_code(0);
    assert!(inspect.stdout.contains("2000"), "{}", inspect.describe());
}

#[test]
fn the_sample_through_abfss_urls_equals_the_local_run() {
    let azurite = Azurite::shared();
    let container = azurite.unique_container("abfss");
    let dir = tmp();
    let local_in = sample_subset(dir.path(), "in.parquet", 200);
    azurite.put(
        &container,
        "in/input.parquet",
        &std::fs::read(&local_in).unwrap(),
    );
    let local = Pipeline::new(&local_in, dir.path().join("local"));
    local.run(&[]).expect_code(0);
    let host = format!("{AZURITE_ACCOUNT}.dfs.core.windows.net");
    let input = format!("abfss://{container}@{host}/in/");
    let remote = Pipeline::new(
        Path::new(&input),
        format!("abfss://{container}@{host}/out/"),
    );
    let file = remote.write(&dir.path().join("abfss.toml"));
    run_az(azurite.endpoint(), &file, &[], dir.path()).expect_code(0);
    let out = dir.path().join("abfss");
    azurite.client().download(&container, "out/", &out);
    assert_eq!(sorted_rows(&out), sorted_rows(&local.output));
}

#[test]
fn runs_writing_to_azure_killed_at_random_moments_resume_exactly() {
    let azurite = Azurite::shared();
    let container = azurite.unique_container("kills");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 600);
    let input = upload_input(azurite, &container, &local);
    let started = Instant::now();
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    let duration = started.elapsed();
    let mut moments = Moments::seeded();
    let mut resumed = 0;
    for trial in 0..3 {
        let prefix = format!("trial-{trial}");
        let file = slowed_into(&input, &container, &prefix)
            .write(&dir.path().join(format!("{prefix}.toml")));
        let mut child = spawn_az(azurite.endpoint(), &file, &[]);
        let after = duration.mul_f64(0.2 + 0.8 * moments.next());
        let parts = || trial == 0 && committed_in_container(azurite, &container, &prefix, "part-");
        let deadline = Instant::now() + if trial == 0 { duration * 3 } else { after };
        let killed = kill_when(&mut child, deadline, parts);
        eprintln!("trial {trial}: killed after {after:?} (running: {killed})");
        let rerun = run_az(azurite.endpoint(), &file, &[], dir.path());
        let report = assert_complete_in_container(
            azurite,
            &container,
            &prefix,
            &reference,
            &rerun,
            dir.path(),
        );
        if killed && report_u64(&report, "rows_resumed") > 0 {
            resumed += 1;
        }
    }
    assert!(resumed >= 1, "no rerun resumed committed rows");
}

#[test]
fn three_shards_into_one_azure_prefix_with_one_killed_give_one_processs_output() {
    let azurite = Azurite::shared();
    let container = azurite.unique_container("shards");
    let dir = tmp();
    let local = rowgroups_input(dir.path(), 360, 20);
    let input = upload_input(azurite, &container, &local);
    let reference = Reference::of(&slowed(&local, &dir.path().join("single")), &local);
    let file = slowed_into(&input, &container, "sharded").write(&dir.path().join("sharded.toml"));
    let endpoint = azurite.endpoint();
    let mut shards: Vec<Child> = (0..3)
        .map(|i| spawn_az(endpoint, &file, &["--shard", &format!("{i}/3")]))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    let killed = kill_when(&mut shards[1], deadline, || {
        committed_in_container(azurite, &container, "sharded", "part-s001of003-")
    });
    assert!(killed, "shard 1 finished before it could be killed");
    for (i, shard) in shards.into_iter().enumerate().filter(|(i, _)| *i != 1) {
        let output = shard.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "shard {i}: {stderr}");
    }
    assert!(
        azurite.list(&container, "sharded/_SUCCESS").is_empty(),
        "_SUCCESS while shard 1 is not done"
    );
    let rerun = run_az(endpoint, &file, &["--shard", "1/3"], dir.path());
    let report = assert_complete_in_container(
        azurite,
        &container,
        "sharded",
        &reference,
        &rerun,
        dir.path(),
    );
    assert_eq!(report_u64(&report, "rows_in"), 360, "{report}");
    assert!(report_u64(&report, "rows_resumed") > 0, "{report}");
}

#[test]
fn a_live_azure_lease_refuses_a_second_run_naming_its_holder_until_wait_for_lock() {
    let azurite = Azurite::shared();
    let container = azurite.unique_container("lease");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 300);
    let input = upload_input(azurite, &container, &local);
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    let file = slowed_into(&input, &container, "out").write(&dir.path().join("p.toml"));
    let endpoint = azurite.endpoint();
    let mut first = spawn_az(endpoint, &file, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    assert!(
        wait_until(&mut first, deadline, || {
            !azurite.list(&container, "out/_progress/lock").is_empty()
        }),
        "the first run never took its lease"
    );
    let file_arg = file.to_str().unwrap();
    let refused = run_command(&mut command(endpoint, &["run", file_arg]), dir.path());
    assert_eq!(refused.code, 1, "{}", refused.describe());
    for said in ["its lease expires 20", "--wait-for-lock"] {
        assert!(
            refused.stderr.contains(said),
            "{said}: {}",
            refused.describe()
        );
    }
    // Waiting, the second run starts once the first is done: complete, nothing twice.
    let waited = run_az(endpoint, &file, &[], dir.path());
    let output = first.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    waited.expect_code(0);
    assert_complete_in_container(azurite, &container, "out", &reference, &waited, dir.path());
}

#[test]
fn a_tenth_of_azure_requests_failing_or_reset_costs_retries_not_rows() {
    let azurite = Azurite::shared();
    let container = azurite.unique_container("faults");
    let dir = tmp();
    let local = rowgroups_input(dir.path(), 400, 20);
    let input = upload_input(azurite, &container, &local);
    let mut pipeline = Pipeline::new(&local, dir.path().join("reference"));
    pipeline.rows_per_file = Some(50);
    let reference = Reference::of(&pipeline, &local);
    let rates = FaultRates {
        fail: 0.05,
        reset: 0.05,
        ..FaultRates::default()
    };
    let proxy = FaultProxy::start_seeded(azurite.port(), rates, 7);
    pipeline.input = input;
    pipeline.output = PathBuf::from(format!("az://{container}/out/"));
    let file = pipeline.write(&dir.path().join("faults.toml"));
    let run = run_az(proxy.endpoint(), &file, &[], dir.path());
    let stats = proxy.stats();
    let report =
        assert_complete_in_container(azurite, &container, "out", &reference, &run, dir.path());
    assert!(stats.fail + stats.reset > 0, "{stats:?}");
    assert!(
        report_u64(&report["store_requests"], "failed") > 0,
        "{report}"
    );
}

fn finished(child: Child) -> (Option<i32>, String) {
    let output = child.wait_with_output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn wait_for(what: &str, limit: Duration, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_azure_part_put_landing_after_its_writer_was_killed_never_counts() {
    let azurite = Azurite::shared();
    let container = azurite.unique_container("zombie-put");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 300);
    let input = upload_input(azurite, &container, &local);
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    let held = FaultRates {
        hold: 1.0,
        hold_seconds: 25.0,
        methods: "PUT",
        path_contains: "/out/part-",
        ..FaultRates::default()
    };
    let proxy = FaultProxy::start_seeded(azurite.port(), held, 3);
    let file = slowed_into(&input, &container, "out").write(&dir.path().join("p.toml"));
    let mut first = spawn_az(proxy.endpoint(), &file, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    assert!(
        kill_when(&mut first, deadline, || proxy.stats().hold > 0),
        "the first run ended before a part PUT was held"
    );
    let rerun = run_az(azurite.endpoint(), &file, &[], dir.path());
    rerun.expect_code(0);
    wait_for("the held PUT to land", Duration::from_secs(40), || {
        proxy.stats().held_landed > 0
    });
    let strays = azurite.list(&container, "out/part-a001-");
    assert!(!strays.is_empty(), "no late part landed");
    let again = run_az(azurite.endpoint(), &file, &[], dir.path());
    assert_complete_in_container(azurite, &container, "out", &reference, &again, dir.path());
    let left = azurite.list(&container, "out/part-a001-");
    assert!(left.is_empty(), "the stray part stayed: {left:?}");
}

#[test]
fn an_azure_writer_stopped_past_its_lease_is_fenced_and_stops() {
    let azurite = Azurite::shared();
    let container = azurite.unique_container("stalled");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 600);
    let input = upload_input(azurite, &container, &local);
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    let mut pipeline = slowed_into(&input, &container, "out");
    pipeline.storage_extra = vec!["lock_lease_s = 1.5".into()];
    let file = pipeline.write(&dir.path().join("p.toml"));
    let endpoint = azurite.endpoint();
    let mut stale = spawn_az(endpoint, &file, &[]);
    let committed = wait_until(&mut stale, Instant::now() + Duration::from_secs(60), || {
        !azurite.list(&container, "out/part-a001-").is_empty()
    });
    assert!(committed, "the first run ended before committing a part");
    // SAFETY: kill(2) on a child this test started and has not reaped.
    unsafe { libc::kill(stale.id() as libc::pid_t, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(2500));
    let newer = spawn_az(endpoint, &file, &["--wait-for-lock=30s"]);
    wait_for(
        "the second attempt's first part",
        Duration::from_secs(60),
        || !azurite.list(&container, "out/part-a002-").is_empty(),
    );
    // SAFETY: as above.
    unsafe { libc::kill(stale.id() as libc::pid_t, libc::SIGCONT) };
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
    let again = run_az(endpoint, &file, &[], dir.path());
    let report =
        assert_complete_in_container(azurite, &container, "out", &reference, &again, dir.path());
    assert_eq!(
        report_u64(&report, "rows_rejected"),
        0,
        "false rejects: {report}"
    );
}
