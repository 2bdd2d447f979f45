//! Google Cloud Storage end to end, against fake-gcs-server on loopback
//! (`util::GcsServer`): the sample read from a `gs://` prefix equals the
//! local run row for row, and so does a glob over a prefix with other
//! objects in it; `inspect` reads a prefix and a single object (HEAD); a
//! run reading from it killed after a commit resumes;
//! the harness stores, lists and reads back, and its server dies with it.
//!
//! Writing to `gs://` does not run against it: object_store writes through
//! the XML API (`PUT /BUCKET/KEY`, `x-goog-if-generation-match` for the
//! lock and put-if-absent, XML multipart uploads for large parts), and
//! fake-gcs-server 1.54.0 answers that PUT 400 "invalid uploadType" and has
//! no XML multipart. The emulator's refusal is checked here, so the day it
//! accepts the PUT the check fails and the ignored write tests below (the
//! round trip, and a killed run resumed) are the ones to turn on.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::util::*;

/// `segpredict ARGS` with the emulator's environment.
fn command(server: &GcsServer, args: &[&str]) -> Command {
    let mut command = Command::new(bin());
    command.args(args);
    server.configure(quiet_env(&mut command));
    command
}

fn run_gcs(server: &GcsServer, file: &Path, out: &Path) -> RunResult {
    run_command(&mut command(server, &["run", file.to_str().unwrap()]), out)
}

/// The report's count of object-storage requests.
fn store_requests(dir: &Path) -> u64 {
    let report = read_report(dir);
    report["store_requests"]["requests"]
        .as_u64()
        .unwrap_or_else(|| panic!("no store_requests in the report: {report}"))
}

/// The sample uploaded to `bucket` under `in/`, and its local run (the
/// reference) in `dir/local`.
fn sample_in_bucket_and_run_locally(server: &GcsServer, bucket: &str, dir: &Path) -> Pipeline {
    let bytes = std::fs::read(sample()).unwrap();
    server.upload(bucket, "in/digits.parquet", &bytes);
    let local = Pipeline::new(sample(), dir.join("local"));
    local.run(&[]).expect_code(0);
    local
}

#[test]
fn the_sample_read_from_gcs_equals_the_local_run_row_for_row() {
    let server = GcsServer::shared();
    let bucket = server.unique_bucket("sample");
    let dir = tmp();
    let local = sample_in_bucket_and_run_locally(server, &bucket, dir.path());
    let input = PathBuf::from(format!("gs://{bucket}/in/"));
    let out = dir.path().join("from-gcs");
    let file = Pipeline::new(&input, &out).write(&dir.path().join("gcs.toml"));
    let run = run_gcs(server, &file, dir.path());
    run.expect_code(0);
    assert_eq!(sorted_rows(&out), sorted_rows(&local.output));
    assert_eq!(read_output(&out).len(), SAMPLE_ROWS);
    assert!(store_requests(&out) > 0, "{}", run.describe());
    let sources: Vec<String> = read_output(&out)
        .into_iter()
        .map(|r| r.source_file)
        .collect();
    let object = format!("gs://{bucket}/in/digits.parquet");
    assert!(sources.iter().all(|s| *s == object), "{:?}", &sources[..3]);
    // inspect reads the prefix (a listing) and the object itself (a HEAD).
    for url in [input.to_str().unwrap(), object.as_str()] {
        let inspect = run_command(&mut command(server, &["inspect", url]), dir.path());
        inspect.expect_code(0);
        assert!(inspect.stdout.contains("2000"), "{}", inspect.describe());
    }
}

