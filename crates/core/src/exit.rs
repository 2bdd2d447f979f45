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
//! | 129 / 130 / 143 | interrupted by SIGHUP / SIGINT / SIGTERM before its shard was done; the output is resumable | resumes |
//!
//! A signal that arrives once the shard's `done` record is written (only
//! the run's commit left) does not stop it: the commit finishes and the
//! run exits 0, so an evicted pod whose output is complete is not retried.
//!
//! clap's own usage errors exit 2 too, which fits: a usage error is permanent.

use std::fmt::{Debug, Display};

/// How a run ended, as a scheduler needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every row of the shard predicted or rejected within the allowed
    /// fraction (or it was already done): exit 0.
    Done,
    /// Finished, but more rows were rejected than `--max-reject-fraction`
    /// allows: exit 3, and a retry would change nothing.
    TooManyRejects,
    /// Stopped by an error: exit 1 if a retry may help, 2 if not.
    Failed(Failure),
    /// Stopped by a signal before the shard was done; the output is
    /// resumable. Exits 128 plus the signal's number.
    Interrupted(Signal),
}

/// Whether running the same command again can succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Another attempt may succeed (I/O, a lost device): exit 1, and the
    /// next attempt resumes from the checkpoint.
    Retryable,
    /// The same command will fail the same way (usage, settings, input
    /// or model mismatch): exit 2; a person must change something.
    Permanent,
}

impl Failure {
    /// `Permanent` when `permanent`, else `Retryable`: for error types
    /// that classify by a test such as a status code.
    pub fn permanent_if(permanent: bool) -> Failure {
        match permanent {
            true => Failure::Permanent,
            false => Failure::Retryable,
        }
    }
}

/// The signal that interrupted a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGHUP: exit 129.
    Hangup,
    /// SIGINT (Ctrl-C): exit 130.
    Interrupt,
    /// SIGTERM (a pod evicted, a job cancelled): exit 143.
    Terminate,
}

impl Outcome {
    /// The process exit code for this outcome (the table in this module's
    /// docs); [`Self::from_code`] reads it back.
    pub fn code(self) -> u8 {
        match self {
            Outcome::Done => 0,
            Outcome::Failed(Failure::Retryable) => 1,
            Outcome::Failed(Failure::Permanent) => 2,
            Outcome::TooManyRejects => 3,
            Outcome::Interrupted(Signal::Hangup) => 129,
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
            Some(129) => Outcome::Interrupted(Signal::Hangup),
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

/// Whether another attempt of the same command can succeed. Every error
/// type that reaches `main` says so here: [`Error`] converts only from
/// types that implement it, so an error type without a class is a compile
/// error, never a silent default.
///
/// ```compile_fail,E0277
/// use segpredict_core::exit::Result;
/// #[derive(Debug, thiserror::Error)]
/// #[error("a new error")]
/// struct Unclassified;
/// fn step() -> Result<()> {
///     Err(Unclassified)?
/// }
/// ```
///
/// The same with its class compiles:
///
/// ```
/// use segpredict_core::exit::{Classify, Failure, Result};
/// #[derive(Debug, thiserror::Error)]
/// #[error("a new error")]
/// struct Classified;
/// impl Classify for Classified {
///     fn failure(&self) -> Failure {
///         Failure::Permanent
///     }
/// }
/// fn step() -> Result<()> {
///     Err(Classified)?
/// }
/// assert_eq!(step().unwrap_err().failure(), Failure::Permanent);
/// ```
pub trait Classify {
    /// This error's class: whether another attempt of the same command can
    /// get past it. Decide per variant, by what caused it, not by type.
    fn failure(&self) -> Failure;

    /// Whether [`Self::failure`] is `Permanent`.
    fn is_permanent(&self) -> bool {
        self.failure() == Failure::Permanent
    }
}

/// An error on its way to `main`, with its class fixed where it was made;
/// context added on the way keeps the class.
pub struct Error {
    failure: Failure,
    error: anyhow::Error,
}

/// A result whose error carries its class: what every fallible step on
/// the way to `main` returns, so `?` demands a [`Classify`] impl.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl<E> From<E> for Error
where
    E: Classify + std::error::Error + Send + Sync + 'static,
{
    fn from(error: E) -> Self {
        Error {
            failure: error.failure(),
            error: error.into(),
        }
    }
}

impl Error {
    /// A message a retry cannot change: usage, a refused setting, an input
    /// that does not fit.
    pub fn permanent<M: Display + Debug + Send + Sync + 'static>(message: M) -> Self {
        Error {
            failure: Failure::Permanent,
            error: anyhow::Error::msg(message),
        }
    }

    /// A message about a state another attempt may not meet: a stage that
    /// died, shards still running.
    pub fn retryable<M: Display + Debug + Send + Sync + 'static>(message: M) -> Self {
        Error {
            failure: Failure::Retryable,
            error: anyhow::Error::msg(message),
        }
    }

    /// A foreign error type classified where it happens, for the one call
    /// site that knows what it means.
    pub fn classified<E>(failure: Failure, error: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Error {
            failure,
            error: error.into(),
        }
    }

    /// The class fixed when the error was made; `main` turns it into the
    /// exit code.
    pub fn failure(&self) -> Failure {
        self.failure
    }

    /// Wraps the error in a message saying what was being done, as
    /// `anyhow::Error::context` does; the class stays.
    pub fn context<C: Display + Send + Sync + 'static>(self, context: C) -> Self {
        Error {
            failure: self.failure,
            error: self.error.context(context),
        }
    }

