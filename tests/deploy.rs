//! The Kubernetes manifests under `pipelines/deploy/`: valid against the
//! Kubernetes API schemas (offline, `kubernetes-validate`), saying what the
//! README says they say (Indexed, one GPU a pod, exit codes 2 and 3 fail an
//! index at once), and their pods' commands, run here exactly as Kubernetes
//! would run them, produce one complete output. The bucket variant
//! (`job-s3.yaml`) is the same Job reading and writing `s3://`, its
//! credentials from a Secret only; its pods run against moto's S3 server.
//! The Azure variant (`job-azure.yaml`, `az://`) likewise, against Azurite.

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
    let resources = resources(&["job.yaml", "cronjob.yaml", "job-s3.yaml", "job-azure.yaml"]);
    assert_eq!(resources.len(), 4);
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
    secrets: &BTreeMap<&str, String>,
    index: u64,
    job_name: &str,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for var in container["env"].as_array().unwrap() {
        let name = var["name"].as_str().unwrap().to_string();
        let secret = &var["valueFrom"]["secretKeyRef"];
        let value = match (mounts.get(name.as_str()), var["value"].as_str()) {
            (Some(mounted), _) => mounted.clone(),
            (None, Some(value)) => value.to_string(),
            (None, None) if secret.is_object() => {
                let key = secret["key"].as_str().unwrap();
                match secrets.get(key) {
                    Some(value) => value.clone(),
                    // Kubernetes leaves an optional key that is absent unset.
                    None if secret["optional"] == true => continue,
                    None => panic!("{name}: the Secret has no key {key}"),
                }
            }
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
fn run_pods(
    spec: &Value,
    mounts: &BTreeMap<&str, String>,
    secrets: &BTreeMap<&str, String>,
    job_name: &str,
) -> Vec<RunResult> {
    let c = container(spec);
    let n = spec["completions"].as_u64().unwrap();
    let bin_dir = Path::new(bin()).parent().unwrap().to_path_buf();
    let children: Vec<_> = (0..n)
        .map(|index| {
            let env = pod_env(c, mounts, secrets, index, job_name);
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
            // The tests' pods reach only loopback (the S3 server): never
            // through a proxy the environment may name.
            command
                .args(&words[1..])
                .envs(&env)
                .env("PATH", path)
                .env("NO_PROXY", "127.0.0.1,localhost")
                .env("no_proxy", "127.0.0.1,localhost");
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
    for pod in run_pods(
        job_spec(resource),
        &mounts,
        &BTreeMap::new(),
        "segpredict-night",
    ) {
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
    for pod in run_pods(job_spec(resource), &mounts, &BTreeMap::new(), &job_name) {
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

/// The container's `env` entry named `name`.
fn env_var<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no env var {name}"))
}

/// The Job in `both[1]` is `both[0]`'s Indexed Job with the same values
/// of `same` (command, arguments, ...) in its container, its input and
/// output under `scheme`, and each of `vars` (name, optional) only from
/// the Secret `secret`. Returns the resource and its container.
fn assert_bucket_variant<'a>(
    both: &'a [Value],
    same: &[&str],
    scheme: &str,
    secret: &str,
    vars: &[(&str, bool)],
) -> (&'a Value, &'a Value) {
    let [base, variant] = both else {
        panic!("two resources")
    };
    let (plain, bucket) = (container(job_spec(base)), container(job_spec(variant)));
    // The same shard plumbing: the same command and arguments (the index
    // is JOB_COMPLETION_INDEX, set by Kubernetes for an Indexed Job).
    for &key in same {
        assert_eq!(plain[key], bucket[key], "{key}");
    }
    for name in ["INPUT", "OUTPUT"] {
        let value = env_var(bucket, name)["value"].as_str().unwrap();
        assert!(value.starts_with(scheme), "{name} = {value}");
    }
    for &(name, optional) in vars {
        let from = &env_var(bucket, name)["valueFrom"]["secretKeyRef"];
        assert_eq!(from["name"], secret, "{name}");
        assert_eq!(from["key"], name);
        assert_eq!(from["optional"] == true, optional, "{name}: {from}");
    }
    (variant, bucket)
}

#[test]
fn the_bucket_job_is_the_indexed_job_on_s3_with_credentials_from_a_secret_only() {
    let both = resources(&["job.yaml", "job-s3.yaml"]);
    let vars = [
        ("AWS_ACCESS_KEY_ID", false),
        ("AWS_SECRET_ACCESS_KEY", false),
        ("AWS_REGION", false),
        ("AWS_ENDPOINT_URL", true),
        ("AWS_ALLOW_HTTP", true),
    ];
    let (on_s3, s3) =
        assert_bucket_variant(&both, &["command", "args"], "s3://", "segpredict-s3", &vars);
    let words = format!("{} {}", s3["command"], s3["args"]);
    assert!(
        !words.contains("AWS_") && !words.contains("secret"),
        "{words}"
    );
    // No data volume: only the pipeline's ConfigMap and /tmp.
    let volumes = on_s3["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    let kinds: Vec<&str> = volumes
        .iter()
        .flat_map(|v| v.as_object().unwrap().keys())
        .filter(|k| *k != "name")
        .map(String::as_str)
        .collect();
    assert_eq!(kinds, ["configMap", "emptyDir"]);
    let mounts: Vec<&Value> = s3["volumeMounts"].as_array().unwrap().iter().collect();
    assert_eq!(mounts.len(), 2, "{mounts:?}");
}

#[test]
fn a_credential_written_into_a_manifest_is_refused() {
    let dir = tmp();
    let text = std::fs::read_to_string(manifest("job-s3.yaml")).unwrap();
    let from_secret =
        "valueFrom: { secretKeyRef: { name: segpredict-s3, key: AWS_SECRET_ACCESS_KEY } }";
    assert!(text.contains(from_secret));
    let bad = dir.path().join("job-s3.yaml");
    std::fs::write(&bad, text.replace(from_secret, "value: not-a-real-secret")).unwrap();
    let output = Command::new(python())
        .arg(repo().join("tests/deploy.py"))
        .arg(&bad)
        .output()
        .expect("running tests/deploy.py");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("AWS_SECRET_ACCESS_KEY as a literal value"),
        "{stderr}"
    );
}

#[test]
fn the_s3_jobs_pods_predict_every_row_once_into_the_bucket() {
    let server = S3Server::shared();
    // What the Secret holds: the server's credentials and endpoint.
    let secrets: BTreeMap<&str, String> = server.env().into_iter().collect();
    assert_job_pods_predict_every_row_once(server, "job-s3.yaml", &secrets, "segpredict-night-s3");
}

/// The Job of `resource` as its pods, with the Secret holding `secrets`,
/// reading `incoming/night/` of a new bucket (container) in `store` and
/// writing `predictions/night/` there: `_SUCCESS`, every row once, the
/// baseline's labels.
fn assert_job_pods_predict_every_row_once(
    store: &dyn TestBucket,
    resource: &str,
    secrets: &BTreeMap<&str, String>,
    job: &str,
) {
    let dir = tmp();
    let input = rowgroups_input(dir.path(), 300, 25);
    let ids = ids_of(&read_input(&input));
    let bucket = Bucket::new(store, job);
    bucket.put("incoming/night/in.parquet", &std::fs::read(&input).unwrap());
    let pipeline = Pipeline::new(&input, dir.path().join("unused"));
    let pipeline_file = pipeline.write(&dir.path().join("nightly.toml"));
    let resource = &resources(&[resource])[0];
    let mounts = BTreeMap::from([
        ("PIPELINE", pipeline_file.display().to_string()),
        ("INPUT", bucket.url("incoming/night/")),
        ("OUTPUT", bucket.url("predictions/night/")),
    ]);
    for pod in run_pods(job_spec(resource), &mounts, secrets, job) {
        pod.expect_code(0);
    }
    let keys = bucket.list("predictions/night/");
    assert!(
        keys.contains(&"predictions/night/_SUCCESS".to_string()),
        "{keys:?}"
    );
    let out = dir.path().join("night");
    store
        .client()
        .download(&bucket.name, "predictions/night/", &out);
    let output = read_output(&out);
    assert_each_id_once(ids.iter().map(String::as_str), &output, &read_rejects(&out));
    assert_same_predictions_as_baseline(&output);
}

#[test]
fn the_azure_job_is_the_indexed_job_on_az_with_credentials_from_a_secret_only() {
    let both = resources(&["job-s3.yaml", "job-azure.yaml"]);
    let vars = [
        ("AZURE_STORAGE_ACCOUNT_NAME", false),
        ("AZURE_STORAGE_ACCOUNT_KEY", false),
        ("AZURE_STORAGE_ENDPOINT", true),
        ("AZURE_ALLOW_HTTP", true),
    ];
    let same = ["command", "args", "volumeMounts", "securityContext"];
    assert_bucket_variant(&both, &same, "az://", "segpredict-azure", &vars);
}

#[test]
fn the_azure_jobs_pods_predict_every_row_once_into_the_container() {
    let azurite = Azurite::shared();
    // What the Secret holds: the account, its key and the endpoint (no
    // emulator switch: the path a real account with a private endpoint takes).
    let secrets = BTreeMap::from([
        ("AZURE_STORAGE_ACCOUNT_NAME", AZURITE_ACCOUNT.to_string()),
        ("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY.to_string()),
        (
            "AZURE_STORAGE_ENDPOINT",
            format!("{}/{AZURITE_ACCOUNT}", azurite.endpoint()),
        ),
        ("AZURE_ALLOW_HTTP", "true".to_string()),
    ]);
    assert_job_pods_predict_every_row_once(
        azurite,
        "job-azure.yaml",
        &secrets,
        "segpredict-night-azure",
    );
}
