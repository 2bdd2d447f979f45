//! Integration tests: the real `segpredict` binary on real Parquet files.
//!
//! * `sample`: the sample against the Python reference, the segment budget,
//!   and the command-line overrides.
//! * `inputs`: files written by pyarrow, DuckDB and Polars in the layouts the
//!   reader accepts; several files; empty files.
//! * `errors`: each permanent failure is exit code 2 and one line naming its
//!   cause.
//! * `recovery`: bad values, out-of-memory recovery, Ctrl-C.
//! * `deploy`: the Kubernetes manifests, validated and run as their pods.
//! * `resume`: killed runs resumed, finished runs left alone, other runs
//!   refused, shards in one directory.
//! * `fenced`: the commit log's fencing: a PUT landing after its writer
//!   was killed, a writer stopped past its lease, a lock file removed
//!   under a running writer, two writers of one hostname and PID.
//! * `faults`: a row the model cannot take, corrupt and truncated files
//!   (a corrupt dictionary page, a flipped checksummed byte), a full disk,
//!   host memory flat with ten times the rejects.
//! * `images`: encoded image segments: the image sample (PNG, JPEG, the
//!   `datasets` layout) against the raw sample and the Pillow reference;
//!   corrupt, truncated, empty, unsupported and oversized images rejected.
//! * `ops`: `inspect`, `check`, JSON logs and Prometheus metrics.
//! * `engines`: the output as the next job reads it: DuckDB and Polars on
//!   `out/*.parquet`, pyarrow and pandas on `out/`, the run files at their
//!   documented paths, `[writers] top_k`.
//! * `ownership`: the output is the run's own: foreign files survive
//!   `--overwrite`, one writer per shard, a finished run's exit code again,
//!   `check` and `run` agree.
//! * `aoti`: AOTInductor packages (.pt2): the sample, and start-up refusals.
//! * `gpu`: CUDA runs (skipped, saying so, where there is no GPU).
//! * `gcs`: Google Cloud Storage against fake-gcs-server (`util/gcs.rs`):
//!   `gs://` inputs equal local ones row for row, a killed run reading them
//!   resumes; `gs://` outputs wait on
//!   the emulator's XML PUT (the check that it still refuses it, and the
//!   write tests ignored until it does).
//! * `azure`: Azure Blob Storage against Azurite (`util/azure.rs`): the
//!   store conformance suite (and against moto's S3 server), the sample
//!   round trip, kills and resume, three shards, the leases, the fault
//!   proxy, fencing: the scenarios of `objects` and `fenced`, from `stores`.
//! * `stores`: the object-store scenarios, each written once against
//!   `util::TestBucket` (`util/bucket.rs`) and run by `objects`, `fenced`
//!   and `azure` against moto's S3 server and Azurite.
//! * `s3harness`: the object-storage harness itself (`util/s3.rs`): moto's
//!   S3 server on loopback, the fault proxy in front of it
//!   (`tools/s3/fault_proxy.py`), the signed client the tests check with.
//! * `docs`: README.md and the book under docs/: links resolve inside the
//!   repository, quoted `segpredict` commands take the flags they quote.
//! * `pinned`: inputs pinned to what the run recorded (an object replaced
//!   mid-run, footer-identical files swapped, a file truncated under skip,
//!   two spellings of a path), a range damaged in transit, 503 bursts and an
//!   outage ridden out, a missing bucket in one line.
//! * `carry`: `[writers] carry`: input columns of every type beside the
//!   predictions, equal to their own rows after bucketing, sharded and
//!   resumed; bad names refused before the run.
//! * `hive`: Hive-partitioned input on disk and in S3, the key carried.
//! * `tidy`: the crate graph and the rules the compiler cannot hold.
//!
//! Input variants are made by `tests/fixtures.py` with the venv's Python.
//! `util` runs the binary and reads what it writes; `util/interrupt.rs`
//! holds the slowed runs that `resume` kills and reruns.

mod util;

mod aoti;
mod azure;
mod carry;
mod deploy;
mod docs;
mod engines;
mod errors;
mod faults;
mod fenced;
mod gcs;
mod gpu;
mod hive;
mod images;
mod inputs;
mod objects;
mod ops;
mod ownership;
mod pinned;
mod recovery;
mod resume;
mod s3harness;
mod sample;
mod stores;
mod tidy;
