//! Size-class bundles: one `.pt2` archive holding an AOTInductor model per
//! size class (`class_<N>`, its segment dimension static at N; rows and
//! ragged extras dynamic) and, usually, the dynamic model (`model`), as
//! `tools/make_models.py --aoti --size-classes N1,N2,...` writes it.
//!
//! Each padded batch runs on its class's model; on CUDA that model's run is
//! captured once as a CUDA graph and replayed (`[model] cuda_graphs`,
//! `graph.rs`). A batch whose segment total has no model of its own (an
//! out-of-memory lowered the budget, a lone row retried unpadded, a row over
//! the budget) runs on the dynamic model; a bundle without one pads it up to
//! the smallest class that holds it, and rows over its largest class are
//! rejected (its bound, [`ModelBackend::max_segments`]). Such a bundle
//! refuses at start-up a run whose size classes it lacks
//! ([`SizeClassPackages::check_size_classes`]).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tch::{Device, Kind, TchError, Tensor};

use super::aoti::{
    self, checked_metadata, named, AotiError, AotiPackage, AotiSettings, ProbeShape, DYNAMIC_MODEL,
};
use super::graph::{self, Capacity, Graph, Role};
use super::{ModelBackend, ModelFormat};
use segpredict_core::message::{InputSpec, ModelPath};

/// A size class's model is named this prefix and its class.
pub const CLASS_PREFIX: &str = "class_";
/// Where a size class's model records its class.
pub const SIZE_CLASS_KEY: &str = "segpredict.size_class";

