//! AOTInductor packages (`.pt2`, from `torch._inductor.aoti_compile_and_package`)
//! through `csrc/aoti_package.cpp`.
//!
//! A package is compiled ahead of time for one device type (and, on CPU,
//! one instruction set), with its dtype fixed. So loading checks the
//! package's metadata against the run before its compiled code is opened,
//! and [`check_inputs_of`] runs one tiny forward pass of a checking copy
//! built from the pipeline's inputs, so a wrong input count or dtype is
//! found at start-up, before any row is read.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Mutex, PoisonError};

use tch::{Device, Kind, Tensor};

use super::{ModelBackend, ModelFormat};
use crate::ModelDtype;
use segpredict_core::message::{ExtraSpec, InputSpec};

extern "C" {
    fn seg_archive_kind(
        path: *const c_char,
        out: *mut c_int,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn seg_aoti_metadata(
        path: *const c_char,
        model: *const c_char,
        out: *mut c_char,
        out_len: usize,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn seg_aoti_load(
        path: *const c_char,
        model: *const c_char,
        device_index: c_int,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn seg_aoti_run(
        handle: *mut c_void,
        inputs: *const *mut c_void,
        n_inputs: usize,
        out: *mut *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn seg_aoti_free(handle: *mut c_void);
}

pub(super) const ERR_LEN: usize = 1024;

/// The model an archive holds under this name is what every loader takes
/// by default: a plain package's only model, a size-class bundle's dynamic
/// one.
pub const DYNAMIC_MODEL: &str = "model";
const METADATA_LEN: usize = 16 * 1024;

/// The metadata key where `tools/make_models.py --aoti` records the dtype
/// the package takes (`f32`, `bf16` or `f16`), as `[model] dtype` spells it.
pub const DTYPE_KEY: &str = "segpredict.dtype";

/// A model file's format, told by its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveKind {
    /// A TorchScript module (`torch.jit.save`), run through tch.
    TorchScript,
    /// An AOTInductor package (`.pt2`), run through its compiled code.
    Aoti,
}

/// What libtorch, or the package's own compiled code, said when a call
/// into the package failed (first line; see `csrc/aoti_package.cpp`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PackageError(pub(super) String);

/// Why the start-up forward pass failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The probe's input tensors could not be built.
    #[error("building the inputs")]
    Tensor(#[from] tch::TchError),
    /// The package refused the inputs (their shape or dtype is not what it
    /// was compiled for).
    #[error(transparent)]
    Run(#[from] PackageError),
    /// It ran but did not answer one score per label per row.
    #[error("on {rows} rows it returned shape {size:?}, expected [{rows}, {n_labels}] ({n_labels} labels)")]
    Shape {
        /// Rows the probe gave it.
        rows: i64,
        /// The output's shape.
        size: Vec<i64>,
        /// Labels in the labels file.
        n_labels: usize,
    },
}

/// Why an AOTInductor package cannot run here, or this pipeline's inputs.
/// All but the reading errors are settled by the file and the machine, so
/// a retry fails the same way.
#[derive(Debug, thiserror::Error)]
pub enum AotiError {
    /// The file is not a zip archive libtorch can open.
    #[error("model {path} is neither a TorchScript module nor an AOTInductor package")]
    NotAModel {
        /// The model file.
        path: PathBuf,
        /// What the archive reader said.
        #[source]
        source: PackageError,
    },
    #[error(
        "model {path} is neither a TorchScript module nor an AOTInductor package: a PyTorch \
         archive with neither TorchScript code nor `archive_format` = pt2"
    )]
    /// A PyTorch archive of another kind (`torch.save` weights, say).
    OtherArchive {
        /// The model file.
        path: PathBuf,
    },
    #[error("model {path}: `format = \"{set}\"` but the file is {found} (leave `format` out to tell by content)")]
    /// `[model] format` names one format and the file is the other.
    FormatContradicted {
        /// The model file.
        path: PathBuf,
        /// The format the pipeline file set.
        set: &'static str,
        /// What the file is, as a phrase.
        found: &'static str,
    },
    /// The path cannot be passed to C.
    #[error("model path {path} holds a NUL byte")]
    NulInPath {
        /// The model file.
        path: PathBuf,
    },
    /// The package's metadata could not be read.
    #[error("model {path}: cannot read the AOTInductor package's metadata")]
    Metadata {
        /// The model file.
        path: PathBuf,
        /// What the package loader said.
        #[source]
        source: PackageError,
    },
    #[error(
        "model {path} is an AOTInductor package compiled for {package}, but the run is on {run} \
         (a package runs only on the device type it was compiled for{hint})"
    )]
    /// The package was compiled for another device type than the run's
    /// (`cuda` against `cpu`).
    WrongDevice {
        /// The model file.
        path: PathBuf,
        /// The device type it was compiled for.
        package: String,
        /// The run's device type.
        run: String,
        /// What to do instead, starting `; ` (or empty).
        hint: &'static str,
    },
    #[error(
        "model {path} is an AOTInductor package compiled for {package}; this machine is {host} \
         (rebuild the package here: tools/make_models.py --aoti)"
    )]
    /// A CPU package compiled for another OS or architecture: its native
    /// code cannot load here.
    WrongMachine {
        /// The model file.
        path: PathBuf,
        /// `OS ARCH` the package was compiled on.
        package: String,
        /// `OS ARCH` of this machine.
        host: String,
    },
    #[error(
        "model {path} is an AOTInductor package compiled for the CPU instruction set `{isa}`, \
         which this CPU lacks ({missing}); rebuild the package on this kind of machine \
         (tools/make_models.py --aoti)"
    )]
    /// A CPU package whose vector instructions this CPU lacks: run, it
    /// would die of SIGILL at its first one.
    MissingIsa {
        /// The model file.
        path: PathBuf,
        /// The instruction sets the package records (`AOTI_CPU_ISA`).
        isa: String,
        /// The CPU flags they need that `/proc/cpuinfo` does not list,
        /// space-separated.
        missing: String,
    },
    /// The package's recorded segment bound does not parse.
    #[error("model {path}: its metadata's segpredict.max_segments is {value:?}, not a number of segments")]
    BadBound {
        /// The model file.
        path: PathBuf,
        /// The value recorded.
        value: String,
    },
    /// A `[model]` setting that a package fixes when it is compiled
    /// (`channels_last`, say), set in the pipeline file.
    #[error("model {path}: {setting} (an AOTInductor package fixes this when it is compiled)")]
    Setting {
        /// The model file.
        path: PathBuf,
        /// The setting and what to do about it, for the message.
        setting: String,
    },
    /// The package's loader failed (a library missing, a damaged file).
    #[error("cannot load AOTInductor package {path}")]
    Load {
        /// The model file.
        path: PathBuf,
        /// What the loader said.
        #[source]
        source: PackageError,
    },
    #[error(
        "model {path}: its inputs were not checked before the run's threads started \
         (segpredict_worker::prepare_process was not called); a bug in segpredict"
    )]
    /// A package loaded without [`crate::prepare_process`] having run
    /// first: a bug, never the user's doing.
    InputsUnchecked {
        /// The model file.
        path: PathBuf,
    },
    #[error(
        "model {path}: its metadata's segpredict.size_class is {recorded:?}, but the model is named for \
         size class {class} (a size-class bundle from tools/make_models.py --size-classes names each \
         class's model class_<N>)"
    )]
    /// A size-class bundle's `class_<N>` model records another class
    /// than N (or none): it would be given batches of the wrong shape.
    ClassMismatch {
        /// The model file and the model's name in it.
        path: PathBuf,
        /// The class its name says.
        class: usize,
        /// The class its metadata records, if any.
        recorded: Option<String>,
    },
    /// The archive's listing could not be read.
    #[error("model {path}: cannot list the models the package holds")]
    Listing {
        /// The model file.
        path: PathBuf,
        /// What the zip reader said.
        #[source]
        source: zip::result::ZipError,
    },
    #[error(
        "model {path} holds models for the size classes {packaged:?} and no dynamic model, but this \
         run's batches also come in {missing}; rebuild it with tools/make_models.py --aoti \
         --size-classes {wanted}, or with its dynamic model (without --no-dynamic), or set \
         [bucketing] size_classes to classes it holds"
    )]
    /// A bundle without a dynamic model lacks a model for some of the
    /// batch sizes this run's bucketing makes.
    ClassesUncovered {
        /// The model file.
        path: PathBuf,
        /// The size classes it holds models for.
        packaged: Vec<usize>,
        /// The classes it lacks, or "every segment total" when batches are
        /// not padded to classes.
        missing: String,
        /// The run's classes, comma-separated, for the command to paste.
        wanted: String,
    },
    /// The start-up forward pass failed on this pipeline's inputs.
    #[error("model {path} does not take this pipeline's inputs")]
    Inputs {
        /// The model file.
        path: PathBuf,
        /// How the probe failed.
        #[source]
        source: ProbeError,
    },
}

