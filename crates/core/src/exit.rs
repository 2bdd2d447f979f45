//! Exit codes a scheduler can act on. A Kubernetes Job's pod failure policy
//! (and a cron wrapper) sees only the exit code, so the code must say
//! whether running the same command again can help:
//!
//! | code | meaning | a retry |
//! |---|---|---|
//! | 0 | done (or already done) | not needed |
//! | 1 | a failure a retry may fix (I/O, a CUDA error, a lost device) | resumes |
//! | 2 | a permanent error (usage, pipeline file, input schema, model or labels mismatch, a refused output directory, a corrupt input file) | fails the same way |
//! | 3 | done, but more rows were rejected than `--max-reject-fraction` allows | redoes nothing; the data needs a person |
//! | 130 / 143 | interrupted by SIGINT / SIGTERM; the directory is resumable | resumes |
//!
//! clap's own usage errors exit 2 too, which fits: a usage error is permanent.

/// How a run ended, as a scheduler needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    TooManyRejects,
    Failed(Failure),
    Interrupted(Signal),
}

/// Whether running the same command again can succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Retryable,
    Permanent,
}

/// The signal that interrupted a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Interrupt,
    Terminate,
}

impl Outcome {
    pub fn code(self) -> u8 {
        match self {
            Outcome::Done => 0,
            Outcome::Failed(Failure::Retryable) => 1,
            Outcome::Failed(Failure::Permanent) => 2,
            Outcome::TooManyRejects => 3,
            Outcome::Interrupted(Signal::Interrupt) => 130,
            Outcome::Interrupted(Signal::Terminate) => 143,
        }
    }

    /// The most severe of several processes' outcomes (`--local-shards`):
    /// a permanent failure outranks a retryable one, which outranks an
    /// interruption, which outranks rejects; done is the least.
    pub fn most_severe(outcomes: impl IntoIterator<Item = Outcome>) -> Outcome {
        outcomes
            .into_iter()
            .max_by_key(|o| o.severity())
            .unwrap_or(Outcome::Done)
    }

    fn severity(self) -> u8 {
        match self {
            Outcome::Done => 0,
            Outcome::TooManyRejects => 1,
            Outcome::Interrupted(_) => 2,
            Outcome::Failed(Failure::Retryable) => 3,
            Outcome::Failed(Failure::Permanent) => 4,
        }
    }

    /// An exit code read back from a child process (`None`: killed by a
    /// signal, which a retry may fix).
    pub fn from_code(code: Option<i32>) -> Outcome {
        match code {
            Some(0) => Outcome::Done,
            Some(2) => Outcome::Failed(Failure::Permanent),
            Some(3) => Outcome::TooManyRejects,
            Some(130) => Outcome::Interrupted(Signal::Interrupt),
            Some(143) => Outcome::Interrupted(Signal::Terminate),
            _ => Outcome::Failed(Failure::Retryable),
        }
    }
}

/// A completed run's outcome: done, unless more than `max_fraction` of the
/// input rows were rejected (the default 0 flags any reject).
pub fn completed(rows_rejected: u64, rows_in: u64, max_fraction: f64) -> Outcome {
    // Compared in integers of rows so 0.0 means "none" exactly.
    let allowed = (max_fraction.clamp(0.0, 1.0) * rows_in as f64).floor() as u64;
    if rows_rejected > allowed {
        Outcome::TooManyRejects
    } else {
        Outcome::Done
    }
}

/// Marks an error as permanent where its type alone does not say so (a
/// refused output directory, a manifest that differs): the top of the
/// program maps it to exit code 2.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Permanent(pub anyhow::Error);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_documented_ones() {
        assert_eq!(Outcome::Done.code(), 0);
        assert_eq!(Outcome::Failed(Failure::Retryable).code(), 1);
        assert_eq!(Outcome::Failed(Failure::Permanent).code(), 2);
        assert_eq!(Outcome::TooManyRejects.code(), 3);
        assert_eq!(Outcome::Interrupted(Signal::Interrupt).code(), 130);
        assert_eq!(Outcome::Interrupted(Signal::Terminate).code(), 143);
        for code in [0, 1, 2, 3, 130, 143] {
            assert_eq!(i32::from(Outcome::from_code(Some(code)).code()), code);
        }
        assert_eq!(
            Outcome::from_code(None),
            Outcome::Failed(Failure::Retryable)
        );
    }

    #[test]
    fn the_reject_fraction_counts_rows() {
        assert_eq!(completed(0, 100, 0.0), Outcome::Done);
        assert_eq!(completed(1, 100, 0.0), Outcome::TooManyRejects);
        assert_eq!(completed(1, 100, 0.01), Outcome::Done);
        assert_eq!(completed(2, 100, 0.01), Outcome::TooManyRejects);
        assert_eq!(completed(100, 100, 1.0), Outcome::Done);
        assert_eq!(completed(0, 0, 0.0), Outcome::Done);
    }

    #[test]
    fn the_most_severe_outcome_wins() {
        use Outcome::*;
        assert_eq!(Outcome::most_severe([]), Done);
        assert_eq!(Outcome::most_severe([Done, TooManyRejects]), TooManyRejects);
        assert_eq!(
            Outcome::most_severe([
                Interrupted(Signal::Terminate),
                Failed(Failure::Retryable),
                Done
            ]),
            Failed(Failure::Retryable)
        );
        assert_eq!(
            Outcome::most_severe([Failed(Failure::Permanent), Failed(Failure::Retryable)]),
            Failed(Failure::Permanent)
        );
    }
}
