// AOTInductor packages (.pt2) for segpredict, behind a C ABI.
//
// tch 0.24 binds TorchScript only. These functions wrap libtorch's
// torch::inductor::AOTIModelPackageLoader (exported by libtorch_cpu.so) and
// PyTorch's own zip reader, which tells a package from a TorchScript
// archive. Every function catches all C++ exceptions: an exception crossing
// into Rust is undefined behaviour, and a corrupt file or a wrong input
// count must be an ordinary error with libtorch's message.
#include <ATen/DeviceAccelerator.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int kOk = 0;
constexpr int kError = 2;

void copy_text(const std::string& text, char* out, size_t out_len) {
  if (out == nullptr || out_len == 0) return;
  std::strncpy(out, text.c_str(), out_len - 1);
  out[out_len - 1] = '\0';
}

// Runs `body`; kError with the exception's message in `err` when it throws.
// c10 errors are reported without their C++ backtrace: the caller wants the
// reason on one line.
template <typename Body>
int guarded(char* err, size_t err_len, Body&& body) {
  try {
    body();
    return kOk;
  } catch (const c10::Error& e) {
    copy_text(e.what_without_backtrace(), err, err_len);
  } catch (const std::exception& e) {
    copy_text(e.what(), err, err_len);
  } catch (...) {
    copy_text("unknown C++ exception", err, err_len);
  }
  return kError;
}

// Metadata values are returned as "key\tvalue\n" lines; a tab or newline
// inside a value would break that framing.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

// A package's compiled code catches its own exceptions at its C boundary,
// prints "Error: <reason>" to std::cerr and returns a failure code, on
// which the loader throws a generic "API call failed". This holds std::cerr
// while the package runs, so the reason becomes the error's text instead of
// a stray line on the terminal. Whatever else was written (warnings) is
// passed on when the capture ends. Only the model worker writes to std::cerr
// while a package runs (the other threads are Rust's).
class CerrCapture {
 public:
  CerrCapture() : previous_(std::cerr.rdbuf(buffer_.rdbuf())) {}
  ~CerrCapture() {
    std::cerr.rdbuf(previous_);
    if (!passed_on_) std::cerr << buffer_.str();
  }
  CerrCapture(const CerrCapture&) = delete;
  CerrCapture& operator=(const CerrCapture&) = delete;

  // The package's reason when it gave one (libtorch's own message then
  // says only which call failed), else libtorch's message. A reason given
  // is not passed on: it is in the error.
  std::string explain(const std::string& what) {
    std::string captured = buffer_.str();
    std::string reason;
    std::istringstream lines(captured);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("Error: ", 0) == 0) {
        reason = line.substr(7);
        break;
      }
    }
    if (reason.empty()) return what;
    passed_on_ = true;
    return reason;
  }

 private:
  std::ostringstream buffer_;
  std::streambuf* previous_;
  bool passed_on_ = false;
};

// `guarded` for calls into a package's code: the package's own reason
// leads the error text.
template <typename Body>
int guarded_package_call(char* err, size_t err_len, Body&& body) {
  CerrCapture capture;
  try {
    body();
    return kOk;
  } catch (const c10::Error& e) {
    copy_text(capture.explain(e.what_without_backtrace()), err, err_len);
  } catch (const std::exception& e) {
    copy_text(capture.explain(e.what()), err, err_len);
  } catch (...) {
    copy_text(capture.explain("unknown C++ exception"), err, err_len);
  }
  return kError;
}

// The current stream of the inputs' accelerator device, as the package's
// run takes it; null on CPU. Left null on CUDA, the package would take the
// current stream of the current device, which need not be the inputs'.
void* current_stream_of(const std::vector<at::Tensor>& inputs) {
  if (inputs.empty() || inputs[0].device().is_cpu()) return nullptr;
  return at::accelerator::getCurrentStream(inputs[0].device().index()).native_handle();
}

}  // namespace

