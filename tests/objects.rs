//! Object storage end to end, against moto's S3 server on loopback
//! (`util::S3Server`): the sample read from and written to a bucket equals
//! the local run row for row; runs writing to a bucket killed at random
//! moments resume; three shards share a prefix; a tenth of requests
//! failing or reset through the fault proxy costs retries, not rows;
//! failures that outlast the retries exit retryable with a resumable
//! output; a live lease (a running writer's, another host's until it
//! expires) refuses a run. While runs write, a watcher lists the prefix
//! and reads every object under a final name whole. Each scenario is
//! written once in `stores.rs`, for Azure Blob too (`azure.rs`).

use crate::stores;
use crate::util::*;

#[test]
fn the_sample_read_from_and_written_to_s3_equals_the_local_run_row_for_row() {
    stores::sample_round_trip(S3Server::shared());
}

#[test]
fn runs_writing_to_s3_killed_at_random_moments_resume_with_no_partial_object_ever_visible() {
    stores::kills_at_random_moments_resume(S3Server::shared());
}

#[test]
fn three_shards_into_one_prefix_with_one_killed_give_one_processs_output() {
    stores::three_shards_one_killed(S3Server::shared());
}

#[test]
fn a_tenth_of_requests_failing_or_reset_costs_retries_not_rows() {
    stores::a_tenth_of_requests_failing_costs_retries_not_rows(S3Server::shared());
}

#[test]
fn a_missing_bucket_as_input_or_output_fails_at_once_in_one_line() {
    stores::a_missing_bucket_fails_at_once_in_one_line(S3Server::shared());
}

#[test]
fn failures_that_outlast_the_retries_exit_retryable_and_the_rerun_resumes() {
    stores::failures_outlasting_the_retries_exit_retryable(S3Server::shared());
}

#[test]
fn a_live_lease_in_the_bucket_refuses_run_and_check_naming_the_holder_and_an_expired_one_is_taken_over(
) {
    stores::another_hosts_lease_refuses_then_is_taken_over(S3Server::shared());
}

#[test]
fn a_running_writers_lease_in_the_bucket_refuses_a_second_run_until_wait_for_lock() {
    stores::a_running_writers_lease_refuses_a_second_run(S3Server::shared());
}
