//! One seam for the store tests: [`TestBucket`], what a scenario needs of
//! an object store on loopback (moto's S3 server, `s3.rs`; Azurite,
//! `azure.rs`), and [`Bucket`], one test's bucket or container in it with
//! the runs of segpredict that reach it. A scenario written against them
//! (`tests/stores.rs`) runs against every store.
//!
//! ```ignore
//! let bucket = Bucket::new(S3Server::shared(), "sample"); // or Azurite::shared()
//! let input = bucket.upload_input(&sample());             // s3://NAME/in/ (az://...)
//! let file = Pipeline::new(&input, bucket.url("out/")).write(&dir.join("p.toml"));
//! bucket.run(bucket.endpoint(), &file, &[], dir).expect_code(0);
//! let out = bucket.download("out/", &dir.join("out"));
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{
    bin, download_each, expect_status, quiet_env, read_report, recorded_files, run_command, slowed,
    HttpResponse, Pipeline, Reference, RunResult,
};

/// A signed HTTP client of a store's REST API (`S3Client`, `AzureClient`):
/// what [`TestBucket`]'s object operations go through.
pub trait BucketClient: Sync {
    /// `http://127.0.0.1:PORT`
    fn endpoint(&self) -> &str;
    /// One signed request to `path` (`/CONTAINER/KEY`); `Err` when the
    /// connection failed, whatever the status otherwise.
    fn request(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<HttpResponse, ureq::Error>;
    fn put(&self, container: &str, key: &str, body: &[u8]);
    /// Every key under `prefix`, in the store's (lexicographic) order.
    fn list(&self, container: &str, prefix: &str) -> Vec<String>;

    /// `request` that must reach the server and be answered `expected`.
    fn expect(
        &self,
        expected: u16,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> HttpResponse {
        let answer = self.request(method, path, query, headers, body);
        expect_status(answer, expected, method, path, self.endpoint())
    }
    fn get(&self, container: &str, key: &str) -> Vec<u8> {
        let path = format!("/{container}/{key}");
        self.expect(200, "GET", &path, &[], &[], b"").body
    }
    /// Every object under `prefix` into `dir`, at its key less `prefix`
    /// (so `read_output(dir)` reads an output prefix); the paths written.
    fn download(&self, container: &str, prefix: &str, dir: &Path) -> Vec<PathBuf> {
        download_each(self.list(container, prefix), prefix, dir, |key| {
            self.get(container, key)
        })
    }
}

/// An object store on loopback as the store scenarios use it: its object
/// operations are its client's.
pub trait TestBucket: Sync {
    /// The scheme of segpredict's URLs for it: `s3`, `az`.
    fn scheme(&self) -> &'static str;
    /// The server's port (a fault proxy goes in front of it).
    fn port(&self) -> u16;
    /// The client that reaches the server directly.
    fn client(&self) -> &dyn BucketClient;
    /// A new empty bucket (container) named after `hint`, this test's own.
    fn unique_container(&self, hint: &str) -> String;
    /// Points a child at the store through `endpoint` (the server's, or a
    /// fault proxy's in front of it), with nothing of the developer's own
    /// set-up left to redirect it.
    fn configure<'a>(&self, command: &'a mut Command, endpoint: &str) -> &'a mut Command;
    /// The options (object_store's keys) that reach it from this process.
    fn store_options(&self) -> Vec<(&'static str, String)>;
    /// Words that, in what a child writes, show its credentials leaked: a
    /// secret's field name, a fragment of the key it signs with.
    fn leak_markers(&self) -> &'static [&'static str];

    /// `http://127.0.0.1:PORT`
    fn endpoint(&self) -> &str {
        self.client().endpoint()
    }
    fn put(&self, container: &str, key: &str, body: &[u8]) {
        self.client().put(container, key, body)
    }
    fn get(&self, container: &str, key: &str) -> Vec<u8> {
        self.client().get(container, key)
    }
    /// The object's bytes, or `None` where it is gone (or the read failed).
    fn try_get(&self, container: &str, key: &str) -> Option<Vec<u8>> {
        let path = format!("/{container}/{key}");
        let got = self.client().request("GET", &path, &[], &[], b"");
        got.ok().filter(|r| r.status == 200).map(|r| r.body)
    }
    /// Every key under `prefix`, in the store's (lexicographic) order.
    fn list(&self, container: &str, prefix: &str) -> Vec<String> {
        self.client().list(container, prefix)
    }
}

/// One test's bucket (container) in `store`.
pub struct Bucket<'s> {
    pub store: &'s dyn TestBucket,
    pub name: String,
}

