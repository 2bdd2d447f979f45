//! Object row groups fetched ahead of the reader threads: the units in
//! plan order, each object's row group fetched (by `remote::fetch`, pinned
//! to the object recorded) up to `fetch_concurrency` ahead. The planner's
//! side of reading objects; `remote.rs`, the I/O, knows nothing of units.

use std::sync::{Arc, Mutex};

use futures::stream::{BoxStream, StreamExt};
use parquet::errors::ParquetError;
use segpredict_storage::{block_on, runtime};

use crate::remote::{fetch, FetchedBytes, RemoteError, RemoteFile};
use crate::unit::Unit;

/// A unit with its bytes when its file is an object (`None` for a local
/// file, which the reader thread reads itself).
pub(crate) type Prefetched = (Unit, Option<Result<FetchedBytes, RemoteError>>);

/// The units in plan order, each object's row group fetched up to
/// `concurrency` ahead of the reader threads that take them.
pub(crate) struct Prefetch {
    stream: Mutex<BoxStream<'static, Prefetched>>,
}

impl std::fmt::Debug for Prefetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prefetch")
    }
}

impl Prefetch {
    pub fn new(
        units: Vec<Unit>,
        files: Arc<Vec<Option<Arc<RemoteFile>>>>,
        concurrency: usize,
    ) -> Self {
        let stream = futures::stream::iter(units)
            .map(move |unit| {
                let file = files.get(unit.file_idx as usize).cloned().flatten();
                // Spawned, so a fetch progresses while the stream waits.
                let fetching =
                    file.map(|f| runtime().spawn(async move { fetch(&f, unit.row_group).await }));
                async move {
                    let fetched = match fetching {
                        None => None,
                        Some(task) => Some(task.await.unwrap_or_else(|e| {
                            Err(RemoteError::Parquet(ParquetError::General(format!(
                                "fetch task: {e}"
                            ))))
                        })),
                    };
                    (unit, fetched)
                }
            })
            .buffered(concurrency.max(1))
            .boxed();
        Self {
            stream: Mutex::new(stream),
        }
    }

    /// The next unit (and its bytes), waiting for its fetch; `None` at the end.
    pub fn take(&self) -> Option<Prefetched> {
        let mut stream = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        block_on(stream.next())
    }
}
