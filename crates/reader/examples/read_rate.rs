//! The readers alone, for benches/cpu/s3_concurrency.py: plans INPUT (a
//! path or an object-store URL) with the sample's columns, drains every
//! unit through the reader threads with `fetch_concurrency` row groups
//! fetched ahead, no model, and prints one JSON line: rows, seconds, rows
//! per second, and the object-store requests made.
//!
//! read_rate INPUT FETCH_CONCURRENCY [READER_THREADS]

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use segpredict_reader::{run_reader, ReaderConfig, UnitQueue};

type Failure = Box<dyn std::error::Error>;

fn config(input: &str, concurrency: usize, threads: usize) -> Result<ReaderConfig, Failure> {
    let text = format!(
        "path = {input:?}\nthreads = {threads}\nfetch_concurrency = {concurrency}\n[columns]\n\
         id = \"id\"\nsegments = {{ name = \"segments\", dtype = \"u8\", shape = [1, 8, 8] }}\n"
    );
    Ok(toml::from_str(&text)?)
}

fn main() -> Result<(), Failure> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, concurrency, rest @ ..] = &args[..] else {
        return Err("read_rate INPUT FETCH_CONCURRENCY [READER_THREADS]".into());
    };
    let threads = rest.first().map_or(Ok(2), |t| t.parse())?;
    let config = config(input, concurrency.parse()?, threads)?;
    let started = Instant::now();
    let plan = config.plan()?;
    let pool = config.decode_pool()?;
    let units = UnitQueue::new(&plan);
    let cancel = AtomicBool::new(false);
    let (tx, rx) = crossbeam_channel::bounded(4);
    let rows = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..threads)
            .map(|_| {
                let tx = tx.clone();
                scope.spawn(|| run_reader(&config, &plan, &pool, &units, tx, &cancel))
            })
            .collect();
        drop(tx);
        let rows: usize = rx.iter().map(|chunk| chunk.rows.len()).sum();
        for reader in readers {
            reader.join().expect("a reader thread panicked")?;
        }
        Ok::<_, Failure>(rows)
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let requests = segpredict_storage::requests();
    println!(
        "{{\"rows\": {rows}, \"seconds\": {seconds:.4}, \"rows_per_s\": {:.1}, \"requests\": {}, \"failed\": {}, \"bytes_read\": {}}}",
        rows as f64 / seconds,
        requests.requests,
        requests.failed,
        requests.bytes_read
    );
    Ok(())
}
