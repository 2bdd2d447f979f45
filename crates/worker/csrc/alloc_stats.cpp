// Allocator statistics, cache control and stream events for segpredict.
//
// tch 0.24 binds none of the caching allocator's statistics nor device
// events, so this file exposes the few calls segpredict needs behind a C
// ABI. Every function runs inside `guarded`, which catches all C++
// exceptions: an exception crossing into Rust is undefined behaviour, and
// "no accelerator" must be an ordinary answer, not a crash.
#include <ATen/DeviceAccelerator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Event.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>

namespace {

// Return codes shared by every function below.
constexpr int kOk = 0;
constexpr int kNoAccelerator = 1;
constexpr int kError = 2;

void copy_error(const char* what, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) return;
  std::strncpy(err, what, err_len - 1);
  err[err_len - 1] = '\0';
}

// Runs `body` when there is an accelerator; kNoAccelerator when there is
// none; kError with the exception's message in `err` when it throws.
template <typename Body>
int guarded(char* err, size_t err_len, Body&& body) {
  try {
    if (!at::accelerator::getAccelerator(false).has_value()) return kNoAccelerator;
    body();
    return kOk;
  } catch (const std::exception& e) {
    copy_error(e.what(), err, err_len);
    return kError;
  } catch (...) {
    copy_error("unknown C++ exception", err, err_len);
    return kError;
  }
}

}  // namespace

extern "C" {

// Flat copy of the statistics segpredict reports; all byte counts in bytes.
struct SegAllocStats {
  int64_t allocated_current;
  int64_t allocated_peak;
  int64_t reserved_current;
  int64_t reserved_peak;
  int64_t inactive_split_current;
  int64_t num_alloc_retries;
  int64_t num_ooms;
  int64_t device_free;
  int64_t device_total;
};

int seg_alloc_stats(int device_index, SegAllocStats* out, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    auto idx = static_cast<c10::DeviceIndex>(device_index);
    auto stats = at::accelerator::getDeviceStats(idx);
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    out->allocated_current = stats.allocated_bytes[agg].current;
    out->allocated_peak = stats.allocated_bytes[agg].peak;
    out->reserved_current = stats.reserved_bytes[agg].current;
    out->reserved_peak = stats.reserved_bytes[agg].peak;
    out->inactive_split_current = stats.inactive_split_bytes[agg].current;
    out->num_alloc_retries = stats.num_alloc_retries;
    out->num_ooms = stats.num_ooms;
    auto info = at::accelerator::getMemoryInfo(idx);
    out->device_free = static_cast<int64_t>(info.first);
    out->device_total = static_cast<int64_t>(info.second);
  });
}

int seg_reset_peak_stats(int device_index, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    at::accelerator::resetPeakStats(static_cast<c10::DeviceIndex>(device_index));
  });
}

int seg_empty_cache(char* err, size_t err_len) {
  return guarded(err, err_len, [] { at::accelerator::emptyCache(); });
}

// Records a timing event on the current stream of `device_index`; the caller
// owns *out and frees it with seg_event_free.
int seg_event_record(int device_index, void** out, char* err, size_t err_len) {
  *out = nullptr;
  return guarded(err, err_len, [&] {
    auto idx = static_cast<c10::DeviceIndex>(device_index);
    auto device_type = at::accelerator::getAccelerator(true).value();
    auto event = std::make_unique<c10::Event>(device_type, c10::EventFlag::BACKEND_DEFAULT);
    event->record(at::accelerator::getCurrentStream(idx));
    *out = event.release();
  });
}

// Blocks the calling thread until the stream has passed the event.
int seg_event_synchronize(void* event, char* err, size_t err_len) {
  return guarded(err, err_len, [&] { static_cast<c10::Event*>(event)->synchronize(); });
}

// Milliseconds of device time from `start` to `end` (both passed).
int seg_event_elapsed_ms(void* start, void* end, double* out, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    *out = static_cast<c10::Event*>(start)->elapsedTime(*static_cast<c10::Event*>(end));
  });
}

// A stream of device `device_index` on the heap: the thread's current one
// (`current` != 0, to restore it later) or one from the device's pool
// (`segpredict speed --streams`). Through the generic accelerator API, so
// the shim needs no CUDA headers.
int seg_stream_get(int device_index, int current, void** out, char* err, size_t err_len) {
  *out = nullptr;
  return guarded(err, err_len, [&] {
    auto idx = static_cast<c10::DeviceIndex>(device_index);
    auto device_type = at::accelerator::getAccelerator(true).value();
    auto stream = current ? at::accelerator::getCurrentStream(idx)
                          : c10::impl::getDeviceGuardImpl(device_type)
                                ->getStreamFromGlobalPool(c10::Device(device_type, idx));
    *out = new c10::Stream(stream);
  });
}

// Makes `stream` the calling thread's current stream on its device: what
// the model queues next (and events record) goes there.
int seg_stream_make_current(void* stream, char* err, size_t err_len) {
  return guarded(err, err_len,
                 [&] { at::accelerator::setCurrentStream(*static_cast<c10::Stream*>(stream)); });
}

// Blocks the calling thread until `stream` has run everything queued on it.
int seg_stream_synchronize(void* stream, char* err, size_t err_len) {
  return guarded(err, err_len, [&] { static_cast<c10::Stream*>(stream)->synchronize(); });
}

void seg_stream_free(void* stream) { delete static_cast<c10::Stream*>(stream); }

void seg_event_free(void* event) {
  try {
    delete static_cast<c10::Event*>(event);
  } catch (...) {
  }
}

// A pinned (page-locked) copy of the host tensor `tensor` (a tch tensor, an
// at::Tensor*), which a non-blocking copy to the device can read while the
// host moves on. tch's pin_memory passes a device, which libtorch 2.11
// warns is deprecated on every call; this passes none.
int seg_pin_memory(void* tensor, void** out, char* err, size_t err_len) {
  *out = nullptr;
  return guarded(err, err_len, [&] {
    *out = new at::Tensor(static_cast<at::Tensor*>(tensor)->pin_memory());
  });
}

// Enters inference mode on the calling thread until the returned guard is
// released with seg_inference_mode_exit on that same thread. tch binds only
// no_grad; inference mode also skips version counters and view tracking.
void* seg_inference_mode_enter() {
  try {
    return new c10::InferenceMode(true);
  } catch (...) {
    return nullptr;
  }
}

void seg_inference_mode_exit(void* guard) {
  delete static_cast<c10::InferenceMode*>(guard);
}

}  // extern "C"