/// The models an archive holds, by name, with each size class's class
/// (`None` for another model: the dynamic one).
pub fn archive_models(path: &Path) -> Result<BTreeMap<String, Option<usize>>, AotiError> {
    let listing = |source| AotiError::Listing {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(|e| listing(e.into()))?;
    let archive = zip::ZipArchive::new(file).map_err(listing)?;
    let mut models = BTreeMap::new();
    for name in archive.file_names() {
        // <archive>/data/aotinductor/<model>/<file>
        let parts: Vec<&str> = name.split('/').collect();
        if parts.len() > 4 && parts[1..3] == ["data", "aotinductor"] {
            let class = parts[3]
                .strip_prefix(CLASS_PREFIX)
                .and_then(|n| n.parse().ok());
            models.insert(parts[3].to_string(), class);
        }
    }
    Ok(models)
}

/// Whether the package at `path` is a size-class bundle (holds a
/// `class_<N>` model); false for a file that cannot be listed.
pub fn is_bundle(path: &Path) -> bool {
    archive_models(path).is_ok_and(|models| models.values().any(Option::is_some))
}

/// The start-up input check of every model of a bundle (see
/// `aoti::check_inputs_of`): each class's model, recording its class in its
/// metadata, run on a batch of its class.
pub fn check_inputs_of(
    path: &Path,
    device: Device,
    settings: AotiSettings,
    inputs: &InputSpec,
    n_labels: usize,
) -> Result<(), AotiError> {
    for (model, class) in archive_models(path)? {
        if let Some(class) = class {
            check_recorded_class(path, &model, class, device, settings)?;
        }
        let probe = ProbeShape {
            inputs,
            n_labels,
            segments: class,
        };
        aoti::check_model_inputs(path, &model, device, settings, probe)?;
    }
    Ok(())
}

fn check_recorded_class(
    path: &Path,
    model: &str,
    class: usize,
    device: Device,
    settings: AotiSettings,
) -> Result<(), AotiError> {
    let (metadata, _, _) = checked_metadata(path, model, device, settings)?;
    let recorded = metadata.get(SIZE_CLASS_KEY);
    if recorded.and_then(|r| r.trim().parse().ok()) == Some(class) {
        return Ok(());
    }
    Err(AotiError::ClassMismatch {
        path: named(path, model),
        class,
        recorded: recorded.map(str::to_string),
    })
}

/// A size class's model and its CUDA graph.
struct ClassRunner {
    class: usize,
    package: AotiPackage,
    graph: RefCell<GraphState>,
}

enum GraphState {
    /// Not on CUDA, or `cuda_graphs = false`.
    Off,
    /// Captured at the class's next batch, once the model has run once.
    Waiting {
        ran: bool,
    },
    Ready(Graph),
    Failed,
}

/// A loaded size-class bundle.
pub struct SizeClassPackages {
    path: PathBuf,
    dynamic: Option<AotiPackage>,
    classes: BTreeMap<usize, ClassRunner>,
    roles: Vec<Role>,
    /// The most rows a batch holds (`[bucketing] max_rows`), when told.
    row_cap: Cell<Option<usize>>,
    /// The class whose graph owns the memory pool the others share.
    pool_owner: Cell<Option<usize>>,
    /// Batches run, by segment total and path, since last taken.
    paths: RefCell<BTreeMap<(usize, String), u64>>,
}

impl SizeClassPackages {
    /// Loads every model of the bundle (their inputs were checked before
    /// the threads started, [`check_inputs_of`]).
    pub fn load(
        path: &Path,
        device: Device,
        settings: AotiSettings,
        inputs: &InputSpec,
        cuda_graphs: bool,
    ) -> Result<Self, AotiError> {
        aoti::take_input_check(path)?;
        if device.is_cuda() {
            aoti::warn_of_generated_scans(path);
        }
        let graphs = graph_setting(device, cuda_graphs);
        let mut dynamic = None;
        let mut classes = BTreeMap::new();
        for (model, class) in archive_models(path)? {
            let package = AotiPackage::open(path, &model, device, settings)?;
            match class {
                Some(class) => {
                    let graph = RefCell::new(match graphs {
                        true => GraphState::Waiting { ran: false },
                        false => GraphState::Off,
                    });
                    let runner = ClassRunner {
                        class,
                        package,
                        graph,
                    };
                    classes.insert(class, runner);
                }
                None if model == DYNAMIC_MODEL => dynamic = Some(package),
                None => {
                    tracing::warn!(path = %path.display(), model, "an unknown model in the bundle: not used")
                }
            }
        }
        tracing::info!(path = %path.display(), classes = ?classes.keys().collect::<Vec<_>>(),
            dynamic = dynamic.is_some(), cuda_graphs = graphs, "size-class packages");
        Ok(Self {
            path: path.to_path_buf(),
            dynamic,
            classes,
            roles: graph::roles(inputs),
            row_cap: Cell::new(None),
            pool_owner: Cell::new(None),
            paths: RefCell::new(BTreeMap::new()),
        })
    }

    /// Refuses a run whose batches could come in a segment total this
    /// bundle has no model for, when it has no dynamic model: `classes` are
    /// the run's size classes (`None`: batches are not padded, so any total).
    pub fn check_size_classes(&self, classes: Option<&[usize]>) -> Result<(), AotiError> {
        let missing: Vec<usize> = classes
            .unwrap_or_default()
            .iter()
            .copied()
            .filter(|c| !self.classes.contains_key(c))
            .collect();
        if self.dynamic.is_some() {
            if !missing.is_empty() {
                tracing::info!(path = %self.path.display(), classes = ?missing,
                    "these size classes have no model of their own: their batches run on the dynamic model");
            }
            return Ok(());
        }
        let missing = match classes {
            None => "every segment total (pad_to_size_classes is off)".to_string(),
            Some(_) if missing.is_empty() => return Ok(()),
            Some(_) => format!("{missing:?}"),
        };
        let wanted = classes.unwrap_or_default().iter().map(usize::to_string);
        Err(AotiError::ClassesUncovered {
            path: self.path.clone(),
            packaged: self.classes.keys().copied().collect(),
            missing,
            wanted: wanted.collect::<Vec<_>>().join(","),
        })
    }

    /// Runs one class's model: its graph when ready and the batch fits,
    /// else the model itself; returns the output and the path it took.
    fn run_class(
        &self,
        runner: &ClassRunner,
        inputs: &[Tensor],
    ) -> Result<(Tensor, &'static str), TchError> {
        let mut state = runner.graph.borrow_mut();
        let eager = |ran| Ok((runner.package.forward(inputs)?, ran));
        match &*state {
            GraphState::Off => eager("static"),
            GraphState::Failed => eager("static (graph capture failed)"),
            GraphState::Waiting { ran: false } => {
                *state = GraphState::Waiting { ran: true };
                eager("static")
            }
            GraphState::Waiting { ran: true } => {
                let graph = self.capture(runner, inputs);
                let Some(graph) = graph else {
                    *state = GraphState::Failed;
                    return eager("static (graph capture failed)");
                };
                let output = graph.replay(&self.roles, inputs)?;
                *state = GraphState::Ready(graph);
                Ok((output, "static+graph"))
            }
            GraphState::Ready(graph) if graph.fits(&self.roles, inputs) => {
                Ok((graph.replay(&self.roles, inputs)?, "static+graph"))
            }
            GraphState::Ready(_) => eager("static (over the graph's capacity)"),
        }
    }

    /// Captures `runner`'s graph at the capacity of a batch like `inputs`;
    /// `None` (the reason logged) when the capture fails.
    fn capture(&self, runner: &ClassRunner, inputs: &[Tensor]) -> Option<Graph> {
        let class = runner.class;
        let row_bound = class.min(self.row_cap.get().unwrap_or(class)) as i64;
        let capacity = Capacity::for_batch(&self.roles, inputs, row_bound);
        let started = std::time::Instant::now();
        let owner = self.pool_owner.get().and_then(|c| self.classes.get(&c));
        let owner_state = owner.map(|o| o.graph.borrow());
        let share = match owner_state.as_deref() {
            Some(GraphState::Ready(graph)) => Some(graph),
            _ => None,
        };
        let captured = Graph::capture(
            &runner.package,
            &self.roles,
            inputs,
            capacity.clone(),
            share,
        );
        drop(owner_state);
        match captured {
            Ok(graph) => {
                if self.pool_owner.get().is_none() {
                    self.pool_owner.set(Some(class));
                }
                tracing::info!(class, rows = capacity.rows, ragged = ?capacity.ragged,
                    seconds = started.elapsed().as_secs_f64(), "captured the size class's CUDA graph");
                Some(graph)
            }
            Err(error) => {
                tracing::warn!(class, %error, "could not capture the size class's CUDA graph; its batches run without one");
                None
            }
        }
    }

    fn count(&self, segments: usize, ran: String) {
        *self.paths.borrow_mut().entry((segments, ran)).or_default() += 1;
    }
}

/// Whether graphs are captured: on CUDA, when asked and built in.
fn graph_setting(device: Device, cuda_graphs: bool) -> bool {
    if !(device.is_cuda() && cuda_graphs) {
        return false;
    }
    if !graph::built_in() {
        tracing::warn!("cuda_graphs: this segpredict was built without CUDA graphs (a libtorch without CUDA); the size classes run without them");
    }
    graph::built_in()
}

/// `inputs` with the segments padded with zero segments up to `class`.
fn padded_up(inputs: &[Tensor], class: usize) -> Result<Vec<Tensor>, TchError> {
    let segments = &inputs[0];
    let mut shape = segments.size();
    let n = shape[0];
    shape[0] = class as i64;
    let padded = Tensor::f_zeros(&shape, (segments.kind(), segments.device()))?;
    padded.f_narrow(0, 0, n)?.f_copy_(segments)?;
    let mut padded_inputs = vec![padded];
    padded_inputs.extend(inputs[1..].iter().map(Tensor::shallow_clone));
    Ok(padded_inputs)
}

impl ModelBackend for SizeClassPackages {
    fn forward(&self, inputs: &[Tensor]) -> Result<Tensor, TchError> {
        let n = inputs.first().map_or(0, |s| s.size()[0]) as usize;
        let (output, ran) = if let Some(runner) = self.classes.get(&n) {
            let (output, ran) = self.run_class(runner, inputs)?;
            (output, ran.to_string())
        } else if let Some(dynamic) = &self.dynamic {
            (dynamic.forward(inputs)?, "dynamic".to_string())
        } else if let Some(runner) = self.classes.range(n..).next().map(|(_, r)| r) {
            let padded = padded_up(inputs, runner.class)?;
            let (output, ran) = self.run_class(runner, &padded)?;
            (output, format!("{ran}, padded up to {}", runner.class))
        } else {
            return Err(TchError::Torch(format!(
                "{}: no model of the bundle takes a batch of {n} segments",
                self.path.display()
            )));
        };
        self.count(n, ran);
        Ok(output)
    }

    fn format(&self) -> ModelFormat {
        ModelFormat::Aoti
    }

    fn input_kind(&self) -> Option<Kind> {
        let any = self.dynamic.as_ref();
        any.or(self.classes.values().next().map(|r| &r.package))
            .and_then(|p| p.input_kind())
    }

    /// The dynamic model's bound; without one, the largest class (and any
    /// bound its model records).
    fn max_segments(&self) -> Option<usize> {
        if let Some(dynamic) = &self.dynamic {
            return dynamic.max_segments();
        }
        let (&largest, runner) = self.classes.last_key_value()?;
        Some(
            runner
                .package
                .max_segments()
                .map_or(largest, |b| b.min(largest)),
        )
    }

    fn set_row_cap(&self, max_rows: usize) {
        self.row_cap.set(Some(max_rows));
    }

    fn take_paths(&self) -> Vec<ModelPath> {
        let paths = std::mem::take(&mut *self.paths.borrow_mut());
        paths
            .into_iter()
            .map(|((segments, ran), batches)| ModelPath {
                segments,
                ran,
                batches,
            })
            .collect()
    }

    fn check_size_classes(&self, classes: Option<&[usize]>) -> Result<(), AotiError> {
        SizeClassPackages::check_size_classes(self, classes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_file(relative: &str) -> PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(relative)
    }

    #[test]
    fn the_committed_bundle_lists_its_dynamic_model_and_its_classes() {
        let bundle = repo_file("models/digits-small.classes.pt2");
        let models = archive_models(&bundle).unwrap();
        let listed: Vec<_> = models.iter().map(|(m, c)| (m.as_str(), *c)).collect();
        assert_eq!(
            listed,
            [
                ("class_1024", Some(1024)),
                ("class_256", Some(256)),
                ("model", None)
            ]
        );
        assert!(is_bundle(&bundle));
        assert!(!is_bundle(&repo_file("models/digits-small.pt2")));
        let settings = AotiSettings {
            jit_profiling: true,
            ..Default::default()
        };
        for (model, class) in [("class_256", 256), ("class_1024", 1024)] {
            check_recorded_class(&bundle, model, class, Device::Cpu, settings).unwrap();
        }
        let err = check_recorded_class(&bundle, "class_256", 1024, Device::Cpu, settings)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("(model class_256)")
                && err.contains("Some(\"256\")")
                && err.contains("size class 1024"),
            "{err}"
        );
    }
}