    /// The original error if it is a `T` (at any level of context), for a
    /// caller that must tell one cause from the others.
    pub fn downcast_ref<T: Display + Debug + Send + Sync + 'static>(&self) -> Option<&T> {
        self.error.downcast_ref()
    }

    /// The error and its sources, outermost context first, for printing
    /// every level.
    pub fn chain(&self) -> anyhow::Chain<'_> {
        self.error.chain()
    }
}

impl Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Display::fmt(&self.error, f)
    }
}

impl Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Debug::fmt(&self.error, f)
    }
}

/// `anyhow::Context` for classified errors: the message is added, the
/// class kept.
pub trait Context<T> {
    /// Adds `context` to the error, if any, keeping its class.
    fn context<C: Display + Send + Sync + 'static>(self, context: C) -> Result<T>;

    /// Adds the message `context` builds, built only on error, keeping
    /// the class.
    fn with_context<C, F>(self, context: F) -> Result<T>
    where
        C: Display + Send + Sync + 'static,
        F: FnOnce() -> C;
}

impl<T, E> Context<T> for std::result::Result<T, E>
where
    E: Classify + std::error::Error + Send + Sync + 'static,
{
    fn context<C: Display + Send + Sync + 'static>(self, context: C) -> Result<T> {
        self.map_err(|e| Error::from(e).context(context))
    }

    fn with_context<C, F>(self, context: F) -> Result<T>
    where
        C: Display + Send + Sync + 'static,
        F: FnOnce() -> C,
    {
        self.map_err(|e| Error::from(e).context(context()))
    }
}

impl<T> Context<T> for Result<T> {
    fn context<C: Display + Send + Sync + 'static>(self, context: C) -> Result<T> {
        self.map_err(|e| e.context(context))
    }

    fn with_context<C, F>(self, context: F) -> Result<T>
    where
        C: Display + Send + Sync + 'static,
        F: FnOnce() -> C,
    {
        self.map_err(|e| e.context(context()))
    }
}

/// A file's content that does not read is the content's fault (permanent),
/// unless an I/O error lies underneath: a flaky mount's read may succeed
/// next time. The parquet and arrow crates keep `std::io::Error` as their
/// error's source.
pub fn content_or_io(error: &(dyn std::error::Error + 'static)) -> Failure {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<std::io::Error>() {
            return Failure::Retryable;
        }
        cause = e.source();
    }
    Failure::Permanent
}

/// I/O outside any store or reader (a completion script, the manual page
/// on stdout): the disk or pipe may be back on the next attempt.
impl Classify for std::io::Error {
    fn failure(&self) -> Failure {
        use std::io::ErrorKind::*;
        match self.kind() {
            NotFound | PermissionDenied | ReadOnlyFilesystem | NotADirectory | IsADirectory
            | InvalidInput | InvalidData => Failure::Permanent,
            _ => Failure::Retryable,
        }
    }
}

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
        for code in [0, 1, 2, 3, 129, 130, 143] {
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
