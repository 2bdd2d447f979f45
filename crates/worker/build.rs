//! Links libtorch (for this crate's own test binaries; the binary crate's
//! build script does the same for `segpredict`) so the binary finds CUDA where there is one and can load
//! AOTInductor packages, and builds the small C++ shims: the caching
//! allocator's statistics, and the AOTInductor package loader.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/alloc_stats.cpp");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc/aoti_package.cpp");
    // torch-sys declares `links = "tch"` and exports the libtorch lib dir.
    let lib_dir = PathBuf::from(
        std::env::var("DEP_TCH_LIBTORCH_LIB")
            .expect("torch-sys did not export DEP_TCH_LIBTORCH_LIB"),
    );
    link_torch_cuda_if_present(&lib_dir);
    link_libtorch_for_aoti_packages();
    // An rpath to the venv's libtorch: the binary runs on the machine that
    // built it without LD_LIBRARY_PATH. Elsewhere LD_LIBRARY_PATH still wins.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    build_shims(&lib_dir);
    // For the binary crate's build script (DEP_SEGPREDICT_TORCH_LIB_DIR):
    // link arguments reach only the targets of the package that prints them.
    println!("cargo:lib_dir={}", lib_dir.display());
}

/// An AOTInductor package's compiled model is dlopened at run time and
/// names `libtorch.so` as a dependency. Loaded already (by name, from the
/// rpath), it is found without LD_LIBRARY_PATH; nothing references it by
/// symbol, so without --no-as-needed the linker would drop it.
fn link_libtorch_for_aoti_packages() {
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg=-ltorch");
    println!("cargo:rustc-link-arg=-Wl,--as-needed");
}

/// Without an explicit, non-as-needed link, the linker drops libtorch_cuda
/// (nothing references it by symbol) and CUDA is silently "not available"
/// (tch-rs issues 907 and 980).
fn link_torch_cuda_if_present(lib_dir: &std::path::Path) {
    if lib_dir.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
}

/// Include directories for the CUDA runtime's headers beside a
/// pip-installed libtorch with CUDA: the runtime's own (`nvidia/cu13/include`,
/// CUDA 12's `nvidia/cuda_runtime/include`, or `CUDA_HOME`'s), first, then
/// one with `crt/host_config.h`, which the runtime wheel lacks (Triton's copy
/// of the toolkit headers has it; only types are used from it). `None` for a
/// libtorch without CUDA or without these headers.
fn cuda_include(lib_dir: &std::path::Path) -> Option<Vec<PathBuf>> {
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    if !lib_dir.join("libtorch_cuda.so").exists() {
        return None;
    }
    let site = lib_dir.join("../..");
    let home = std::env::var("CUDA_HOME")
        .ok()
        .map(|h| PathBuf::from(h).join("include"));
    let has = |file: &'static str| move |dir: &PathBuf| dir.join(file).exists();
    let runtime = [
        site.join("nvidia/cu13/include"),
        site.join("nvidia/cuda_runtime/include"),
    ]
    .into_iter()
    .chain(home.clone())
    .find(has("cuda_runtime_api.h"))?;
    let crt = [runtime.clone(), site.join("triton/backends/nvidia/include")]
        .into_iter()
        .chain(home)
        .chain([PathBuf::from("/usr/local/cuda/include")])
        .find(has("crt/host_config.h"))?;
    Some(vec![runtime, crt])
}

fn build_shims(lib_dir: &std::path::Path) {
    let include = lib_dir.join("..").join("include");
    let mut build = cc::Build::new();
    // CUDA graphs of AOTInductor packages (`csrc/aoti_package.cpp`), where
    // libtorch has CUDA; elsewhere the shim says they are not built in.
    let cuda = cuda_include(lib_dir);
    if let Some(dirs) = &cuda {
        build.includes(dirs).define("SEG_CUDA_GRAPHS", None);
    } else {
        println!("cargo:warning=libtorch without CUDA (or its CUDA headers): CUDA graphs are not built in");
    }
    build
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        .file("csrc/alloc_stats.cpp")
        .file("csrc/aoti_package.cpp")
        .compile("segpredict_shims");
    if cuda.is_some() {
        // at::cuda::CUDAGraph (libtorch_cuda) and c10's CUDA streams (libc10_cuda).
        println!("cargo:rustc-link-lib=dylib=torch_cuda");
        println!("cargo:rustc-link-lib=dylib=c10_cuda");
    }
}
