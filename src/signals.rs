//! SIGHUP, SIGINT and SIGTERM: which one arrived, so the exit code can say
//! (129, 130 or 143, the same for the same signal wherever the run was
//! before its shard's `done` record; after it the commit finishes, exit 0),
//! and
//! a cancel flag the stages poll. Installed first thing in `main`, so even a
//! signal in the first moments of a run is handled the same way.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};

use segpredict_core::exit::Signal;

static RECEIVED: AtomicI32 = AtomicI32::new(0);
static CANCEL: OnceLock<Arc<AtomicBool>> = OnceLock::new();

extern "C" fn on_signal(signal: libc::c_int) {
    // Only atomics here: a signal handler may not allocate or lock. The
    // first signal decides the exit code.
    let _ = RECEIVED.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
    if let Some(cancel) = CANCEL.get() {
        cancel.store(true, Ordering::SeqCst);
    }
}

/// Routes SIGHUP, SIGINT and SIGTERM to `cancel`; returns an error when the handler
/// cannot be installed.
pub fn install(cancel: Arc<AtomicBool>) -> std::io::Result<()> {
    let _ = CANCEL.set(cancel);
    for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` only touches atomics, which is async-signal
        // safe; the sigaction struct is zeroed and then filled in.
        let installed = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if installed != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The first SIGHUP, SIGINT or SIGTERM received, if any.
pub fn received() -> Option<Signal> {
    match RECEIVED.load(Ordering::SeqCst) {
        libc::SIGHUP => Some(Signal::Hangup),
        libc::SIGINT => Some(Signal::Interrupt),
        libc::SIGTERM => Some(Signal::Terminate),
        _ => None,
    }
}

/// The raw number of the first signal received (0 when none), to forward it.
pub fn received_raw() -> libc::c_int {
    RECEIVED.load(Ordering::SeqCst)
}
