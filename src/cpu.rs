//! CPU scheduling between the stages. The model worker is the one thread
//! whose delays the GPU feels: it waits on the device, then has to queue the
//! next kernels at once. Threads that only feed or drain it (readers,
//! decoders, writers) run at a lower priority so they never take its core.
//! On a 16-core H200 host, decoding on every core at normal priority made
//! the median GPU batch take 1.4x as long (benches/gpu/RESULTS.md).

/// How much nicer than the model worker the feeding threads are.
const FEEDER_NICENESS: i32 = 5;

/// Lowers the calling thread's priority (Linux: its nice value; raising
/// niceness needs no privilege). Elsewhere, or if refused, it stays as it is:
/// priority is an optimisation, never a reason to fail a run.
pub fn lower_this_thread() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain syscalls on the calling thread; no memory is shared.
        let refused = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, FEEDER_NICENESS) != 0
        };
        if refused {
            tracing::debug!("could not lower a feeding thread's priority");
        }
    }
}
