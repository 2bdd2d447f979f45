// Allocator statistics and cache control for segpredict.
//
// tch 0.24 binds none of the caching allocator's statistics, so this file
// exposes the few calls segpredict needs behind a C ABI. Every function
// catches all C++ exceptions: an exception crossing into Rust is undefined
// behaviour, and "no accelerator" must be an ordinary answer, not a crash.
#include <ATen/DeviceAccelerator.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <cstdint>
#include <cstring>
#include <exception>

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

static void copy_error(const char* what, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) return;
  std::strncpy(err, what, err_len - 1);
  err[err_len - 1] = '\0';
}

// Returns 0 on success, 1 when there is no accelerator, 2 on error (message in err).
int seg_alloc_stats(int device_index, SegAllocStats* out, char* err, size_t err_len) {
  try {
    if (!at::accelerator::getAccelerator(false).has_value()) return 1;
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
    return 0;
  } catch (const std::exception& e) {
    copy_error(e.what(), err, err_len);
    return 2;
  } catch (...) {
    copy_error("unknown C++ exception", err, err_len);
    return 2;
  }
}

int seg_reset_peak_stats(int device_index, char* err, size_t err_len) {
  try {
    if (!at::accelerator::getAccelerator(false).has_value()) return 1;
    at::accelerator::resetPeakStats(static_cast<c10::DeviceIndex>(device_index));
    return 0;
  } catch (const std::exception& e) {
    copy_error(e.what(), err, err_len);
    return 2;
  } catch (...) {
    copy_error("unknown C++ exception", err, err_len);
    return 2;
  }
}

int seg_empty_cache(char* err, size_t err_len) {
  try {
    if (!at::accelerator::getAccelerator(false).has_value()) return 1;
    at::accelerator::emptyCache();
    return 0;
  } catch (const std::exception& e) {
    copy_error(e.what(), err, err_len);
    return 2;
  } catch (...) {
    copy_error("unknown C++ exception", err, err_len);
    return 2;
  }
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
