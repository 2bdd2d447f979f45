//! CPU scheduling between the stages. The model worker is the one thread
//! whose delays the GPU feels: it waits on the device, then has to queue the
//! next kernels at once. Threads that only feed or drain it (readers,
//! decoders, bucketing, writers) run at a lower priority so they never take
//! its core, and on a GPU run with cores to spare the worker gets a core of
//! its own that they are kept off.
//!
//! Measured on a 16-core H200 host (benches/gpu/RESULTS.md): decoding on every
//! core at normal priority made the median GPU batch take 1.4x as long; with
//! lower priority alone, 18% of the budget's batches still took 4-5 ms longer
//! on the device than the rest (one 4 ms scheduler tick: the worker, woken
//! from its wait on the device, found a feeding thread on its core).

use std::sync::OnceLock;

/// How much nicer than the model worker the feeding threads are.
const FEEDER_NICENESS: i32 = 5;

/// With fewer cores the feeders need them all, and the worker shares.
const MIN_CORES_TO_RESERVE: usize = 4;

/// The model worker's core and everyone else's, once a core is reserved.
struct CoreLayout {
    worker: usize,
    feeders: Vec<usize>,
}

static LAYOUT: OnceLock<Option<CoreLayout>> = OnceLock::new();

/// Keeps one core for the model worker: the last this process may use.
/// Feeding threads that call [`lower_this_thread`] afterwards stay off it.
/// Call before the feeding threads start, and only for a GPU run: on CPU the
/// model computes on libtorch's own threads, which need every core.
pub fn reserve_core_for_worker() {
    LAYOUT.get_or_init(|| {
        let mut cores = allowed_cores()?;
        if cores.len() < MIN_CORES_TO_RESERVE {
            return None;
        }
        let worker = cores.pop()?;
        tracing::debug!(
            worker,
            feeders = cores.len(),
            "reserved a core for the model worker"
        );
        Some(CoreLayout {
            worker,
            feeders: cores,
        })
    });
}

/// Moves the calling thread (the model worker) onto its reserved core, if
/// one was reserved.
pub fn claim_worker_core() {
    if let Some(Some(layout)) = LAYOUT.get() {
        set_this_thread_cores(&[layout.worker]);
    }
}

/// Lowers the calling thread's priority (Linux: its nice value; raising
/// niceness needs no privilege) and keeps it off the worker's reserved core.
/// Elsewhere, or if refused, it stays as it is: scheduling is an
/// optimisation, never a reason to fail a run.
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
    if let Some(Some(layout)) = LAYOUT.get() {
        set_this_thread_cores(&layout.feeders);
    }
}

/// The cores the calling thread may run on, ascending; None where unknown.
fn allowed_cores() -> Option<Vec<usize>> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `set` is a plain bitmask the call fills; 0 is this thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return None;
            }
            let max = libc::CPU_SETSIZE as usize;
            Some((0..max).filter(|&c| libc::CPU_ISSET(c, &set)).collect())
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

fn set_this_thread_cores(cores: &[usize]) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `set` is a plain bitmask built here; 0 is this thread.
        let refused = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cores {
                libc::CPU_SET(c, &mut set);
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
        };
        if refused {
            tracing::debug!(?cores, "could not set a thread's cores");
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cores;
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_can_be_kept_to_one_core() {
        std::thread::spawn(|| {
            let cores = allowed_cores().expect("affinity readable");
            assert!(!cores.is_empty());
            let last = *cores.last().unwrap();
            set_this_thread_cores(&[last]);
            assert_eq!(allowed_cores(), Some(vec![last]));
        })
        .join()
        .unwrap();
    }
}
