//! The one async runtime of the process: object_store's clients are async,
//! the pipeline's stages are threads. Stage threads call [`block_on`]; the
//! runtime's own threads only move bytes.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::Runtime;

/// Threads for network I/O: requests wait on the network, not the CPU,
/// and the decode pool and the model worker need the cores.
const IO_THREADS: usize = 2;

/// The process's I/O runtime, started on first use, for spawning requests
/// that run while a stage thread does other work (prefetch, multipart
/// upload parts). Stage threads wait on results with [`block_on`].
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(IO_THREADS)
            .thread_name("segpredict-io")
            .enable_all()
            .build()
            // Creating threads and an epoll instance at start-up: failing
            // here means the process cannot run at all.
            .expect("starting the I/O runtime")
    })
}

/// Runs `future` to completion from a stage thread (never from inside the
/// runtime: that is a bug, and tokio panics on it).
pub fn block_on<F: Future>(future: F) -> F::Output {
    runtime().block_on(future)
}