/// What the package says about itself (`AOTI_DEVICE_KEY`, `AOTI_CPU_ISA`,
/// ..., and any `aot_inductor.metadata` given when it was compiled).
#[derive(Debug, Clone, Default)]
pub struct PackageMetadata(BTreeMap<String, String>);

impl PackageMetadata {
    fn parse(lines: &str) -> Self {
        Self(
            lines
                .lines()
                .filter_map(|line| line.split_once('\t'))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// The value recorded under `key`; an empty value counts as absent.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// `cpu`, `cuda`, ...: the device type the package was compiled for.
    pub fn device_key(&self) -> Option<&str> {
        self.get("AOTI_DEVICE_KEY")
    }

    /// The most segments a batch may hold, as tools/make_models.py records
    /// it for a CUDA package (its export's upper bound on the segments):
    /// `Some(Err(value))` for a value that is not a positive number, which
    /// must not be taken for "no bound".
    pub fn max_segments(&self) -> Option<Result<usize, &str>> {
        let value = self.get("segpredict.max_segments")?;
        Some(match value.trim().parse::<usize>() {
            Ok(bound) if bound > 0 => Ok(bound),
            _ => Err(value),
        })
    }

    /// The dtype the package takes, when it was recorded (see [`DTYPE_KEY`]).
    pub fn dtype(&self) -> Option<&str> {
        self.get(DTYPE_KEY)
    }
}

/// Settings of `[model]` that an AOTInductor package cannot follow: it was
/// compiled with its layouts and dtype.
#[derive(Debug, Clone, Copy, Default)]
pub struct AotiSettings {
    /// `channels_last` when set in the pipeline.
    pub channels_last: Option<bool>,
    /// `dtype` (f32 unless set), which must be the package's.
    pub dtype: ModelDtype,
    /// `jit_profiling` (TorchScript's executor); `false` is refused.
    pub jit_profiling: bool,
}

/// A loaded package (one model of an archive), ready to run on its device.
pub struct AotiPackage {
    handle: NonNull<c_void>,
    path: PathBuf,
    /// Its name in the archive ([`DYNAMIC_MODEL`] for a plain package).
    model: String,
    device: Device,
    kind: Kind,
    /// `segpredict.max_segments` in the package's metadata.
    max_segments: Option<usize>,
}

// SAFETY: the loader is a plain heap object with no thread affinity: it is
// built on the main thread and then used by the model worker alone (the
// type is not `Sync`, so never from two threads at once). On CUDA it runs on
// the current stream of its device, which the using thread sets.
unsafe impl Send for AotiPackage {}

impl AotiPackage {
    /// Checks the package against the run (device type, CPU instruction
    /// set, settings), takes the outcome of its input check (made before
    /// the process's threads started: [`check_inputs_of`]), then loads it on
    /// `device`.
    pub fn load(path: &Path, device: Device, settings: AotiSettings) -> Result<Self, AotiError> {
        take_input_check(path)?;
        if device.is_cuda() {
            warn_of_generated_scans(path);
        }
        Self::open(path, DYNAMIC_MODEL, device, settings)
    }

    /// The archive's model `model` checked against the run ([`checked_metadata`])
    /// and loaded; its inputs were checked before the threads started.
    pub(super) fn open(
        path: &Path,
        model: &str,
        device: Device,
        settings: AotiSettings,
    ) -> Result<Self, AotiError> {
        let (metadata, kind, max_segments) = checked_metadata(path, model, device, settings)?;
        tracing::info!(
            path = %path.display(),
            model,
            device = metadata.device_key().unwrap_or(""),
            cpu_isa = metadata.get("AOTI_CPU_ISA").unwrap_or(""),
            dtype = ?kind,
            "AOTInductor package"
        );
        let started = std::time::Instant::now();
        let handle = load_package(path, model, device)?;
        tracing::debug!(
            seconds = started.elapsed().as_secs_f64(),
            model,
            "package: the running copy loaded"
        );
        Ok(Self {
            handle,
            path: path.to_path_buf(),
            model: model.to_string(),
            device,
            kind,
            max_segments,
        })
    }

    /// The loader, for the CUDA graph shim (`graph.rs`).
    pub(super) fn handle(&self) -> *mut c_void {
        self.handle.as_ptr()
    }

    /// `(segments, segment_counts, *extras)`, on the package's device, in
    /// calling order -> logits.
    pub(super) fn run(&self, inputs: &[Tensor]) -> Result<Tensor, PackageError> {
        let pointers: Vec<*mut c_void> = inputs.iter().map(|t| t.as_ptr() as *mut c_void).collect();
        let mut out = std::ptr::null_mut();
        let mut err = [0 as c_char; ERR_LEN];
        // SAFETY: the handle is a live loader; the pointers are live
        // `at::Tensor*` (tch's handles), which the shim only reads, for the
        // length of the call. On success `out` is a fresh heap `at::Tensor`.
        let code = unsafe {
            seg_aoti_run(
                self.handle.as_ptr(),
                pointers.as_ptr(),
                pointers.len(),
                &mut out,
                err.as_mut_ptr(),
                ERR_LEN,
            )
        };
        if code != 0 {
            return Err(error_text(&err));
        }
        // SAFETY: `out` is a new `at::Tensor*` owned by no one else.
        Ok(unsafe { Tensor::from_ptr(out as *mut torch_sys::C_tensor) })
    }
}

/// The package's metadata checked against the run, before its compiled
/// code is opened (a CUDA package's cannot even be loaded on a CPU-only
/// machine, and another CPU's would die of SIGILL): the metadata, the dtype
/// it takes and its segment bound.
pub(super) fn checked_metadata(
    path: &Path,
    model: &str,
    device: Device,
    settings: AotiSettings,
) -> Result<(PackageMetadata, Kind, Option<usize>), AotiError> {
    let metadata = read_metadata(path, model)?;
    check_device(path, &metadata, device)?;
    if device == Device::Cpu {
        check_machine(path, &metadata)?;
        check_cpu_isa(path, &metadata, &host_cpu_flags())?;
    }
    let kind = package_kind(path, &metadata, settings)?;
    let max_segments =
        metadata
            .max_segments()
            .transpose()
            .map_err(|value| AotiError::BadBound {
                path: path.to_path_buf(),
                value: value.to_string(),
            })?;
    Ok((metadata, kind, max_segments))
}

/// Checks the package against the run as [`AotiPackage::load`] does, then
/// loads a copy of it and runs that copy once on inputs shaped as the
/// pipeline's ([`check_inputs`]). The caller has switched AOTInductor's
/// input checks on for this copy (`process.rs` says how and why); the copy
/// is dropped after.
pub fn check_inputs_of(
    path: &Path,
    device: Device,
    settings: AotiSettings,
    inputs: &InputSpec,
    n_labels: usize,
) -> Result<(), AotiError> {
    let probe = ProbeShape {
        inputs,
        n_labels,
        segments: None,
    };
    check_model_inputs(path, DYNAMIC_MODEL, device, settings, probe)
}

/// What the start-up forward pass gives a model: the pipeline's inputs,
/// the labels it must answer, and for a size class's model its (static)
/// segment count.
#[derive(Clone, Copy)]
pub(super) struct ProbeShape<'a> {
    pub inputs: &'a InputSpec,
    pub n_labels: usize,
    pub segments: Option<usize>,
}

/// [`check_inputs_of`] for the archive's model `model`.
pub(super) fn check_model_inputs(
    path: &Path,
    model: &str,
    device: Device,
    settings: AotiSettings,
    probe: ProbeShape,
) -> Result<(), AotiError> {
    let (_, kind, max_segments) = checked_metadata(path, model, device, settings)?;
    let started = std::time::Instant::now();
    let checking = AotiPackage {
        handle: load_package(path, model, device)?,
        path: path.to_path_buf(),
        model: model.to_string(),
        device,
        kind,
        max_segments,
    };
    let loaded = started.elapsed().as_secs_f64();
    check_inputs(&checking, probe)?;
    tracing::debug!(
        load_s = loaded,
        check_s = started.elapsed().as_secs_f64() - loaded,
        model,
        "package: the checking copy loaded and run"
    );
    Ok(())
}

/// The outcome of the input check of the package at a path, from
/// [`record_input_check`] (made before the threads) to
/// [`AotiPackage::load`] (on the model's loading thread).
static INPUT_CHECK: Mutex<Option<(PathBuf, Result<(), AotiError>)>> = Mutex::new(None);

/// Keeps the outcome of [`check_inputs_of`] for `path` until the package loads.
pub fn record_input_check(path: &Path, outcome: Result<(), AotiError>) {
    let mut record = INPUT_CHECK.lock().unwrap_or_else(PoisonError::into_inner);
    *record = Some((path.to_path_buf(), outcome));
}

/// The recorded outcome of `path`'s input check: a failure is reported
/// once; a pass stays recorded for later loads in the same process.
pub(super) fn take_input_check(path: &Path) -> Result<(), AotiError> {
    let mut record = INPUT_CHECK.lock().unwrap_or_else(PoisonError::into_inner);
    match record.take() {
        Some((checked, outcome)) if checked == path => {
            if outcome.is_ok() {
                *record = Some((checked, Ok(())));
            }
            outcome
        }
        other => {
            *record = other;
            Err(AotiError::InputsUnchecked {
                path: path.to_path_buf(),
            })
        }
    }
}

impl ModelBackend for AotiPackage {
    /// The package's reason for a failure comes back as libtorch's would,
    /// so an out-of-memory inside the package is classified (and recovered
    /// from) like any other.
    fn forward(&self, inputs: &[Tensor]) -> Result<Tensor, tch::TchError> {
        self.run(inputs)
            .map_err(|PackageError(reason)| tch::TchError::Torch(reason))
    }