impl<'s> Bucket<'s> {
    /// A new empty bucket in `store` named after `hint`.
    pub fn new(store: &'s dyn TestBucket, hint: &str) -> Self {
        let name = store.unique_container(hint);
        Self { store, name }
    }

    /// The server's endpoint (not a proxy's).
    pub fn endpoint(&self) -> &'s str {
        self.store.endpoint()
    }

    /// `SCHEME://NAME/key`
    pub fn url(&self, key: &str) -> String {
        format!("{}://{}/{key}", self.store.scheme(), self.name)
    }

    pub fn put(&self, key: &str, body: &[u8]) {
        self.store.put(&self.name, key, body)
    }

    pub fn get(&self, key: &str) -> Vec<u8> {
        self.store.get(&self.name, key)
    }

    pub fn try_get(&self, key: &str) -> Option<Vec<u8>> {
        self.store.try_get(&self.name, key)
    }

    pub fn list(&self, prefix: &str) -> Vec<String> {
        self.store.list(&self.name, prefix)
    }

    /// The input uploaded under `in/`; its URL.
    pub fn upload_input(&self, input: &Path) -> PathBuf {
        self.put("in/input.parquet", &std::fs::read(input).unwrap());
        PathBuf::from(self.url("in/"))
    }

    /// `segpredict ARGS` reaching the store through `endpoint`.
    pub fn command(&self, endpoint: &str, args: &[&str]) -> Command {
        let mut command = Command::new(bin());
        command.args(args);
        self.store.configure(quiet_env(&mut command), endpoint);
        command
    }

    /// `segpredict run FILE ARGS`, waiting for the lease a killed run left
    /// (the test pipelines' leases last 3 s).
    pub fn run(&self, endpoint: &str, file: &Path, args: &[&str], out: &Path) -> RunResult {
        let mut all = vec!["run", file.to_str().unwrap(), "--wait-for-lock=30s"];
        all.extend_from_slice(args);
        run_command(&mut self.command(endpoint, &all), out)
    }

    /// `segpredict run FILE ARGS` in the background, its stderr piped.
    pub fn spawn(&self, endpoint: &str, file: &Path, args: &[&str]) -> Child {
        let mut all = vec!["run", file.to_str().unwrap()];
        all.extend_from_slice(args);
        self.command(endpoint, &all)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting segpredict")
    }

    /// Whether a commit record under `out` (a prefix) names a part whose
    /// name starts with `part` (committed, not merely uploaded).
    pub fn committed(&self, out: &str, part: &str) -> bool {
        recorded_files(&self.log_records(&format!("{out}/_progress/log/")))
            .iter()
            .any(|(key, _, _)| key.starts_with(part))
    }

    /// The commit-log records under `prefix` (`out/_progress/log/` for
    /// every shard's, `out/_progress/log/s001of003/` for one shard's), in
    /// order; log checkpoints (`.`-names) left out.
    pub fn log_records(&self, prefix: &str) -> Vec<serde_json::Value> {
        self.list(prefix)
            .iter()
            .filter(|key| !key.rsplit('/').next().unwrap_or_default().starts_with('.'))
            .filter_map(|key| serde_json::from_slice(&self.get(key)).ok())
            .collect()
    }

    /// A slowed pipeline from `input` into `prefix/`, with 3 s leases.
    pub fn slowed_into(&self, input: &Path, prefix: &str) -> Pipeline {
        let mut p = slowed(input, Path::new(&self.url(&format!("{prefix}/"))));
        p.storage_extra.push("lock_lease_s = 3".into());
        p
    }

    /// The objects under `prefix`, downloaded into `dir` (which is returned).
    pub fn download(&self, prefix: &str, dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        super::http::download_each(self.list(prefix), prefix, dir, |key| self.get(key));
        dir.to_path_buf()
    }

    /// A completed run's output under `prefix`, downloaded, checked against
    /// the uninterrupted run; its report.
    pub fn assert_complete(
        &self,
        prefix: &str,
        reference: &Reference,
        run: &RunResult,
        dir: &Path,
    ) -> serde_json::Value {
        let out = self.download(&format!("{prefix}/"), &dir.join(prefix));
        let downloaded = RunResult {
            code: run.code,
            stdout: run.stdout.clone(),
            stderr: run.stderr.clone(),
            out_dir: out.clone(),
        };
        reference.assert_complete(&downloaded);
        read_report(&out)
    }
}
