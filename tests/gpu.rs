//! CUDA paths. Each test runs only where CUDA is available and says it
//! skipped otherwise (CI has no GPU); on a GPU machine they check what the
//! CPU tests cannot: allocator statistics in the report, and labels that
//! agree with the CPU run.

use crate::util::*;

/// None where there is no GPU: the test prints why and passes.
fn cuda_or_skip(test: &str) -> Option<()> {
    if tch::Cuda::is_available() {
        Some(())
    } else {
        eprintln!("{test}: skipped, CUDA is not available here");
        None
    }
}

#[test]
fn cuda_run_reports_memory_per_batch_and_matches_cpu_labels() {
    let Some(()) = cuda_or_skip("cuda_run_reports_memory_per_batch_and_matches_cpu_labels") else {
        return;
    };
    let dir = tmp();
    let out = dir.path().join("out");
    let run = Pipeline::new(sample(), &out).run(&["--device", "cuda"]);
    run.expect_code(0);
    let report = read_report(&out);
    // libtorch warnings are printed per call: one per batch floods a log.
    assert!(!run.stderr.contains("Warning"), "{}", run.describe());
    assert_eq!(
        report["channels_last"], true,
        "channels-last is the CUDA default"
    );
    let busy = report["device_busy_share"].as_f64().unwrap_or(0.0);
    assert!(busy > 0.0 && busy <= 1.0, "{report}");
    let memory = &report["memory"];
    assert!(
        memory["peak_reserved_bytes"].as_i64().unwrap_or(0) > 0,
        "{report}"
    );
    for record in report["batch_records"].as_array().expect("batch records") {
        let m = &record["memory"];
        assert!(
            m["reserved_peak"].as_i64().unwrap_or(0) >= m["allocated_peak"].as_i64().unwrap_or(0)
        );
        assert!(m["device_total"].as_i64().unwrap_or(0) > 0);
        assert!(
            record["device_ms"].as_f64().unwrap_or(0.0) > 0.0,
            "{record}"
        );
    }
    let cpu = baseline();
    let gpu = read_output(&out);
    let cpu_by_id = by_id(&cpu.output);
    let agree = gpu
        .iter()
        .filter(|r| {
            cpu_by_id
                .get(r.id.as_str())
                .is_some_and(|c| c.label_id == r.label_id)
        })
        .count();
    // f32 on both devices; convolution algorithms differ, so allow a flip or two.
    assert!(
        agree * 1000 >= gpu.len() * 998,
        "{agree} of {} labels agree",
        gpu.len()
    );
    assert_eq!(gpu.len(), SAMPLE_ROWS);
}

#[test]
fn cuda_device_out_of_range_is_one_line() {
    let Some(()) = cuda_or_skip("cuda_device_out_of_range_is_one_line") else {
        return;
    };
    let dir = tmp();
    let run = Pipeline::new(sample(), dir.path().join("out")).run(&["--device", "cuda:99"]);
    run.expect_code(1);
    assert!(run.stderr.contains("cuda:99"), "{}", run.describe());
}

#[test]
fn cuda_requested_without_a_gpu_is_one_line() {
    if tch::Cuda::is_available() {
        eprintln!("cuda_requested_without_a_gpu_is_one_line: skipped, this machine has CUDA");
        return;
    }
    let dir = tmp();
    let run = Pipeline::new(sample(), dir.path().join("out")).run(&["--device", "cuda"]);
    run.expect_code(1);
    let lines: Vec<_> = run
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "{}", run.describe());
    assert!(
        lines[0].contains("CUDA is not available"),
        "{}",
        run.describe()
    );
}