    fn format(&self) -> ModelFormat {
        ModelFormat::Aoti
    }

    fn max_segments(&self) -> Option<usize> {
        self.max_segments
    }

    fn input_kind(&self) -> Option<Kind> {
        Some(self.kind)
    }
}

impl Drop for AotiPackage {
    fn drop(&mut self) {
        // SAFETY: made by seg_aoti_load and freed once, here.
        unsafe { seg_aoti_free(self.handle.as_ptr()) }
    }
}

/// The model file's format by its records; an error names what is wrong
/// with a file that is neither (not a zip, truncated, another archive).
pub fn archive_kind(path: &Path) -> Result<ArchiveKind, AotiError> {
    let c_path = c_path(path)?;
    let mut kind: c_int = 0;
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: `c_path`, `kind` and `err` outlive the call.
    let code = unsafe { seg_archive_kind(c_path.as_ptr(), &mut kind, err.as_mut_ptr(), ERR_LEN) };
    match (code, kind) {
        (0, 1) => Ok(ArchiveKind::TorchScript),
        (0, 2) => Ok(ArchiveKind::Aoti),
        (0, _) => Err(AotiError::OtherArchive {
            path: path.to_path_buf(),
        }),
        _ => Err(AotiError::NotAModel {
            path: path.to_path_buf(),
            source: error_text(&err),
        }),
    }
}

/// Warns when a CUDA package computes a scan (cumsum, ...) in a kernel
/// inductor generated: see [`super::kernels`]. A package whose kernels
/// cannot be named gets the general warning instead; loading it already
/// succeeded.
pub(super) fn warn_of_generated_scans(path: &Path) {
    const WHY: &str = "such a kernel gave wrong running totals, and wrong labels, in segpredict's H200 benchmark (torch 2.11). Export with cumsum compiled as a call to ATen (docs/src/models.md, \"AOTInductor packages\"), or compare a sample of the package's output with the model's";
    match super::kernels::generated_scan_kernels(path) {
        Ok(Some(kernels)) if kernels.is_empty() => {}
        Ok(Some(kernels)) => tracing::warn!(
            path = %path.display(),
            kernels = %kernels.join(", "),
            "this CUDA package computes a scan (cumsum, ...) in a kernel inductor generated; {WHY}"
        ),
        Ok(None) => tracing::warn!(
            path = %path.display(),
            "could not find this CUDA package's generated source, so cannot tell whether it computes a scan (cumsum, ...) in a kernel inductor generated; {WHY}"
        ),
        Err(error) => tracing::warn!(
            path = %path.display(),
            %error,
            "could not read this CUDA package's kernel names; if it computes a scan (cumsum, ...) in a kernel inductor generated, {WHY}"
        ),
    }
}

/// One forward pass of a copy of the package that checks its inputs, on
/// two tiny rows shaped as the pipeline's: a package that takes another
/// number of inputs, other dtypes or shapes, or returns something other
/// than `[rows, n_labels]` logits, fails here, at start-up, with the
/// package's own reason.
fn check_inputs(package: &AotiPackage, shape: ProbeShape) -> Result<(), AotiError> {
    let n_labels = shape.n_labels;
    let probe = || -> Result<(), ProbeError> {
        let _no_grad = tch::no_grad_guard();
        let segments = shape.segments.map_or(PROBE_ROWS + 1, |s| s as i64);
        let inputs = probe_inputs(shape.inputs, package.device, package.kind, segments)?;
        let logits = package.run(&inputs)?;
        let size = logits.size();
        if size != [PROBE_ROWS, n_labels as i64] {
            return Err(ProbeError::Shape {
                rows: PROBE_ROWS,
                size,
                n_labels,
            });
        }
        Ok(())
    };
    probe().map_err(|source| AotiError::Inputs {
        path: named(&package.path, &package.model),
        source,
    })
}

/// How errors name a model of an archive: the file, and the model's name
/// when it is not the archive's default one.
pub(super) fn named(path: &Path, model: &str) -> PathBuf {
    match model {
        DYNAMIC_MODEL => path.to_path_buf(),
        _ => PathBuf::from(format!("{} (model {model})", path.display())),
    }
}

fn read_metadata(path: &Path, model: &str) -> Result<PackageMetadata, AotiError> {
    let c_path = c_path(path)?;
    let c_model = c_model(path, model)?;
    let mut lines = vec![0 as c_char; METADATA_LEN];
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: the buffers outlive the call; the shim writes within their
    // lengths and NUL-terminates.
    let code = unsafe {
        seg_aoti_metadata(
            c_path.as_ptr(),
            c_model.as_ptr(),
            lines.as_mut_ptr(),
            METADATA_LEN,
            err.as_mut_ptr(),
            ERR_LEN,
        )
    };
    if code != 0 {
        return Err(AotiError::Metadata {
            path: named(path, model),
            source: error_text(&err),
        });
    }
    // SAFETY: NUL-terminated by the shim within METADATA_LEN.
    let text = unsafe { CStr::from_ptr(lines.as_ptr()) }.to_string_lossy();
    Ok(PackageMetadata::parse(&text))
}

fn check_device(path: &Path, metadata: &PackageMetadata, device: Device) -> Result<(), AotiError> {
    let package = metadata.device_key().unwrap_or("an unrecorded device");
    let run = match device {
        Device::Cpu => "cpu",
        Device::Cuda(_) => "cuda",
        _ => "another device",
    };
    if package == run {
        return Ok(());
    }
    Err(AotiError::WrongDevice {
        path: path.to_path_buf(),
        package: package.to_string(),
        run: run.to_string(),
        hint: match device {
            Device::Cpu => {
                "; build a CPU package with tools/make_models.py --aoti, or run on a GPU"
            }
            _ => "; set [model] device = \"cpu\" or build a CUDA package",
        },
    })
}

/// A CPU package's code is native to one architecture and OS.
fn check_machine(path: &Path, metadata: &PackageMetadata) -> Result<(), AotiError> {
    let host = format!("{} {}", std::env::consts::OS, std::env::consts::ARCH);
    let package = format!(
        "{} {}",
        metadata
            .get("AOTI_PLATFORM")
            .unwrap_or(std::env::consts::OS),
        metadata
            .get("AOTI_MACHINE")
            .unwrap_or(std::env::consts::ARCH),
    );
    if package == host {
        return Ok(());
    }
    Err(AotiError::WrongMachine {
        path: path.to_path_buf(),
        package,
        host,
    })
}

/// A CPU package is compiled for the vector instruction set of the machine
/// that built it (`AOTI_CPU_ISA`, e.g. `AVX512 AVX512_VNNI`); run elsewhere
/// its first vector instruction would kill the process (SIGILL). Each ISA
/// name maps to the compiler flags torch uses for it (torch/_inductor/
/// cpu_vec_isa.py), checked against /proc/cpuinfo. The names do not list
/// every flag torch may add (`-mavx512bf16` where the builder has it), so
/// this catches the common mismatch (an AVX-512 package on an AVX2 host),
/// not every one.
fn check_cpu_isa(
    path: &Path,
    metadata: &PackageMetadata,
    host: &Option<Vec<String>>,
) -> Result<(), AotiError> {
    let (Some(isa), Some(host)) = (metadata.get("AOTI_CPU_ISA"), host) else {
        return Ok(());
    };
    let missing: Vec<&str> = isa
        .split_whitespace()
        .flat_map(|name| cpu_flags_of_isa(name).iter().copied())
        .filter(|flag| !host.iter().any(|h| h == flag))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(AotiError::MissingIsa {
        path: path.to_path_buf(),
        isa: isa.to_string(),
        missing: missing.join(" "),
    })
}

/// /proc/cpuinfo's names for the instructions an inductor ISA compiles to;
/// none for ISAs that need no check here (other architectures, none).
fn cpu_flags_of_isa(name: &str) -> &'static [&'static str] {
    match name {
        "AVX2" => &["avx2", "fma", "f16c"],
        "AVX512" => &["avx512f", "avx512dq", "avx512vl", "avx512bw", "fma"],
        "AVX512_VNNI" => &["avx512_vnni"],
        "AMX_TILE" => &["amx_tile", "amx_bf16", "amx_int8"],
        _ => &[],
    }
}