#[test]
fn a_glob_over_a_gcs_prefix_reads_only_the_matching_objects() {
    let server = GcsServer::shared();
    let bucket = server.unique_bucket("glob");
    let dir = tmp();
    let subset = sample_subset(dir.path(), "subset.parquet", 300);
    let bytes = std::fs::read(&subset).unwrap();
    server.upload(&bucket, "in/part-a.parquet", &bytes);
    server.upload(&bucket, "in/notes.txt", b"not a Parquet file");
    server.upload(&bucket, "elsewhere/part-b.parquet", &bytes);
    let local = Pipeline::new(&subset, dir.path().join("local"));
    local.run(&[]).expect_code(0);
    let out = dir.path().join("from-gcs");
    let input = format!("gs://{bucket}/in/*.parquet");
    let file = Pipeline::new(&input, &out).write(&dir.path().join("gcs.toml"));
    let run = run_gcs(server, &file, dir.path());
    run.expect_code(0);
    assert_eq!(sorted_rows(&out), sorted_rows(&local.output));
    assert_eq!(read_output(&out).len(), 300, "{}", run.describe());
}

/// The input's identity for resume is the object's (generation/ETag,
/// size, footer), as the emulator reports it: a run reading from gs://
/// killed after a commit resumes to the uninterrupted output.
#[test]
fn a_run_reading_from_gcs_killed_after_a_commit_resumes() {
    let server = GcsServer::shared();
    let bucket = server.unique_bucket("read-kill");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 600);
    server.upload(&bucket, "in/input.parquet", &std::fs::read(&local).unwrap());
    let started = Instant::now();
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    let duration = started.elapsed();
    let input = PathBuf::from(format!("gs://{bucket}/in/"));
    let out = dir.path().join("out");
    let file = slowed(&input, &out).write(&dir.path().join("kill.toml"));
    let mut child = spawn_gcs(server, &file);
    let killed = kill_when(&mut child, Instant::now() + duration * 3, || {
        has_part(&out, "part-")
    });
    assert!(killed, "the run finished before it could be killed");
    // What the log counts, not every part file listed: a part uploaded
    // but not yet named by a record when the kill came is garbage.
    let committed = committed_rows(&out);
    let rerun = run_gcs(server, &file, dir.path());
    let rerun = RunResult {
        out_dir: out.clone(),
        ..rerun
    };
    reference.assert_complete(&rerun);
    let resumed = report_u64(&read_report(&out), "rows_resumed") as usize;
    assert_eq!(resumed, committed, "{}", rerun.describe());
    assert!(resumed > 0, "{}", rerun.describe());
}

#[test]
fn the_gcs_harness_stores_lists_and_reads_back_and_its_server_dies_when_dropped() {
    let server = GcsServer::start();
    let bucket = server.unique_bucket("harness");
    let names = [
        "out/a.parquet",
        "out/b b.parquet",
        "out/c/_SUCCESS",
        "out/d&e",
        "outside",
    ];
    for (n, name) in names.iter().enumerate() {
        server.upload(&bucket, name, &vec![n as u8; 1000 + n]);
    }
    assert_eq!(server.list(&bucket, "out/"), &names[..4]);
    assert_eq!(server.get(&bucket, "out/b b.parquet"), vec![1u8; 1001]);
    let pid = server.pid();
    drop(server);
    // SAFETY: signal 0 only asks whether the process exists.
    let alive = unsafe { libc::kill(pid as i32, 0) == 0 };
    assert!(!alive, "fake-gcs-server (pid {pid}) outlived its GcsServer");
}

/// The request object_store's GCS client sends for `put` (XML API, the
/// key percent-encoded whole), with its conditional header for `Create`.
fn xml_put(server: &GcsServer, bucket: &str, key: &str, create: bool) -> HttpResponse {
    let path = format!("/{bucket}/{}", uri_encode(key, true));
    let headers: &[(&str, &str)] = match create {
        true => &[("x-goog-if-generation-match", "0")],
        false => &[],
    };
    server
        .request("PUT", &path, headers, b"probe")
        .unwrap_or_else(|e| panic!("PUT {path}: {e}"))
}

