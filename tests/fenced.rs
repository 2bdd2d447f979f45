//! Fenced commits: what a cluster does every week, against moto's S3
//! server and the fault proxy (and on local disk). A data file counts only
//! when a record of the shard's commit log names it, and a record of an
//! attempt counts only until a newer attempt's `begin` lands, so none of
//! these faults duplicates a row or leaves an output no rerun can finish.
//! The store scenarios are written once in `stores.rs`, for Azure Blob too
//! (`azure.rs`).

use std::time::{Duration, Instant};

use crate::stores;
use crate::util::*;

#[test]
fn a_part_put_landing_after_its_writer_was_killed_never_counts_and_a_rerun_removes_it() {
    stores::a_late_part_put_never_counts(S3Server::shared());
}

#[test]
fn a_writer_stopped_past_its_lease_is_fenced_and_stops_without_false_rejects() {
    stores::a_writer_stopped_past_its_lease_is_fenced(S3Server::shared());
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

#[test]
fn two_writers_with_one_hostname_and_pid_never_share_the_lease() {
    stores::one_hostname_and_pid_never_share_the_lease(S3Server::shared());
}
