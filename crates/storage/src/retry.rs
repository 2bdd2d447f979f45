//! Retries bounded by time: object_store's clients retry each request
//! until `[storage] retry_timeout_s` has passed (not a count, which a burst
//! of 503s uses up in seconds), and [`retry_for`] does the same for an
//! operation object_store does not retry itself (a conditional put whose
//! connection broke after it was sent).

use std::time::{Duration, Instant};

use object_store::BackoffConfig;

/// The pause before the first retry, and the longest between two.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// object_store draws each pause at random between the first pause and
/// `base` times the last one: with 3, pauses grow by half on average
/// (with 2 they would not grow at all), to at most 5 s, so the end of an
/// outage is met within 5 s.
pub(crate) fn backoff() -> BackoffConfig {
    BackoffConfig {
        init_backoff: FIRST_PAUSE,
        max_backoff: LONGEST_PAUSE,
        base: 3.0,
    }
}

/// How long a failing request (or [`retry_for`]'s operation) is retried.
pub fn retry_deadline() -> Duration {
    crate::settings().retry_timeout
}

/// Runs `operation` until it succeeds, fails with an error that is not
/// `transient`, or [`retry_deadline`] has passed since the first try, with
/// a pause that doubles to at most 5 s between tries. For stage threads
/// (it sleeps).
pub fn retry_for<T, E: std::fmt::Display>(
    transient: impl Fn(&E) -> bool,
    mut operation: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = Instant::now() + retry_deadline();
    let mut pause = FIRST_PAUSE;
    loop {
        match operation() {
            Err(e) if transient(&e) && Instant::now() + pause < deadline => {
                tracing::debug!(error = %e, pause_ms = pause.as_millis() as u64, "object store operation failed; trying again");
                std::thread::sleep(pause);
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transient_failure_is_tried_again_and_a_permanent_one_is_not() {
        let mut tries = 0;
        let done: Result<u32, u16> = retry_for(
            |e: &u16| *e == 503,
            || {
                tries += 1;
                if tries < 4 {
                    Err(503)
                } else {
                    Ok(7)
                }
            },
        );
        assert_eq!((done, tries), (Ok(7), 4));
        let mut tries = 0;
        let refused: Result<u32, u16> = retry_for(
            |e: &u16| *e == 503,
            || {
                tries += 1;
                Err(404)
            },
        );
        assert_eq!((refused, tries), (Err(404), 1));
    }
}