/// The host CPU's feature flags; `None` where /proc/cpuinfo is not there
/// to read (the check is then skipped, not failed).
fn host_cpu_flags() -> Option<Vec<String>> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let flags = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))?
        .split_once(':')?
        .1;
    Some(flags.split_whitespace().map(str::to_string).collect())
}

/// The dtype the package takes: the `dtype` setting's (f32 by default),
/// which must be the one the package records; a package that records none
/// is checked by the start-up forward pass.
fn package_kind(
    path: &Path,
    metadata: &PackageMetadata,
    settings: AotiSettings,
) -> Result<Kind, AotiError> {
    let refuse = |setting: String| AotiError::Setting {
        path: path.to_path_buf(),
        setting,
    };
    if settings.channels_last == Some(true) {
        return Err(refuse(
            "`channels_last = true` is for TorchScript models; remove it".into(),
        ));
    }
    if !settings.jit_profiling {
        return Err(refuse(
            "`jit_profiling = false` is for TorchScript models; remove it".into(),
        ));
    }
    let recorded = match metadata.dtype() {
        Some(text) => Some(parse_dtype(text).ok_or_else(|| {
            refuse(format!(
                "the package records `{DTYPE_KEY}` = `{text}`, not f32, bf16 or f16"
            ))
        })?),
        None => None,
    };
    let dtype = match recorded {
        Some(package) if package != settings.dtype => {
            return Err(refuse(format!(
                "`dtype = \"{}\"` (f32 unless set) but the package takes {}; set dtype = \"{}\"",
                dtype_name(settings.dtype),
                dtype_name(package),
                dtype_name(package)
            )))
        }
        _ => settings.dtype,
    };
    Ok(dtype_kind(dtype))
}

