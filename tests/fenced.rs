//! Fenced commits: what a cluster does every week, against moto's S3
//! server and the fault proxy (and on local disk). A data file counts only
//! when a record of the shard's commit log names it, and a record of an
//! attempt counts only until a newer attempt's `begin` lands, so none of
//! these faults duplicates a row or leaves an output no rerun can finish.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::objects::{
    assert_complete_in_bucket, command, run_s3, slowed_into, spawn_s3, upload_input,
};
use crate::util::*;

fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) on a child this test started and has not reaped.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(sent, 0, "kill({}, {signal})", child.id());
}

fn wait_for(what: &str, limit: Duration, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn finished(child: Child) -> (Option<i32>, String) {
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

#[test]
fn a_part_put_landing_after_its_writer_was_killed_never_counts_and_a_rerun_removes_it() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("zombie-put");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 300);
    let input = upload_input(server, &bucket, &local);
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    // Every part PUT of the first run is held 25 s, then lands anyway.
    let held = FaultRates {
        hold: 1.0,
        hold_seconds: 25.0,
        methods: "PUT",
        path_contains: "/out/part-",
        ..FaultRates::default()
    };
    let proxy = FaultProxy::start_seeded(server.port(), held, 3);
    let file = slowed_into(&input, &bucket, "out").write(&dir.path().join("p.toml"));
    let mut first = spawn_s3(proxy.endpoint(), &file, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    assert!(
        kill_when(&mut first, deadline, || proxy.stats().hold > 0),
        "the first run ended before a part PUT was held"
    );
    let started = Instant::now();
    let rerun = run_s3(server.endpoint(), &file, &[], dir.path());
    rerun.expect_code(0);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the rerun must end before the held PUT lands"
    );
    wait_for("the held PUT to land", Duration::from_secs(40), || {
        proxy.stats().held_landed > 0
    });
    let strays = server.list(&bucket, "out/part-a001-");
    assert!(!strays.is_empty(), "no late part landed");
    // The stray is never counted: a plain rerun ends exact and removes it.
    let again = run_s3(server.endpoint(), &file, &[], dir.path());
    assert_complete_in_bucket(server, &bucket, "out", &reference, &again, dir.path());
    assert!(
        server.list(&bucket, "out/part-a001-").is_empty(),
        "the stray part stayed: {strays:?}"
    );
}

#[test]
fn a_writer_stopped_past_its_lease_is_fenced_and_stops_without_false_rejects() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("stalled");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 600);
    let input = upload_input(server, &bucket, &local);
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    let mut pipeline = slowed_into(&input, &bucket, "out");
    pipeline.storage_extra = vec!["lock_lease_s = 1.5".into()];
    let file = pipeline.write(&dir.path().join("p.toml"));
    let mut stale = spawn_s3(server.endpoint(), &file, &[]);
    let committed = wait_until(&mut stale, Instant::now() + Duration::from_secs(60), || {
        !server.list(&bucket, "out/part-a001-").is_empty()
    });
    assert!(committed, "the first run ended before committing a part");
    signal(&stale, libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(2500));
    let newer = spawn_s3(server.endpoint(), &file, &["--wait-for-lock=30s"]);
    wait_for(
        "the second attempt's first part",
        Duration::from_secs(60),
        || !server.list(&bucket, "out/part-a002-").is_empty(),
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
    let again = run_s3(server.endpoint(), &file, &[], dir.path());
    let report = assert_complete_in_bucket(server, &bucket, "out", &reference, &again, dir.path());
    assert_eq!(
        report_u64(&report, "rows_rejected"),
        0,
        "false rejects: {report}"
    );
}

#[test]
fn a_lock_file_removed_under_a_running_writer_lets_the_newer_attempt_fence_it() {
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 600);
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    let out = dir.path().join("out");
    let file = slowed(&local, &out).write(&dir.path().join("p.toml"));
    let mut older = spawn(&file, &[]);
    let committed = wait_until(&mut older, Instant::now() + Duration::from_secs(60), || {
        has_part(&out, "part-a001-")
    });
    assert!(committed, "the first run ended before committing a part");
    // An operator "cleans up" the lock; a second run starts at once.
    std::fs::remove_file(out.join("_progress/lock-s000of001")).unwrap();
    let newer = run_file(&file, &[], &out);
    let (code, stderr) = finished(older);
    assert_eq!(code, Some(1), "{stderr}");
    let line = error_lines(&stderr).join("\n");
    assert!(
        line.contains("superseded by attempt 2 (pid "),
        "the older writer must name the newer one: {stderr}"
    );
    newer.expect_code(0);
    reference.assert_complete(&run_file(&file, &[], &out));
}

/// `segpredict run FILE ARGS` in a PID namespace of its own (and a fresh
/// /proc), on this machine's hostname: as two pods of one Deployment with
/// hostNetwork, or two containers, see each other.
fn spawn_in_own_pid_namespace(endpoint: &str, file: &Path, args: &[&str]) -> Child {
    let segpredict = command(endpoint, &[]);
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

#[test]
fn two_writers_with_one_hostname_and_pid_never_share_the_lease() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("one-host");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 600);
    let input = upload_input(server, &bucket, &local);
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    let file = slowed_into(&input, &bucket, "out").write(&dir.path().join("p.toml"));
    let endpoint = server.endpoint();
    let mut first = spawn_in_own_pid_namespace(endpoint, &file, &[]);
    let committed = wait_until(&mut first, Instant::now() + Duration::from_secs(60), || {
        !server.list(&bucket, "out/part-").is_empty()
    });
    assert!(committed, "the first run ended before committing a part");
    // The same hostname and, in its namespace, the same process id.
    let refused = spawn_in_own_pid_namespace(endpoint, &file, &[]);
    let (code, stderr) = finished(refused);
    assert_eq!(code, Some(1), "a live lease must be refused: {stderr}");
    assert!(stderr.contains("its lease expires"), "{stderr}");
    let waiting = spawn_in_own_pid_namespace(endpoint, &file, &["--wait-for-lock=120s"]);
    let (code, stderr) = finished(first);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = finished(waiting);
    assert_eq!(
        code,
        Some(0),
        "the waiting run finds the run complete: {stderr}"
    );
    let again = run_s3(endpoint, &file, &[], dir.path());
    assert_complete_in_bucket(server, &bucket, "out", &reference, &again, dir.path());
}