extern "C" {

// What a model archive holds, by its records (both formats are zips written
// by PyTorch's stream writer, under one top-level folder).
constexpr int kArchiveOther = 0;
constexpr int kArchiveTorchScript = 1;
constexpr int kArchiveAoti = 2;

int seg_archive_kind(const char* path, int* out, char* err, size_t err_len) {
  *out = kArchiveOther;
  return guarded(err, err_len, [&] {
    caffe2::serialize::PyTorchStreamReader reader(path);
    if (reader.hasRecord("archive_format")) {
      auto [data, size] = reader.getRecord("archive_format");
      std::string format(static_cast<const char*>(data.get()), size);
      if (format == "pt2") {
        *out = kArchiveAoti;
        return;
      }
    }
    if (reader.hasRecord("constants.pkl") || reader.hasRecord("code/__torch__.py")) {
      *out = kArchiveTorchScript;
    }
  });
}

// The package's metadata (AOTI_DEVICE_KEY, AOTI_CPU_ISA, ...), read without
// loading its compiled library, as "key\tvalue\n" lines in `out`.
int seg_aoti_metadata(const char* path, const char* model_name, char* out, size_t out_len,
                      char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    auto metadata =
        torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, model_name);
    std::string lines;
    for (const auto& [key, value] : metadata) {
      lines += one_line(key) + "\t" + one_line(value) + "\n";
    }
    if (lines.size() + 1 > out_len) {
      throw std::runtime_error("the package's metadata is longer than " +
                               std::to_string(out_len - 1) + " bytes");
    }
    copy_text(lines, out, out_len);
  });
}

// Loads the package: extracts it, dlopens its compiled model and loads the
// weights on the package's device (`device_index` picks the CUDA device;
// -1 for the current one). The caller owns *out and frees it with
// seg_aoti_free.
//
// Single-threaded: only the model worker's thread runs the package. The
// thread-aware runner with one model instance makes each call wait on the
// host (an event synchronize) until the previous call's device work is done
// (torch 2.11's model_container.h, reclaim_finished_models), so the worker
// could not queue batch k+1 while batch k runs. On one stream the device
// orders the runs anyway.
// `model_name`: which model of the archive ("model" unless the archive holds several: a
// size-class bundle from tools/make_models.py --size-classes).
int seg_aoti_load(const char* path, const char* model_name, int device_index, void** out,
                  char* err, size_t err_len) {
  *out = nullptr;
  return guarded_package_call(err, err_len, [&] {
    auto loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path, model_name, /*run_single_threaded=*/true, /*num_runners=*/1,
        static_cast<c10::DeviceIndex>(device_index));
    *out = loader.release();
  });
}

// Runs the model on `n_inputs` tensors (tch tensors, i.e. at::Tensor*), on
// the current stream of their device. Its single output becomes a new heap
// at::Tensor in *out (owned by the caller, as tch's Tensor owns it); a model
// with another number of outputs is an error.
int seg_aoti_run(void* handle, void* const* inputs, size_t n_inputs, void** out, char* err,
                 size_t err_len) {
  *out = nullptr;
  return guarded_package_call(err, err_len, [&] {
    auto* loader = static_cast<torch::inductor::AOTIModelPackageLoader*>(handle);
    std::vector<at::Tensor> args;
    args.reserve(n_inputs);
    for (size_t i = 0; i < n_inputs; ++i) {
      args.push_back(*static_cast<const at::Tensor*>(inputs[i]));
    }
    auto outputs = loader->run(args, current_stream_of(args));
    if (outputs.size() != 1) {
      throw std::runtime_error("the model returned " + std::to_string(outputs.size()) +
                               " outputs, expected 1 (the logits)");
    }
    *out = new at::Tensor(std::move(outputs[0]));
  });
}

void seg_aoti_free(void* handle) {
  try {
    delete static_cast<torch::inductor::AOTIModelPackageLoader*>(handle);
  } catch (...) {
  }
}

}  // extern "C"