fn parse_dtype(text: &str) -> Option<ModelDtype> {
    match text {
        "f32" => Some(ModelDtype::F32),
        "bf16" => Some(ModelDtype::Bf16),
        "f16" => Some(ModelDtype::F16),
        _ => None,
    }
}

fn dtype_name(dtype: ModelDtype) -> &'static str {
    match dtype {
        ModelDtype::F32 => "f32",
        ModelDtype::Bf16 => "bf16",
        ModelDtype::F16 => "f16",
    }
}

fn dtype_kind(dtype: ModelDtype) -> Kind {
    match dtype {
        ModelDtype::F32 => Kind::Float,
        ModelDtype::Bf16 => Kind::BFloat16,
        ModelDtype::F16 => Kind::Half,
    }
}

fn load_package(path: &Path, model: &str, device: Device) -> Result<NonNull<c_void>, AotiError> {
    let c_path = c_path(path)?;
    let c_model = c_model(path, model)?;
    let device_index = match device {
        // Indices come from the device check, far below c_int::MAX.
        Device::Cuda(index) => c_int::try_from(index).unwrap_or(c_int::MAX),
        _ => -1,
    };
    let mut handle = std::ptr::null_mut();
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: `c_path`, `handle` and `err` outlive the call; on success the
    // shim sets `handle` to a heap loader that `AotiPackage` frees.
    let code = unsafe {
        seg_aoti_load(
            c_path.as_ptr(),
            c_model.as_ptr(),
            device_index,
            &mut handle,
            err.as_mut_ptr(),
            ERR_LEN,
        )
    };
    let failed = |source| AotiError::Load {
        path: named(path, model),
        source,
    };
    if code != 0 {
        return Err(failed(error_text(&err)));
    }
    NonNull::new(handle).ok_or_else(|| failed(PackageError("the loader returned nothing".into())))
}

