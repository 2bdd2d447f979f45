//! CUDA paths. The tests that need a GPU are ignored by `just test` (CI has
//! none) and run by `just test-gpu` on a CUDA machine, where they fail if
//! CUDA is missing; they check what the CPU tests cannot: allocator
//! statistics in the report, and labels that agree with the CPU run.

use std::process::Command;

use crate::util::*;

/// Run with `--ignored` on a machine without CUDA, a GPU test fails here
/// rather than passing without having run.
fn require_cuda() {
    assert!(
        tch::Cuda::is_available(),
        "this test needs a CUDA GPU (run it with `just test-gpu` on one)"
    );
}

#[test]
#[ignore = "needs a CUDA GPU; run with just test-gpu"]
fn cuda_run_reports_memory_per_batch_and_matches_cpu_labels() {
    require_cuda();
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
    for record in read_batch_records(&out) {
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
#[ignore = "needs a CUDA GPU; run with just test-gpu"]
fn cuda_device_out_of_range_is_one_line() {
    require_cuda();
    let dir = tmp();
    let run = Pipeline::new(sample(), dir.path().join("out")).run(&["--device", "cuda:99"]);
    run.expect_code(1);
    assert!(run.stderr.contains("cuda:99"), "{}", run.describe());
}

/// Runs everywhere: on a GPU machine the GPUs are hidden from the run.
#[test]
fn cuda_requested_without_a_gpu_is_one_line() {
    let dir = tmp();
    let out = dir.path().join("out");
    let file = Pipeline::new(sample(), &out).write(&dir.path().join("pipeline.toml"));
    let mut command = Command::new(bin());
    command.args(["run", "--device", "cuda"]).arg(&file);
    let run = run_command(command.env("CUDA_VISIBLE_DEVICES", ""), &out);
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
