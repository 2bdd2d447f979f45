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
fn command(endpoint: &str, args: &[&str]) -> Command {
    let mut command = Command::new(bin());
    command.args(args);
    configure_s3(quiet_env(&mut command), endpoint);
    command
}

fn run_s3(endpoint: &str, file: &Path, args: &[&str], out: &Path) -> RunResult {
    let mut all = vec!["run", file.to_str().unwrap()];
    all.extend_from_slice(args);
    run_command(&mut command(endpoint, &all), out)
}

fn spawn_s3(endpoint: &str, file: &Path, args: &[&str]) -> Child {
    let mut all = vec!["run", file.to_str().unwrap()];
    all.extend_from_slice(args);
    command(endpoint, &all)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting segpredict")
}

/// The input uploaded to `bucket` under `in/`; its URL.
fn upload_input(server: &S3Server, bucket: &str, input: &Path) -> PathBuf {
    server.put(bucket, "in/input.parquet", &std::fs::read(input).unwrap());
    PathBuf::from(format!("s3://{bucket}/in/"))
}

/// The objects under `prefix`, downloaded into `dir` (which is returned).
fn download(server: &S3Server, bucket: &str, prefix: &str, dir: &Path) -> PathBuf {
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
            let got = server.client().request("GET", &format!("/{bucket}/{key}"), &[], &[], b"");
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
    assert!(run.stdout.contains("object storage: "), "{}", run.describe());
    let out = download(server, &bucket, "out/", &dir.path().join("s3"));
    assert_eq!(sorted_rows(&out), sorted_rows(&local.output));
    assert_eq!(read_output(&out).len(), SAMPLE_ROWS);
    assert!(out.join("_SUCCESS").is_file());
    let report = read_report(&out);
    assert!(report["store_requests"]["requests"].as_u64().unwrap() > 0, "{report}");
    assert!(!report.to_string().contains("secret"), "{report}");
    let locks: Vec<String> = server.list(&bucket, "out/_progress/lock");
    assert!(locks.is_empty(), "a finished run leaves no lock: {locks:?}");
    // The rerun finds it complete; check and inspect read the bucket too.
    let again = run_s3(endpoint, &file, &[], dir.path());
    again.expect_code(0);
    assert!(again.stderr.contains("already complete"), "{}", again.describe());
    let check = run_command(&mut command(endpoint, &["check", file.to_str().unwrap()]), dir.path());
    check.expect_code(0);
    let url = input.to_str().unwrap();
    let inspect = run_command(&mut command(endpoint, &["inspect", url]), dir.path());
    inspect.expect_code(0);
    assert!(inspect.stdout.contains("2000"), "{}", inspect.describe());
}