/// Rows in the start-up forward pass: two, so a model that mixes up rows
/// and segments shows it.
const PROBE_ROWS: i64 = 2;

/// Two rows of one segment each, one padding segment, one ragged value per
/// row, zeros throughout (0 is a valid id for any embedding). Every size is
/// at least 2: the input checks refuse smaller dynamic sizes.
fn probe_inputs(
    spec: &InputSpec,
    device: Device,
    kind: Kind,
    segments: i64,
) -> Result<Vec<Tensor>, tch::TchError> {
    let rows = PROBE_ROWS;
    let mut segment_shape = vec![segments];
    segment_shape.extend(spec.segment_shape.iter().map(|&d| d as i64));
    let ints = (Kind::Int64, device);
    let mut inputs = vec![
        Tensor::f_zeros(&segment_shape, (kind, device))?,
        Tensor::f_ones([rows], ints)?,
    ];
    for extra in &spec.extras {
        match extra {
            ExtraSpec::Ragged => {
                inputs.push(Tensor::f_zeros([rows], ints)?);
                inputs.push(Tensor::f_ones([rows], ints)?);
            }
            ExtraSpec::Vector { width } => {
                inputs.push(Tensor::f_zeros([rows, *width as i64], (kind, device))?)
            }
            ExtraSpec::Float => inputs.push(Tensor::f_zeros([rows], (kind, device))?),
            ExtraSpec::Int => inputs.push(Tensor::f_zeros([rows], ints)?),
        }
    }
    Ok(inputs)
}

