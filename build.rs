//! Links the `segpredict` binary against libtorch as `segpredict-worker`'s
//! build script does for its own tests: link arguments reach only the
//! targets of the package that prints them, so the binary needs its own.
//! The library directory comes from that crate (`links = "segpredict_torch"`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let lib_dir = std::path::PathBuf::from(
        std::env::var("DEP_SEGPREDICT_TORCH_LIB_DIR")
            .expect("segpredict-worker did not export its libtorch directory"),
    );
    // Without an explicit, non-as-needed link, the linker drops
    // libtorch_cuda (nothing references it by symbol) and CUDA is silently
    // "not available" (tch-rs issues 907 and 980).
    if lib_dir.join("libtorch_cuda.so").exists() {
        no_as_needed("torch_cuda");
    }
    // An AOTInductor package's compiled model is dlopened at run time and
    // names `libtorch.so`; loaded already, it is found without LD_LIBRARY_PATH.
    no_as_needed("torch");
    // An rpath to the venv's libtorch: the binary runs on the machine that
    // built it without LD_LIBRARY_PATH. Elsewhere LD_LIBRARY_PATH still wins.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
}

fn no_as_needed(lib: &str) {
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg=-l{lib}");
    println!("cargo:rustc-link-arg=-Wl,--as-needed");
}
