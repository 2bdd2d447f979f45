//! Links libtorch so the binary finds CUDA where there is one, and builds
//! the small C++ shim that reads the caching allocator's statistics.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/alloc_stats.cpp");
    // torch-sys declares `links = "tch"` and exports the libtorch lib dir.
    let lib_dir = PathBuf::from(
        std::env::var("DEP_TCH_LIBTORCH_LIB")
            .expect("torch-sys did not export DEP_TCH_LIBTORCH_LIB"),
    );
    link_torch_cuda_if_present(&lib_dir);
    // An rpath to the venv's libtorch: the binary runs on the machine that
    // built it without LD_LIBRARY_PATH. Elsewhere LD_LIBRARY_PATH still wins.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    build_alloc_shim(&lib_dir);
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

fn build_alloc_shim(lib_dir: &std::path::Path) {
    let include = lib_dir.join("..").join("include");
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        .file("csrc/alloc_stats.cpp")
        .compile("segpredict_alloc_stats");
}
