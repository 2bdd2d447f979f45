//! The Kubernetes manifests under `pipelines/deploy/`: valid against the
//! Kubernetes API schemas (offline, `kubernetes-validate`), saying what the
//! README says they say (Indexed, one GPU a pod, exit codes 2 and 3 fail an
//! index at once), and their pods' commands, run here exactly as Kubernetes
//! would run them, produce one complete output.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::util::*;

fn manifest(name: &str) -> PathBuf {
    repo().join("pipelines/deploy").join(name)
}

/// The manifests' resources, validated by `tests/deploy.py`.
fn resources(files: &[&str]) -> Vec<Value> {
    let output = Command::new(python())
        .arg(repo().join("tests/deploy.py"))
        .args(files.iter().map(|f| manifest(f)))
        .output()
        .expect("running tests/deploy.py");
    assert!(
        output.status.success(),
        "a manifest does not validate: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let documents: Vec<Value> = serde_json::from_slice(&output.stdout).expect("deploy.py's JSON");
    documents
        .into_iter()
        .map(|d| d["resource"].clone())
        .collect()
}

/// The Job spec of a Job, or of a CronJob's job template.
fn job_spec(resource: &Value) -> &Value {
    match resource["kind"].as_str() {
        Some("Job") => &resource["spec"],
        Some("CronJob") => &resource["spec"]["jobTemplate"]["spec"],
        other => panic!("unexpected kind {other:?}"),
    }
}

fn container(spec: &Value) -> &Value {
    let containers = spec["template"]["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "one container a pod");
    &containers[0]
}

/// `--shards N` as the container's command line says it.
fn shards_in_command(container: &Value) -> u64 {
    let words: Vec<String> = container["command"]
        .as_array()
        .unwrap()
        .iter()
        .chain(container["args"].as_array().unwrap())
        .flat_map(|w| {
            w.as_str()
                .unwrap()
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let at = words
        .iter()
        .position(|w| w == "--shards")
        .expect("the command passes --shards");
    words[at + 1].trim_matches('"').parse().unwrap()
}

#[test]
fn manifests_validate_and_fail_an_index_only_on_permanent_exit_codes() {
    let resources = resources(&["job.yaml", "cronjob.yaml"]);
    assert_eq!(resources.len(), 2);
    for resource in &resources {
        let name = resource["metadata"]["name"].as_str().unwrap();
        let spec = job_spec(resource);
        assert_eq!(spec["completionMode"], "Indexed", "{name}");
        let n = spec["completions"].as_u64().unwrap();
        assert_eq!(spec["parallelism"].as_u64(), Some(n), "{name}: parallelism");
        let c = container(spec);
        assert_eq!(shards_in_command(c), n, "{name}: --shards vs completions");
        assert!(
            spec["backoffLimitPerIndex"].as_u64().unwrap() >= 1,
            "{name}"
        );
        assert_eq!(
            spec["template"]["spec"]["restartPolicy"], "Never",
            "{name}: the pod failure policy needs restartPolicy Never"
        );
        assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 1, "{name}");
        let rules = spec["podFailurePolicy"]["rules"].as_array().unwrap();
        let fail_index: Vec<&Value> = rules
            .iter()
            .filter(|r| r["action"] == "FailIndex")
            .collect();
        assert_eq!(fail_index.len(), 1, "{name}: {rules:?}");
        let on = &fail_index[0]["onExitCodes"];
        assert_eq!(on["operator"], "In", "{name}");
        assert_eq!(on["containerName"], c["name"], "{name}");
        let mut codes: Vec<u64> = on["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        codes.sort_unstable();
        assert_eq!(codes, [2, 3], "{name}: the permanent exit codes");
        // No other rule may end the Job or swallow an exit code: the others
        // (1, 130, 143, a kill) must count as retryable failures.
        for rule in rules {
            let action = rule["action"].as_str().unwrap();
            assert!(
                action == "FailIndex" || (action == "Ignore" && rule["onExitCodes"].is_null()),
                "{name}: unexpected rule {rule}"
            );
        }
    }
}

#[test]
fn a_bad_manifest_is_refused_by_the_validator() {
    let dir = tmp();
    let text = std::fs::read_to_string(manifest("job.yaml")).unwrap();
    let bad = dir.path().join("job.yaml");
    std::fs::write(
        &bad,
        text.replace("backoffLimitPerIndex", "backoffLimitPerIdx"),
    )
    .unwrap();
    let output = Command::new(python())
        .arg(repo().join("tests/deploy.py"))
        .arg(&bad)
        .output()
        .expect("running tests/deploy.py");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("backoffLimitPerIdx"), "{stderr}");
}

/// Kubernetes' `$(VAR)` expansion of a container's command and arguments,
/// from the variables defined in its `env` (and `$$` for a literal `$`).
fn expand(word: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(at) = rest.find('$') {
        out += &rest[..at];
        rest = &rest[at..];
        if let Some(tail) = rest.strip_prefix("$$") {
            out.push('$');
            rest = tail;
        } else if let Some(close) = rest.strip_prefix("$(").and_then(|t| t.find(')')) {
            let name = &rest[2..2 + close];
            match env.get(name) {
                Some(value) => out += value,
                None => out += &rest[..close + 3],
            }
            rest = &rest[close + 3..];
        } else {
            out.push('$');
            rest = &rest[1..];
        }
    }
    out + rest
}

/// The container's environment: its `env` values, with the paths the
/// volumes would hold replaced by `mounts` (the only change from the
/// manifest), plus what Kubernetes sets for pod `index`.
fn pod_env(
    container: &Value,
    mounts: &BTreeMap<&str, String>,
    index: u64,
    job_name: &str,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for var in container["env"].as_array().unwrap() {
        let name = var["name"].as_str().unwrap().to_string();
        let value = match (mounts.get(name.as_str()), var["value"].as_str()) {
            (Some(mounted), _) => mounted.clone(),
            (None, Some(value)) => value.to_string(),
            // The downward API: the only one the manifests use is the job name.
            (None, None) => job_name.to_string(),
        };
        env.insert(name, value);
    }
    env.insert("JOB_COMPLETION_INDEX".into(), index.to_string());
    env.remove("LD_LIBRARY_PATH");
    env
}

/// Starts every pod of the Job at once, as `parallelism = completions`
/// does, each with its command, arguments and environment.
fn run_pods(spec: &Value, mounts: &BTreeMap<&str, String>, job_name: &str) -> Vec<RunResult> {
    let c = container(spec);
    let n = spec["completions"].as_u64().unwrap();
    let bin_dir = Path::new(bin()).parent().unwrap().to_path_buf();
    let children: Vec<_> = (0..n)
        .map(|index| {
            let env = pod_env(c, mounts, index, job_name);
            let words: Vec<String> = c["command"]
                .as_array()
                .unwrap()
                .iter()
                .chain(c["args"].as_array().unwrap())
                .map(|w| expand(w.as_str().unwrap(), &env))
                .collect();
            let path = format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            );
            let mut command = Command::new(&words[0]);
            command.args(&words[1..]).envs(&env).env("PATH", path);
            quiet_env(&mut command)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("starting a pod's command")
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().unwrap();
            RunResult {
                code: output.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
                out_dir: PathBuf::new(),
            }
        })
        .collect()
}

#[test]
fn kubernetes_expansion_of_arguments() {
    let env = BTreeMap::from([("A".to_string(), "x y".to_string())]);
    assert_eq!(expand("$(A)/b", &env), "x y/b");
    assert_eq!(expand("$(B)", &env), "$(B)");
    assert_eq!(expand("$$(A)", &env), "$(A)");
    assert_eq!(expand("$HOME", &env), "$HOME");
}

#[test]
fn the_indexed_jobs_pods_predict_every_row_once_and_commit() {
    let dir = tmp();
    let input = rowgroups_input(dir.path(), 300, 25);
    let ids = ids_of(&read_input(&input));
    let out = dir.path().join("night");
    let pipeline = Pipeline::new(&input, dir.path().join("unused"));
    let pipeline_file = pipeline.write(&dir.path().join("nightly.toml"));
    let resource = &resources(&["job.yaml"])[0];
    let mounts = BTreeMap::from([
        ("PIPELINE", pipeline_file.display().to_string()),
        ("INPUT", input.display().to_string()),
        ("OUTPUT", out.display().to_string()),
    ]);
    for pod in run_pods(job_spec(resource), &mounts, "segpredict-night") {
        pod.expect_code(0);
    }
    assert!(out.join("_SUCCESS").is_file());
    let output = read_output(&out);
    assert_each_id_once(ids.iter().map(String::as_str), &output, &read_rejects(&out));
    assert_same_predictions_as_baseline(&output);
}

#[test]
fn the_cronjobs_pods_predict_the_scheduled_night() {
    let dir = tmp();
    // 2026-12-03T01:30Z in minutes since the epoch, as the controller
    // suffixes the job name.
    let minutes: u64 = 29_937_690;
    let night = Command::new("date")
        .args(["-u", "-d", &format!("@{}", minutes * 60), "+%F"])
        .output()
        .unwrap();
    let night = String::from_utf8(night.stdout).unwrap().trim().to_string();
    let incoming = dir.path().join("incoming");
    std::fs::create_dir_all(incoming.join(&night)).unwrap();
    let input = rowgroups_input(&incoming.join(&night), 200, 25);
    let ids = ids_of(&read_input(&input));
    let predictions = dir.path().join("predictions");
    let pipeline = Pipeline::new(&input, dir.path().join("unused"));
    let pipeline_file = pipeline.write(&dir.path().join("nightly.toml"));
    let resource = &resources(&["cronjob.yaml"])[0];
    let mounts = BTreeMap::from([
        ("PIPELINE", pipeline_file.display().to_string()),
        ("INPUT_ROOT", incoming.display().to_string()),
        ("OUTPUT_ROOT", predictions.display().to_string()),
    ]);
    let job_name = format!("segpredict-nightly-{minutes}");
    for pod in run_pods(job_spec(resource), &mounts, &job_name) {
        pod.expect_code(0);
    }
    let out = predictions.join(&night);
    assert!(
        out.join("_SUCCESS").is_file(),
        "no _SUCCESS in {}",
        out.display()
    );
    let output = read_output(&out);
    assert_each_id_once(ids.iter().map(String::as_str), &output, &read_rejects(&out));
}
