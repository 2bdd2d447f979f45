//! Azure Blob Storage end to end, against Azurite on loopback
//! (`util::Azurite`), the same scenarios as S3's (`objects.rs`,
//! `fenced.rs`), each written once in `stores.rs`: the store conformance
//! suite (and the same suite against moto's S3 server); the sample read
//! from and written to `az://` equals the local run row for row, and
//! through `abfss://` URLs; runs killed at random moments resume; three
//! shards share a prefix with one killed; a live lease refuses a second
//! run naming its holder; a tenth of requests failing or reset through the
//! fault proxy costs retries, not rows; failures that outlast the retries
//! exit retryable; a part PUT landing after its writer was killed, a
//! writer stopped past its lease and two writers of one hostname and PID
//! are fenced.

use std::path::Path;

use crate::stores;
use crate::util::*;

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
    stores::conformance_suite(Azurite::shared());
}

#[test]
fn the_store_conformance_suite_passes_against_the_s3_server() {
    stores::conformance_suite(S3Server::shared());
}

#[test]
fn the_sample_read_from_and_written_to_azure_equals_the_local_run_row_for_row() {
    stores::sample_round_trip(Azurite::shared());
}

#[test]
fn the_sample_through_abfss_urls_equals_the_local_run() {
    let bucket = Bucket::new(Azurite::shared(), "abfss");
    let dir = tmp();
    let local_in = sample_subset(dir.path(), "in.parquet", 200);
    bucket.put("in/input.parquet", &std::fs::read(&local_in).unwrap());
    let local = Pipeline::new(&local_in, dir.path().join("local"));
    local.run(&[]).expect_code(0);
    let host = format!("{AZURITE_ACCOUNT}.dfs.core.windows.net");
    let container = &bucket.name;
    let input = format!("abfss://{container}@{host}/in/");
    let remote = Pipeline::new(
        Path::new(&input),
        format!("abfss://{container}@{host}/out/"),
    );
    let file = remote.write(&dir.path().join("abfss.toml"));
    bucket
        .run(bucket.endpoint(), &file, &[], dir.path())
        .expect_code(0);
    let out = bucket.download("out/", &dir.path().join("abfss"));
    assert_eq!(sorted_rows(&out), sorted_rows(&local.output));
}

#[test]
fn runs_writing_to_azure_killed_at_random_moments_resume_exactly() {
    stores::kills_at_random_moments_resume(Azurite::shared());
}

#[test]
fn three_shards_into_one_azure_prefix_with_one_killed_give_one_processs_output() {
    stores::three_shards_one_killed(Azurite::shared());
}

#[test]
fn a_live_azure_lease_refuses_a_second_run_naming_its_holder_until_wait_for_lock() {
    stores::a_running_writers_lease_refuses_a_second_run(Azurite::shared());
}

#[test]
fn a_live_lease_in_the_container_refuses_run_and_check_naming_the_holder_and_an_expired_one_is_taken_over(
) {
    stores::another_hosts_lease_refuses_then_is_taken_over(Azurite::shared());
}

#[test]
fn a_tenth_of_azure_requests_failing_or_reset_costs_retries_not_rows() {
    stores::a_tenth_of_requests_failing_costs_retries_not_rows(Azurite::shared());
}

#[test]
fn a_missing_azure_container_as_input_or_output_fails_at_once_in_one_line() {
    stores::a_missing_bucket_fails_at_once_in_one_line(Azurite::shared());
}

#[test]
fn failures_that_outlast_the_retries_on_azure_exit_retryable_and_the_rerun_resumes() {
    stores::failures_outlasting_the_retries_exit_retryable(Azurite::shared());
}

#[test]
fn an_azure_part_put_landing_after_its_writer_was_killed_never_counts() {
    stores::a_late_part_put_never_counts(Azurite::shared());
}

#[test]
fn an_azure_writer_stopped_past_its_lease_is_fenced_and_stops() {
    stores::a_writer_stopped_past_its_lease_is_fenced(Azurite::shared());
}

#[test]
fn two_azure_writers_with_one_hostname_and_pid_never_share_the_lease() {
    stores::one_hostname_and_pid_never_share_the_lease(Azurite::shared());
}