fn c_model(path: &Path, model: &str) -> Result<CString, AotiError> {
    CString::new(model).map_err(|_| AotiError::NulInPath {
        path: path.to_path_buf(),
    })
}

fn c_path(path: &Path) -> Result<CString, AotiError> {
    CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| AotiError::NulInPath {
        path: path.to_path_buf(),
    })
}

pub(super) fn error_text(err: &[c_char; ERR_LEN]) -> PackageError {
    // SAFETY: the shim always NUL-terminates within ERR_LEN.
    let text = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
    PackageError(first_line(&text))
}

/// libtorch's messages can run to several lines; a start-up error is one.
fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(pairs: &[(&str, &str)]) -> PackageMetadata {
        PackageMetadata(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn flags(list: &str) -> Option<Vec<String>> {
        Some(list.split_whitespace().map(str::to_string).collect())
    }

    fn repo_file(relative: &str) -> PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(relative)
    }

    #[test]
    fn the_format_is_told_by_content() {
        let torchscript = archive_kind(&repo_file("models/digits-small.pt")).unwrap();
        assert_eq!(torchscript, ArchiveKind::TorchScript);
        let package = archive_kind(&repo_file("models/digits-small.pt2")).unwrap();
        assert_eq!(package, ArchiveKind::Aoti);
        let parquet = repo_file("sample_data/digits.parquet");
        let err = archive_kind(&parquet).unwrap_err().to_string();
        assert!(
            err.contains("digits.parquet") && err.contains("neither"),
            "{err}"
        );
    }

    #[test]
    fn a_packages_metadata_is_read_without_loading_it() {
        let metadata = read_metadata(&repo_file("models/digits-small.pt2"), DYNAMIC_MODEL).unwrap();
        assert_eq!(metadata.device_key(), Some("cpu"));
        assert_eq!(metadata.dtype(), Some("f32"));
        assert!(metadata.get("AOTI_CPU_ISA").is_some());
    }

    #[test]
    fn a_packages_segment_bound_is_read_from_its_metadata() {
        let bounds = |value: &str| {
            let metadata = metadata(&[("segpredict.max_segments", value)]);
            metadata.max_segments().map(|b| b.map_err(str::to_string))
        };
        assert_eq!(bounds("65536"), Some(Ok(65536)));
        assert_eq!(bounds("many"), Some(Err("many".into())));
        assert_eq!(bounds("0"), Some(Err("0".into())));
        assert_eq!(
            metadata(&[("segpredict.dtype", "bf16")]).max_segments(),
            None
        );
    }

    #[test]
    fn metadata_lines_parse_to_keys_and_values() {
        let m = PackageMetadata::parse(
            "AOTI_DEVICE_KEY\tcpu\nAOTI_CPU_ISA\tAVX512 AVX512_VNNI\nAOTI_COMPUTE_CAPABILITY\t\n",
        );
        assert_eq!(m.device_key(), Some("cpu"));
        assert_eq!(m.get("AOTI_CPU_ISA"), Some("AVX512 AVX512_VNNI"));
        assert_eq!(m.get("AOTI_COMPUTE_CAPABILITY"), None, "empty is absent");
    }

    #[test]
    fn an_avx512_package_is_refused_on_an_avx2_host_naming_what_is_missing() {
        let m = metadata(&[("AOTI_CPU_ISA", "AVX512 AVX512_VNNI")]);
        let err = check_cpu_isa(Path::new("m.pt2"), &m, &flags("sse4_2 avx avx2 fma f16c"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("m.pt2") && err.contains("avx512f") && err.contains("avx512_vnni"),
            "{err}"
        );
        let ok = flags("avx2 fma f16c avx512f avx512dq avx512vl avx512bw avx512_vnni");
        assert!(check_cpu_isa(Path::new("m.pt2"), &m, &ok).is_ok());
    }

    #[test]
    fn an_unknown_host_or_isa_is_not_refused() {
        let m = metadata(&[("AOTI_CPU_ISA", "AVX512")]);
        assert!(check_cpu_isa(Path::new("m.pt2"), &m, &None).is_ok());
        let neon = metadata(&[("AOTI_CPU_ISA", "NEON")]);
        assert!(check_cpu_isa(Path::new("m.pt2"), &neon, &flags("avx2")).is_ok());
    }

    #[test]
    fn a_cuda_package_on_cpu_names_both_devices() {
        let m = metadata(&[("AOTI_DEVICE_KEY", "cuda")]);
        let err = check_device(Path::new("m.pt2"), &m, Device::Cpu)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("compiled for cuda") && err.contains("run is on cpu"),
            "{err}"
        );
        let cpu = metadata(&[("AOTI_DEVICE_KEY", "cpu")]);
        let err = check_device(Path::new("m.pt2"), &cpu, Device::Cuda(0))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("compiled for cpu") && err.contains("run is on cuda"),
            "{err}"
        );
    }

    #[test]
    fn the_dtype_setting_must_be_the_one_the_package_records() {
        let path = Path::new("m.pt2");
        let bf16 = metadata(&[(DTYPE_KEY, "bf16")]);
        let f32_setting = AotiSettings {
            jit_profiling: true,
            ..Default::default()
        };
        let err = package_kind(path, &bf16, f32_setting)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dtype = \"f32\"") && err.contains("takes bf16"),
            "{err}"
        );
        let bf16_setting = AotiSettings {
            dtype: ModelDtype::Bf16,
            ..f32_setting
        };
        assert_eq!(
            package_kind(path, &bf16, bf16_setting).unwrap(),
            Kind::BFloat16
        );
        // Recording none, the setting is taken (and checked at start-up).
        assert_eq!(
            package_kind(path, &PackageMetadata::default(), bf16_setting).unwrap(),
            Kind::BFloat16
        );
    }

    #[test]
    fn torchscript_only_settings_are_refused() {
        let path = Path::new("m.pt2");
        let m = PackageMetadata::default();
        let channels_last = AotiSettings {
            channels_last: Some(true),
            jit_profiling: true,
            ..Default::default()
        };
        let err = package_kind(path, &m, channels_last)
            .unwrap_err()
            .to_string();
        assert!(err.contains("channels_last"), "{err}");
        let err = package_kind(path, &m, AotiSettings::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("jit_profiling"), "{err}");
    }
}