/// The day this fails, fake-gcs-server takes object_store's writes: run
/// the ignored tests below (`cargo test --test integration gcs -- --ignored`)
/// and un-ignore those that pass.
#[test]
fn fake_gcs_server_refuses_the_xml_writes_so_gs_outputs_are_not_tested_against_it() {
    let server = GcsServer::shared();
    let bucket = server.unique_bucket("writes");
    for create in [false, true] {
        let put = xml_put(server, &bucket, "out/_progress/probe", create);
        assert_eq!(put.status, 400, "{}", put.text());
        assert!(put.text().contains("invalid uploadType"), "{}", put.text());
    }
    let initiate = server
        .request("POST", &format!("/{bucket}/out%2Fbig?uploads"), &[], b"")
        .unwrap();
    assert_eq!(initiate.status, 400, "XML multipart: {}", initiate.text());
    // So a run writing to gs:// stops at its first write, naming it, and
    // leaves nothing behind.
    let dir = tmp();
    server.upload(
        &bucket,
        "in/digits.parquet",
        &std::fs::read(sample()).unwrap(),
    );
    let pipeline = Pipeline::new(format!("gs://{bucket}/in/"), format!("gs://{bucket}/out/"));
    let run = run_gcs(
        server,
        &pipeline.write(&dir.path().join("p.toml")),
        dir.path(),
    );
    assert_ne!(run.code, 0, "{}", run.describe());
    assert!(
        run.stderr.contains("invalid uploadType"),
        "{}",
        run.describe()
    );
    assert!(server.list(&bucket, "out/").is_empty());
}

/// The objects under `prefix`, downloaded into `dir` (which is returned).
fn download(server: &GcsServer, bucket: &str, prefix: &str, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    server.download(bucket, prefix, dir);
    dir.to_path_buf()
}

#[test]
#[ignore = "fake-gcs-server 1.54.0 answers object_store's XML PUT 400 (its issue 331)"]
fn the_sample_written_to_gcs_equals_the_local_run_row_for_row() {
    let server = GcsServer::shared();
    let bucket = server.unique_bucket("roundtrip");
    let dir = tmp();
    let local = sample_in_bucket_and_run_locally(server, &bucket, dir.path());
    let remote = Pipeline::new(format!("gs://{bucket}/in/"), format!("gs://{bucket}/out/"));
    let file = remote.write(&dir.path().join("gcs.toml"));
    let run = run_gcs(server, &file, dir.path());
    run.expect_code(0);
    let out = download(server, &bucket, "out/", &dir.path().join("gcs"));
    assert_eq!(sorted_rows(&out), sorted_rows(&local.output));
    assert!(out.join("_SUCCESS").is_file());
    let locks = server.list(&bucket, "out/_progress/lock");
    assert!(locks.is_empty(), "a finished run leaves no lock: {locks:?}");
    let again = run_gcs(server, &file, dir.path());
    again.expect_code(0);
    assert!(
        again.stderr.contains("already complete"),
        "{}",
        again.describe()
    );
}

fn spawn_gcs(server: &GcsServer, file: &Path) -> Child {
    command(server, &["run", file.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting segpredict")
}

#[test]
#[ignore = "fake-gcs-server 1.54.0 answers object_store's XML PUT 400 (its issue 331)"]
fn a_run_writing_to_gcs_killed_after_a_commit_resumes() {
    let server = GcsServer::shared();
    let bucket = server.unique_bucket("kill");
    let dir = tmp();
    let local = sample_subset(dir.path(), "in.parquet", 600);
    server.upload(&bucket, "in/input.parquet", &std::fs::read(&local).unwrap());
    let started = Instant::now();
    let reference = Reference::of(&slowed(&local, &dir.path().join("reference")), &local);
    let input = PathBuf::from(format!("gs://{bucket}/in/"));
    let output = PathBuf::from(format!("gs://{bucket}/out/"));
    let file = slowed(&input, &output).write(&dir.path().join("kill.toml"));
    let mut child = spawn_gcs(server, &file);
    let deadline = Instant::now() + started.elapsed() * 3;
    let killed = kill_when(&mut child, deadline, || {
        !server.list(&bucket, "out/part-").is_empty()
    });
    assert!(killed, "the run finished before it could be killed");
    let rerun = run_gcs(server, &file, dir.path());
    let out = download(server, &bucket, "out/", &dir.path().join("out"));
    let downloaded = RunResult {
        out_dir: out.clone(),
        ..rerun
    };
    reference.assert_complete(&downloaded);
    assert!(report_u64(&read_report(&out), "rows_resumed") > 0);
}