// ---------------------------------------------------------------------------
// CUDA graphs of a loaded package (built where libtorch has CUDA: build.rs
// defines SEG_CUDA_GRAPHS; elsewhere every call says it is not built in).
//
// A graph is captured once, on a side stream (capture needs a stream other
// than the default one), from one run of the package on inputs that stay
// alive as the graph's static buffers; its memory comes from a private pool
// of the caching allocator, shared by every graph captured with `share`
// (they replay one at a time, on one stream). A replay runs on the current
// stream of the inputs' device, after whatever the caller queued there
// (the copies into the static buffers).
#ifdef SEG_CUDA_GRAPHS
// Only out-of-line functions of libtorch_cuda and libc10_cuda, and c10's
// device-generic streams, guards and events: the CUDA-specific inline ones
// (CUDAStreamGuard, ATen's CUDAEvent) call the CUDA runtime directly and
// would make the binary need libcudart, which only libtorch_cuda finds.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace {
struct SegGraph {
  at::cuda::CUDAGraph graph;
  at::Tensor output;
};
}  // namespace

extern "C" {

int seg_graph_supported() { return 1; }

int seg_graph_capture(void* handle, void* const* inputs, size_t n_inputs, void* share,
                      void** graph_out, void** output_out, char* err, size_t err_len) {
  *graph_out = nullptr;
  *output_out = nullptr;
  return guarded_package_call(err, err_len, [&] {
    auto* loader = static_cast<torch::inductor::AOTIModelPackageLoader*>(handle);
    std::vector<at::Tensor> args;
    for (size_t i = 0; i < n_inputs; ++i) {
      args.push_back(*static_cast<const at::Tensor*>(inputs[i]));
    }
    TORCH_CHECK(!args.empty() && args[0].is_cuda(), "a CUDA graph needs inputs on a CUDA device");
    auto index = args[0].device().index();
    c10::Stream current = at::accelerator::getCurrentStream(index);
    c10::Stream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index).unwrap();
    c10::Event inputs_ready(c10::DeviceType::CUDA);
    inputs_ready.record(current);
    inputs_ready.block(side);
    auto holder = std::make_unique<SegGraph>();
    at::cuda::MempoolId_t pool{0, 0};
    if (share != nullptr) pool = static_cast<SegGraph*>(share)->graph.pool();
    {
      c10::StreamGuard on_side(side);
      holder->graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      std::vector<at::Tensor> outputs;
      try {
        outputs = loader->run(args, side.native_handle());
      } catch (...) {
        try {
          holder->graph.capture_end();
        } catch (...) {
        }
        throw;
      }
      holder->graph.capture_end();
      TORCH_CHECK(outputs.size() == 1, "the model returned ", outputs.size(),
                  " outputs, expected 1 (the logits)");
      holder->output = outputs[0];
    }
    c10::Event captured(c10::DeviceType::CUDA);
    captured.record(side);
    captured.block(current);
    *output_out = new at::Tensor(holder->output);
    *graph_out = holder.release();
  });
}

int seg_graph_replay(void* graph, char* err, size_t err_len) {
  return guarded(err, err_len, [&] { static_cast<SegGraph*>(graph)->graph.replay(); });
}

void seg_graph_free(void* graph) {
  try {
    delete static_cast<SegGraph*>(graph);
  } catch (...) {
  }
}

}  // extern "C"
#else
extern "C" {

int seg_graph_supported() { return 0; }

int seg_graph_capture(void*, void* const*, size_t, void*, void** graph_out, void** output_out,
                      char* err, size_t err_len) {
  *graph_out = nullptr;
  *output_out = nullptr;
  copy_text("this segpredict was built against a libtorch without CUDA: no CUDA graphs", err,
            err_len);
  return kError;
}

int seg_graph_replay(void*, char* err, size_t err_len) {
  copy_text("no CUDA graphs in this build", err, err_len);
  return kError;
}

void seg_graph_free(void*) {}

}  // extern "C"
#endif
