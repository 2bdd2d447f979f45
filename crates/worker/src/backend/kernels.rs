//! What inductor generated inside a CUDA AOTInductor package, read from the
//! package's wrapper source: the names of its Triton kernels, which carry
//! the operators fused into each (`triton_per_fused_cumsum_0`).
//!
//! Why: in segpredict's H200 benchmark (torch 2.11) a package whose cumsum
//! was compiled into inductor's own scan kernel pooled segments into the
//! wrong rows, and half its labels were wrong, while the same export with
//! cumsum as a call to ATen's kernel matched TorchScript
//! (`benches/gpu/RESULTS.md`, session 4). Nothing in the package's own
//! checks catches that, so the loader warns by name.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;

/// Operators inductor compiles as scans.
const SCAN_OPS: [&str; 5] = ["cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"];

/// The package's Triton kernels that compute a scan, sorted: empty for a
/// package without generated scans (or without Triton kernels: CPU);
/// `None` when the package holds no generated wrapper source to read.
pub fn generated_scan_kernels(path: &Path) -> Result<Option<Vec<String>>, zip::result::ZipError> {
    let mut archive = zip::ZipArchive::new(std::fs::File::open(path)?)?;
    let mut kernels = BTreeSet::new();
    let mut wrappers = 0;
    for index in 0..archive.len() {
        let mut record = archive.by_index(index)?;
        if !record.name().ends_with(".wrapper.cpp") {
            continue;
        }
        let mut source = String::new();
        record.read_to_string(&mut source)?;
        kernels.extend(scan_kernels_in(&source));
        wrappers += 1;
    }
    Ok((wrappers > 0).then(|| kernels.into_iter().collect()))
}

/// Triton kernel names in `source` with a scan among their fused operators.
fn scan_kernels_in(source: &str) -> impl Iterator<Item = String> + '_ {
    source
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("triton_"))
        .filter(|word| word.split('_').any(|part| SCAN_OPS.contains(&part)))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A zip holding one record, as a package holds its files.
    fn package_with(dir: &Path, record: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join("model.pt2");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let stored =
            zip::write::FileOptions::default().compression_method(zip::CompressionMethod::Stored);
        zip.start_file(record, stored).unwrap();
        zip.write_all(text.as_bytes()).unwrap();
        zip.finish().unwrap();
        path
    }

    fn package_with_wrapper(dir: &Path, source: &str) -> std::path::PathBuf {
        package_with(dir, "model/data/aotinductor/model/cabc.wrapper.cpp", source)
    }

    #[test]
    fn an_inductor_scan_kernel_is_found_by_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let source = r#"kernels.triton_per_fused_cumsum_0 = loadKernel("x.cubin", "triton_per_fused_cumsum_0");
            launchKernel(kernels.triton_poi_fused_arange_searchsorted_1, ...);"#;
        let path = package_with_wrapper(dir.path(), source);
        assert_eq!(
            generated_scan_kernels(&path).unwrap().unwrap(),
            ["triton_per_fused_cumsum_0"]
        );
    }

    /// Lines of the wrapper of the H200 package built with cumsum as an ATen
    /// call (session 4, call 1): its kernels' names as inductor wrote them.
    const REAL_CUDA_WRAPPER: &str = r#"
    kernels_.triton_poi_fused_arange_searchsorted_0 = loadKernel("/tmp/ind-aten-cumsum/civ7tbu4jxuqxj5673cl47px4smu6loq6x6hd6gp6si2yabhirzz/cbw3iazxkeiz2f5wac5wjg6d3w7ke7b6gy4kpbej5koxvhergdz3.cubin", "triton_poi_fused_arange_searchsorted_0", 0, cubin_dir_);
    kernels_.triton_per_fused_convolution_div_index_put_mean_relu_view_zeros_4 = loadKernel("/tmp/ind-aten-cumsum/civ7tbu4jxuqxj5673cl47px4smu6loq6x6hd6gp6si2yabhirzz/c6oul2g2d7y3wnmujyo4ihdtqkmselevmcwvu4pjwd4vnnbzkzww.cubin", "triton_per_fused_convolution_div_index_put_mean_relu_view_zeros_4", 64, cubin_dir_);
    launchKernel(kernels_.triton_poi_fused_embedding_index_put_6, grid_0, grid_1, grid_2, 4, 0, kernel_args_, stream_);
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_cumsum(arg10_1, 0L, nullptr, &buf1_handle));
    "#;

    #[test]
    fn a_real_cuda_wrapper_with_cumsum_as_aten_has_no_generated_scan() {
        let dir = tempfile::tempdir().unwrap();
        let path = package_with_wrapper(dir.path(), REAL_CUDA_WRAPPER);
        assert_eq!(generated_scan_kernels(&path).unwrap(), Some(vec![]));
        // The same names with inductor's own scan in one of them are found.
        let fused =
            REAL_CUDA_WRAPPER.replace("arange_searchsorted_0", "arange_cumsum_searchsorted_0");
        let path = package_with_wrapper(dir.path(), &fused);
        assert_eq!(
            generated_scan_kernels(&path).unwrap().unwrap(),
            ["triton_poi_fused_arange_cumsum_searchsorted_0"]
        );
    }

    #[test]
    fn a_package_without_generated_source_is_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = package_with(dir.path(), "model/archive_format", "pt2");
        assert_eq!(generated_scan_kernels(&path).unwrap(), None);
    }

    #[test]
    fn the_repository_cpu_package_is_read_and_has_no_triton_kernel() {
        // CPU kernels are C++ (`cpp_fused_*`): nothing to name, but the real
        // package's wrapper is found and read.
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("models/digits-small.pt2");
        assert_eq!(generated_scan_kernels(&path).unwrap(), Some(vec![]));
    }

    #[test]
    fn a_file_that_is_not_a_zip_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.pt2");
        std::fs::write(&path, b"not a zip").unwrap();
        assert!(generated_scan_kernels(&path).is_err());
    }
}
