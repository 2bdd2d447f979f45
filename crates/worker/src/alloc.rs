//! The caching allocator's statistics and device events, through
//! `csrc/alloc_stats.cpp`.
//!
//! tch binds none of these; the shim catches every C++ exception and answers
//! "no accelerator" as an ordinary value, so on CPU the stats are `None`.

use std::ffi::{c_char, c_int, c_void, CStr};

use segpredict_core::message::MemoryStats;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct RawStats {
    allocated_current: i64,
    allocated_peak: i64,
    reserved_current: i64,
    reserved_peak: i64,
    inactive_split_current: i64,
    num_alloc_retries: i64,
    num_ooms: i64,
    device_free: i64,
    device_total: i64,
}

extern "C" {
    fn seg_alloc_stats(
        device_index: c_int,
        out: *mut RawStats,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn seg_reset_peak_stats(device_index: c_int, err: *mut c_char, err_len: usize) -> c_int;
    fn seg_empty_cache(err: *mut c_char, err_len: usize) -> c_int;
    fn seg_event_record(
        device_index: c_int,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn seg_event_synchronize(event: *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn seg_event_elapsed_ms(
        start: *mut c_void,
        end: *mut c_void,
        out: *mut f64,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn seg_event_free(event: *mut c_void);
    fn seg_stream_get(
        device_index: c_int,
        current: c_int,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn seg_stream_make_current(stream: *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn seg_stream_synchronize(stream: *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn seg_stream_free(stream: *mut c_void);
    fn seg_pin_memory(
        tensor: *mut c_void,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn seg_inference_mode_enter() -> *mut std::ffi::c_void;
    fn seg_inference_mode_exit(guard: *mut std::ffi::c_void);
}

/// libtorch's inference mode on this thread while the guard lives. Not
/// `Send`: it must be dropped on the thread that made it.
pub struct InferenceModeGuard {
    guard: *mut std::ffi::c_void,
}

impl InferenceModeGuard {
    /// Enters inference mode on this thread until the guard drops. If the
    /// shim could not make a guard, nothing is entered and the drop does
    /// nothing.
    pub fn enter() -> Self {
        // SAFETY: the shim returns a heap guard or null, never throws.
        Self {
            guard: unsafe { seg_inference_mode_enter() },
        }
    }
}

impl Drop for InferenceModeGuard {
    fn drop(&mut self) {
        if !self.guard.is_null() {
            // SAFETY: made by seg_inference_mode_enter on this thread (the
            // raw pointer keeps the type !Send) and released once.
            unsafe { seg_inference_mode_exit(self.guard) }
        }
    }
}

const ERR_LEN: usize = 512;

/// An error the C++ shim reported, or a call it could not be given.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// A C++ exception the shim caught; its `what()` is all there is of it.
    #[error("{call}: {what}")]
    Cpp {
        /// The shim function that caught it.
        call: &'static str,
        /// The exception's `what()`.
        what: String,
    },
    /// A device index too large to hand to C.
    #[error("device index {index} does not fit a C int")]
    DeviceIndex {
        /// The index asked for.
        index: usize,
        /// The conversion's error.
        #[source]
        source: std::num::TryFromIntError,
    },
    /// Pinned host memory was asked for on a machine with no accelerator,
    /// where it means nothing.
    #[error("pinning host memory needs an accelerator")]
    NoAccelerator,
}

/// `Ok(true)`: done; `Ok(false)`: no accelerator; an error otherwise.
fn shim_result(
    call: &'static str,
    code: c_int,
    err: &[c_char; ERR_LEN],
) -> Result<bool, ShimError> {
    match code {
        0 => Ok(true),
        1 => Ok(false),
        _ => {
            // SAFETY: the shim always NUL-terminates within ERR_LEN.
            let what = unsafe { CStr::from_ptr(err.as_ptr()) };
            Err(ShimError::Cpp {
                call,
                what: what.to_string_lossy().into_owned(),
            })
        }
    }
}

fn device_index(index: usize) -> Result<c_int, ShimError> {
    c_int::try_from(index).map_err(|source| ShimError::DeviceIndex { index, source })
}
/// The statistics of CUDA device `index`; `Ok(None)` without an accelerator.
pub fn stats(index: usize) -> Result<Option<MemoryStats>, ShimError> {
    let mut raw = RawStats::default();
    let mut err = [0 as c_char; ERR_LEN];
    let index = device_index(index)?;
    // SAFETY: `raw` and `err` outlive the call; the shim writes within bounds.
    let code = unsafe { seg_alloc_stats(index, &mut raw, err.as_mut_ptr(), ERR_LEN) };
    Ok(
        shim_result("alloc_stats", code, &err)?.then_some(MemoryStats {
            allocated: raw.allocated_current,
            allocated_peak: raw.allocated_peak,
            reserved: raw.reserved_current,
            reserved_peak: raw.reserved_peak,
            inactive_split: raw.inactive_split_current,
            alloc_retries: raw.num_alloc_retries,
            ooms: raw.num_ooms,
            device_free: raw.device_free,
            device_total: raw.device_total,
        }),
    )
}

/// Starts a new peak-measuring window on device `index`.
pub fn reset_peaks(index: usize) -> Result<(), ShimError> {
    let mut err = [0 as c_char; ERR_LEN];
    let index = device_index(index)?;
    // SAFETY: `err` outlives the call.
    let code = unsafe { seg_reset_peak_stats(index, err.as_mut_ptr(), ERR_LEN) };
    shim_result("reset_peak_stats", code, &err).map(|_| ())
}

/// Returns cached, unused blocks to the driver (after an out-of-memory).
pub fn empty_cache() -> Result<(), ShimError> {
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: `err` outlives the call.
    let code = unsafe { seg_empty_cache(err.as_mut_ptr(), ERR_LEN) };
    shim_result("empty_cache", code, &err).map(|_| ())
}

/// A pinned copy of a host tensor, for a non-blocking upload.
pub fn pin_memory(tensor: &tch::Tensor) -> Result<tch::Tensor, ShimError> {
    let mut out = std::ptr::null_mut();
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: the shim reads the tensor (a live `at::Tensor*`, which is what
    // tch's handle is) and on success sets `out` to a new heap `at::Tensor`,
    // which tch's `Tensor` owns and frees like any other.
    let code = unsafe {
        seg_pin_memory(
            tensor.as_ptr() as *mut c_void,
            &mut out,
            err.as_mut_ptr(),
            ERR_LEN,
        )
    };
    if shim_result("pin_memory", code, &err)? {
        // SAFETY: `out` is a fresh `at::Tensor*` owned by no one else.
        Ok(unsafe { tch::Tensor::from_ptr(out as *mut torch_sys::C_tensor) })
    } else {
        Err(ShimError::NoAccelerator)
    }
}

/// A timing event recorded on the device's current stream: the device passes
/// it once everything queued before it has run. Not `Send`: it stays with the
/// worker thread that records and waits on it.
pub struct DeviceEvent {
    event: *mut c_void,
}

impl DeviceEvent {
    /// Records an event on CUDA device `index`; `Ok(None)` without an accelerator.
    pub fn record(index: usize) -> Result<Option<Self>, ShimError> {
        let mut event = std::ptr::null_mut();
        let mut err = [0 as c_char; ERR_LEN];
        let index = device_index(index)?;
        // SAFETY: `event` and `err` outlive the call; the shim sets `event`
        // to a heap event only when it returns 0.
        let code = unsafe { seg_event_record(index, &mut event, err.as_mut_ptr(), ERR_LEN) };
        Ok(shim_result("event_record", code, &err)?.then_some(Self { event }))
    }

    /// Blocks until the device has passed this event.
    pub fn synchronize(&self) -> Result<(), ShimError> {
        let mut err = [0 as c_char; ERR_LEN];
        // SAFETY: `self.event` is a live event made by seg_event_record.
        let code = unsafe { seg_event_synchronize(self.event, err.as_mut_ptr(), ERR_LEN) };
        shim_result("event_synchronize", code, &err).map(|_| ())
    }

    /// Device milliseconds from `self` to `end`; both must have been passed.
    pub fn elapsed_ms(&self, end: &DeviceEvent) -> Result<f64, ShimError> {
        let mut ms = 0.0;
        let mut err = [0 as c_char; ERR_LEN];
        // SAFETY: both events are live; `ms` and `err` outlive the call.
        let code = unsafe {
            seg_event_elapsed_ms(self.event, end.event, &mut ms, err.as_mut_ptr(), ERR_LEN)
        };
        shim_result("event_elapsed_ms", code, &err).map(|_| ms)
    }
}

impl Drop for DeviceEvent {
    fn drop(&mut self) {
        // SAFETY: made by seg_event_record and freed once, here.
        unsafe { seg_event_free(self.event) }
    }
}

/// A stream of a CUDA device (`segpredict speed --streams`). Not `Send`: it
/// stays with the worker thread whose current stream it sets.
pub struct DeviceStream {
    stream: *mut c_void,
}

impl DeviceStream {
    /// The calling thread's current stream on device `index` (to restore it
    /// later); `Ok(None)` without an accelerator.
    pub fn current(index: usize) -> Result<Option<Self>, ShimError> {
        Self::get(index, true)
    }

    /// A stream from device `index`'s pool; `Ok(None)` without an accelerator.
    pub fn from_pool(index: usize) -> Result<Option<Self>, ShimError> {
        Self::get(index, false)
    }

    fn get(index: usize, current: bool) -> Result<Option<Self>, ShimError> {
        let mut stream = std::ptr::null_mut();
        let mut err = [0 as c_char; ERR_LEN];
        let index = device_index(index)?;
        // SAFETY: `stream` and `err` outlive the call; the shim sets
        // `stream` to a heap stream only when it returns 0.
        let code = unsafe {
            seg_stream_get(
                index,
                c_int::from(current),
                &mut stream,
                err.as_mut_ptr(),
                ERR_LEN,
            )
        };
        Ok(shim_result("stream_get", code, &err)?.then(|| Self { stream }))
    }

    /// Makes this the calling thread's current stream on its device: the
    /// model's work queued next, and events recorded next, go to it.
    pub fn make_current(&self) -> Result<(), ShimError> {
        let mut err = [0 as c_char; ERR_LEN];
        // SAFETY: `self.stream` is a live stream made by seg_stream_get.
        let code = unsafe { seg_stream_make_current(self.stream, err.as_mut_ptr(), ERR_LEN) };
        shim_result("stream_make_current", code, &err).map(|_| ())
    }

    /// Blocks until this stream has run everything queued on it.
    pub fn synchronize(&self) -> Result<(), ShimError> {
        let mut err = [0 as c_char; ERR_LEN];
        // SAFETY: `self.stream` is a live stream made by seg_stream_get.
        let code = unsafe { seg_stream_synchronize(self.stream, err.as_mut_ptr(), ERR_LEN) };
        shim_result("stream_synchronize", code, &err).map(|_| ())
    }
}

impl Drop for DeviceStream {
    fn drop(&mut self) {
        // SAFETY: made by seg_stream_get and freed once, here.
        unsafe { seg_stream_free(self.stream) }
    }
}
