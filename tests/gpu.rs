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
        segpredict_worker::cuda_device_count() > 0,
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
    // Every size class ran once before the first row, so reserved memory
    // never grows during the run.
    assert!(report["warm_up_s"].as_f64().is_some(), "{report}");
    assert_eq!(memory["reserved_growth_events_after_warmup"], 0, "{report}");
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

/// `--local-shards all` on CUDA: one shard process per GPU, each seeing only
/// its own GPU, whose outputs together are one single-process run's. With
/// one GPU `all` would start one shard, so the test asks for at least two
/// shards: on a single-GPU machine two shards share GPU 0 (round robin), on
/// a machine with N >= 2 GPUs each of the N shards gets its own.
#[test]
#[ignore = "needs a CUDA GPU; run with just test-gpu"]
fn cuda_local_shards_give_one_processs_output_one_gpu_each() {
    require_cuda();
    let gpus = segpredict_worker::cuda_device_count();
    let shards = gpus.max(2);
    let dir = tmp();
    // Row groups of 25 rows: shards are dealt (file, row group) units, so one
    // row group would give every row to shard 0 (seen on the H200).
    let input = rowgroups_input(dir.path(), 200, 25);
    let ids = ids_of(&read_input(&input));
    let single_out = dir.path().join("single");
    Pipeline::new(&input, &single_out)
        .run(&["--device", "cuda"])
        .expect_code(0);
    let single = read_output(&single_out);
    let out = dir.path().join("local");
    let count = if gpus >= 2 {
        "all".to_string()
    } else {
        shards.to_string()
    };
    let run = Pipeline::new(&input, &out).run(&["--device", "cuda", "--local-shards", &count]);
    run.expect_code(0);
    assert!(out.join("_SUCCESS").is_file(), "{}", run.describe());
    let output = read_output(&out);
    assert_each_id_once(ids.iter().map(String::as_str), &output, &read_rejects(&out));
    let single_by_id = by_id(&single);
    for row in &output {
        let want = single_by_id[row.id.as_str()];
        // f32 on the same GPU model; the shards' batches hold other rows
        // (other padded shapes), so scores may differ in the last bits.
        assert!(
            row.label_id == want.label_id && (row.score - want.score).abs() <= 1e-3,
            "id {}: label_id {} score {}, single process {} {}",
            row.id,
            row.label_id,
            row.score,
            want.label_id,
            want.score
        );
    }
    let report = read_report(&out);
    let reports = report["shards"].as_array().expect("one report per shard");
    assert_eq!(reports.len(), shards, "{report}");
    let mut seen: Vec<(String, String)> = reports
        .iter()
        .map(|r| {
            (
                r["shard"].as_str().unwrap_or("").to_string(),
                r["cuda_visible_devices"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    seen.sort();
    let expected: Vec<(String, String)> = (0..shards)
        .map(|i| (format!("{i}/{shards}"), (i % gpus).to_string()))
        .collect();
    assert_eq!(seen, expected, "shard -> CUDA_VISIBLE_DEVICES");
    for r in reports {
        assert_eq!(r["device"], "cuda:0", "each shard sees one GPU: {r}");
        assert!(
            report_u64(r, "rows_out") > 0,
            "every shard predicts rows: {r}"
        );
        assert!(
            r["memory"]["peak_reserved_bytes"].as_i64().unwrap_or(0) > 0,
            "{r}"
        );
    }
}

/// `speed --streams 2` alternates the batches over two CUDA streams of the
/// pool and still times every batch: the rate is the batches' segments over
/// the time, and the stream count is recorded.
#[test]
#[ignore = "needs a CUDA GPU; run with just test-gpu"]
fn cuda_speed_over_two_streams_times_every_batch() {
    require_cuda();
    let dir = tmp();
    let mut pipeline = Pipeline::new(sample(), dir.path().join("out"));
    pipeline.max_segments = 2048;
    let file = pipeline.write(&dir.path().join("p.toml"));
    let json = dir.path().join("speed.json");
    let timed = run_command(
        Command::new(bin())
            .args(["speed", file.to_str().unwrap(), "--device", "cuda"])
            .args(["--batches", "20", "--streams", "2", "--json"])
            .arg(&json),
        dir.path(),
    );
    timed.expect_code(0);
    assert!(
        timed.stdout.contains("over 2 streams"),
        "{}",
        timed.describe()
    );
    let measured: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let speed = &measured["speed"];
    assert_eq!(speed["streams"], 2, "{measured}");
    assert_eq!(speed["batches"], 20, "{measured}");
    let seconds = speed["seconds"].as_f64().unwrap();
    let rate = speed["segments_per_s"].as_f64().unwrap();
    let segments = speed["segments"].as_f64().unwrap();
    assert_eq!(segments, 2048.0, "{measured}");
    assert!(
        (rate * seconds - 20.0 * segments).abs() < 1e-6 * rate * seconds,
        "{measured}"
    );
    let median = speed["batch_ms_median"].as_f64().unwrap();
    assert!(median > 0.0 && median <= seconds * 1e3, "{measured}");
}

/// A CUDA size-class bundle of digits-small (classes 256 and 1024, f32):
/// `SEGPREDICT_CUDA_BUNDLE` when set (built beforehand, e.g. by
/// benches/gpu/size-classes), else built here with tools/make_models.py
/// (a few minutes: three programs).
fn cuda_bundle(dir: &std::path::Path) -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("SEGPREDICT_CUDA_BUNDLE") {
        return path.into();
    }
    let path = dir.join("digits-small.cuda.classes.pt2");
    let built = Command::new(python())
        .arg(repo().join("tools/make_models.py"))
        .args(["--aoti", "--only", "digits-small", "--device", "cuda"])
        .args([
            "--size-classes",
            "256,1024",
            "--jobs",
            "3",
            "--no-check",
            "--out",
        ])
        .arg(&path)
        .output()
        .expect("running tools/make_models.py");
    assert!(
        built.status.success(),
        "building the CUDA bundle: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    path
}

/// On CUDA a size-class bundle replays each class's CUDA graph, captured
/// during the warm-up, for its batches (the report's `model_paths`), with
/// the labels of the CPU run; `cuda_graphs = false` runs the class models
/// themselves; memory does not grow after the warm-up either way.
#[test]
#[ignore = "needs a CUDA GPU; run with just test-gpu"]
fn cuda_size_classes_replay_their_graphs_with_the_cpu_runs_labels() {
    require_cuda();
    let dir = tmp();
    let bundle = cuda_bundle(dir.path());
    let cpu = by_id(&baseline().output);
    for graphs in [true, false] {
        let out = dir.path().join(format!("out-{graphs}"));
        let mut pipeline = Pipeline::new(sample(), &out);
        pipeline.model = bundle.clone();
        pipeline.max_segments = 1024;
        pipeline
            .bucketing_extra
            .push("size_classes = [256, 1024]".into());
        pipeline.model_extra.push(format!("cuda_graphs = {graphs}"));
        let run = pipeline.run(&["--device", "cuda"]);
        run.expect_code(0);
        let report = read_report(&out);
        assert_eq!(
            report["memory"]["reserved_growth_events_after_warmup"], 0,
            "{report}"
        );
        let paths = report["model_paths"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let ran = |segments: u64| -> Vec<String> {
            let of = paths.iter().filter(|p| p["segments"] == segments);
            of.map(|p| p["ran"].as_str().unwrap().to_string()).collect()
        };
        let want = if graphs { "static+graph" } else { "static" };
        for class in [256, 1024] {
            assert!(
                ran(class).iter().any(|r| r == want),
                "{class}: {:?} ({})",
                ran(class),
                run.describe()
            );
        }
        let gpu = read_output(&out);
        assert_eq!(gpu.len(), SAMPLE_ROWS);
        let agree = gpu
            .iter()
            .filter(|r| {
                cpu.get(r.id.as_str())
                    .is_some_and(|c| c.label_id == r.label_id)
            })
            .count();
        assert!(
            agree * 1000 >= gpu.len() * 998,
            "{agree} of {} labels agree",
            gpu.len()
        );
    }
}
