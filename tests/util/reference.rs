//! The Python reference (`tools/reference_predict.py`): the sample predicted
//! by plain PyTorch on the TorchScript model, and the comparison every
//! backend's output must pass against it.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use arrow::array::AsArray;
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float32Type, Int32Type};

use super::{labels, model, python, read_batches, repo, sample, OutRow};

/// A reference prediction: label, label id and score.
pub type ReferencePrediction = (String, i32, f32);

/// Starts the reference over the sample, writing Parquet to `out`, so it
/// can run while the binary does.
pub fn start_reference(out: &Path) -> Child {
    Command::new(python())
        .arg(repo().join("tools/reference_predict.py"))
        .arg("--model")
        .arg(model())
        .arg("--labels")
        .arg(labels())
        .arg("--input")
        .arg(sample())
        .arg("--output")
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tools/reference_predict.py")
}

/// Waits for the reference started into `out` and reads its predictions
/// by id.
pub fn finish_reference(child: Child, out: &Path) -> HashMap<String, ReferencePrediction> {
    let done = child.wait_with_output().expect("waiting for the reference");
    assert!(
        done.status.success(),
        "reference_predict.py failed: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    let mut rows = HashMap::new();
    for batch in read_batches(out).unwrap() {
        let ids = cast(batch.column_by_name("id").unwrap(), &DataType::Utf8).unwrap();
        let ids = ids.as_string::<i32>();
        let labels = batch.column_by_name("label").unwrap().as_string::<i32>();
        let label_ids = batch
            .column_by_name("label_id")
            .unwrap()
            .as_primitive::<Int32Type>();
        let scores = batch
            .column_by_name("score")
            .unwrap()
            .as_primitive::<Float32Type>();
        for i in 0..batch.num_rows() {
            let row = (
                labels.value(i).to_string(),
                label_ids.value(i),
                scores.value(i),
            );
            rows.insert(ids.value(i).to_string(), row);
        }
    }
    rows
}

/// Every output row has the reference's label and a score within 1e-4.
pub fn assert_matches_reference(
    output: &[OutRow],
    reference: &HashMap<String, ReferencePrediction>,
) {
    let differ: Vec<String> = output
        .iter()
        .filter(|row| {
            let (label, label_id, score) = &reference[&row.id];
            &row.label != label || row.label_id != *label_id || (row.score - score).abs() > 1e-4
        })
        .map(|row| format!("{row:?} vs reference {:?}", reference[&row.id]))
        .collect();
    assert!(
        differ.is_empty(),
        "{} row(s) differ from the Python reference, e.g. {:?}",
        differ.len(),
        &differ[..differ.len().min(5)]
    );
}
