//! CUDA graphs of a size class's package (`csrc/aoti_package.cpp`): the
//! package's run on one batch shape captured once, then replayed for every
//! batch of its class that fits the shape.
//!
//! A graph replays fixed shapes, and a class fixes only the segments: the
//! rows and the ragged extras' values vary from batch to batch. So the
//! graph is captured at a capacity (the class's row bound plus one spare
//! row; for each ragged extra twice the capturing batch's values, rounded up
//! to a power of two), and each batch is copied into the graph's static
//! buffers and padded there: rows of 0 segments and zeros, whose answers are
//! dropped, and padding values of each ragged extra given to the padding
//! rows a few each (all on one row would make an accumulating pooling add
//! them one after another). A batch with more rows or values than the
//! capacity runs the package without the graph. Copies into the buffers are
//! queued on the worker's stream like the uploads before them, so they stay
//! asynchronous.

use std::ffi::{c_char, c_int, c_void};
use std::ptr::NonNull;

use tch::{TchError, Tensor};

use super::aoti::{error_text, AotiPackage, PackageError, ERR_LEN};
use segpredict_core::message::{ExtraSpec, InputSpec};

extern "C" {
    fn seg_graph_supported() -> c_int;
    fn seg_graph_capture(
        handle: *mut c_void,
        inputs: *const *mut c_void,
        n_inputs: usize,
        share: *mut c_void,
        graph_out: *mut *mut c_void,
        output_out: *mut *mut c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn seg_graph_replay(graph: *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn seg_graph_free(graph: *mut c_void);
}

/// Whether this build has CUDA graphs (it was built against a libtorch
/// with CUDA and its headers).
pub fn built_in() -> bool {
    // SAFETY: a constant function of the shim.
    unsafe { seg_graph_supported() != 0 }
}

/// What a model input is, for padding it to a graph's shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Segments,
    /// Segments per row.
    Counts,
    /// The values of the n-th ragged extra, all rows' one after another.
    RaggedValues(usize),
    /// Values per row of the n-th ragged extra.
    RaggedCounts(usize),
    /// One value (or vector) per row.
    PerRow,
}

/// The role of each input, in the model's calling order.
pub(super) fn roles(spec: &InputSpec) -> Vec<Role> {
    let mut roles = vec![Role::Segments, Role::Counts];
    let mut ragged = 0;
    for extra in &spec.extras {
        match extra {
            ExtraSpec::Ragged => {
                roles.extend([Role::RaggedValues(ragged), Role::RaggedCounts(ragged)]);
                ragged += 1;
            }
            _ => roles.push(Role::PerRow),
        }
    }
    roles
}

/// The fixed sizes a graph runs: rows, and values of each ragged extra.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Capacity {
    pub rows: i64,
    pub ragged: Vec<i64>,
}

/// The smallest ragged capacity a graph is captured with.
const MIN_RAGGED: i64 = 16;

impl Capacity {
    /// For batches like `inputs`, of at most `row_bound` rows.
    pub fn for_batch(roles: &[Role], inputs: &[Tensor], row_bound: i64) -> Self {
        let ragged = ragged_totals(roles, inputs)
            .into_iter()
            .map(|t| ((2 * t).max(MIN_RAGGED) as u64).next_power_of_two() as i64)
            .collect();
        Self {
            rows: row_bound.max(rows_of(inputs)) + 1,
            ragged,
        }
    }

    /// Whether a batch fits: fewer rows (one padding row at least, to take
    /// the ragged padding) and no more ragged values.
    pub fn fits(&self, roles: &[Role], inputs: &[Tensor]) -> bool {
        rows_of(inputs) < self.rows
            && ragged_totals(roles, inputs)
                .iter()
                .zip(&self.ragged)
                .all(|(t, cap)| t <= cap)
    }
}

fn rows_of(inputs: &[Tensor]) -> i64 {
    inputs.get(1).map_or(0, |counts| counts.size()[0])
}

fn ragged_totals(roles: &[Role], inputs: &[Tensor]) -> Vec<i64> {
    roles
        .iter()
        .zip(inputs)
        .filter(|(role, _)| matches!(role, Role::RaggedValues(_)))
        .map(|(_, values)| values.size()[0])
        .collect()
}

/// One captured graph: its static input buffers and its output.
pub(super) struct Graph {
    handle: NonNull<c_void>,
    output: Tensor,
    buffers: Vec<Tensor>,
    capacity: Capacity,
}

impl Graph {
    /// Copies `inputs` into new buffers of `capacity`, runs `package` on
    /// them once outside the graph (what a first run at these shapes sets
    /// up stays out of it), then captures its run on them. `share`: a graph
    /// whose memory pool this one shares (graphs of one worker replay one at
    /// a time, on one stream).
    pub fn capture(
        package: &AotiPackage,
        roles: &[Role],
        inputs: &[Tensor],
        capacity: Capacity,
        share: Option<&Graph>,
    ) -> Result<Self, PackageError> {
        let tch_error = |e: TchError| PackageError(e.to_string());
        let buffers = buffers(roles, inputs, &capacity).map_err(tch_error)?;
        fill(roles, &buffers, inputs, &capacity).map_err(tch_error)?;
        drop(package.run(&buffers)?);
        let pointers: Vec<*mut c_void> =
            buffers.iter().map(|t| t.as_ptr() as *mut c_void).collect();
        let share = share.map_or(std::ptr::null_mut(), |g| g.handle.as_ptr());
        let (mut graph, mut output) = (std::ptr::null_mut(), std::ptr::null_mut());
        let mut err = [0 as c_char; ERR_LEN];
        // SAFETY: the loader handle is live; the pointers are live
        // `at::Tensor*` that outlive the graph (held in `buffers`); `share`
        // is null or a live graph. On success both outs are new heap objects
        // owned here.
        let code = unsafe {
            seg_graph_capture(
                package.handle(),
                pointers.as_ptr(),
                pointers.len(),
                share,
                &mut graph,
                &mut output,
                err.as_mut_ptr(),
                ERR_LEN,
            )
        };
        if code != 0 {
            return Err(error_text(&err));
        }
        // SAFETY: `output` is a new `at::Tensor*` owned by no one else.
        let output = unsafe { Tensor::from_ptr(output as *mut torch_sys::C_tensor) };
        let handle = NonNull::new(graph)
            .ok_or_else(|| PackageError("the graph capture returned nothing".into()))?;
        Ok(Self {
            handle,
            output,
            buffers,
            capacity,
        })
    }

    pub fn fits(&self, roles: &[Role], inputs: &[Tensor]) -> bool {
        self.capacity.fits(roles, inputs)
    }

    /// Copies `inputs` (which fit) into the buffers, replays, and returns
    /// the batch's rows of the output (a view of the graph's own output,
    /// which the next replay overwrites: the caller reads it first, in
    /// stream order).
    pub fn replay(&self, roles: &[Role], inputs: &[Tensor]) -> Result<Tensor, TchError> {
        fill(roles, &self.buffers, inputs, &self.capacity)?;
        let mut err = [0 as c_char; ERR_LEN];
        // SAFETY: a live graph; the shim writes a NUL-terminated message.
        let code = unsafe { seg_graph_replay(self.handle.as_ptr(), err.as_mut_ptr(), ERR_LEN) };
        if code != 0 {
            return Err(TchError::Torch(error_text(&err).0));
        }
        self.output.f_narrow(0, 0, rows_of(inputs))
    }
}

// SAFETY: a captured graph has no thread affinity: it is captured on the
// thread that warms the model and then replayed by the model worker alone
// (not `Sync`: never from two threads at once), as `AotiPackage` is used.
unsafe impl Send for Graph {}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: made by seg_graph_capture and freed once, here.
        unsafe { seg_graph_free(self.handle.as_ptr()) }
    }
}

/// Zeroed buffers shaped as `inputs` but for their capacity's first
/// dimension.
fn buffers(
    roles: &[Role],
    inputs: &[Tensor],
    capacity: &Capacity,
) -> Result<Vec<Tensor>, TchError> {
    roles
        .iter()
        .zip(inputs)
        .map(|(role, x)| {
            let mut shape = x.size();
            shape[0] = match role {
                Role::Segments => shape[0],
                Role::Counts | Role::PerRow | Role::RaggedCounts(_) => capacity.rows,
                Role::RaggedValues(j) => capacity.ragged[*j],
            };
            Tensor::f_zeros(&shape, (x.kind(), x.device()))
        })
        .collect()
}

/// Copies a batch into the buffers and pads the rest (see the module).
fn fill(
    roles: &[Role],
    buffers: &[Tensor],
    inputs: &[Tensor],
    capacity: &Capacity,
) -> Result<(), TchError> {
    let rows = rows_of(inputs);
    let totals = ragged_totals(roles, inputs);
    for ((role, buffer), x) in roles.iter().zip(buffers).zip(inputs) {
        let filled = match role {
            Role::Segments => buffer.shallow_clone(),
            Role::RaggedValues(j) => buffer.f_narrow(0, 0, totals[*j])?,
            _ => buffer.f_narrow(0, 0, rows)?,
        };
        copy_into(filled, x)?;
        match role {
            Role::Segments => {}
            Role::Counts | Role::PerRow => {
                drop(buffer.f_narrow(0, rows, capacity.rows - rows)?.f_zero_()?);
            }
            Role::RaggedValues(j) => {
                let (total, cap) = (totals[*j], capacity.ragged[*j]);
                drop(buffer.f_narrow(0, total, cap - total)?.f_zero_()?);
            }
            Role::RaggedCounts(j) => {
                let padding = buffer.f_narrow(0, rows, capacity.rows - rows)?;
                spread(padding, capacity.ragged[*j] - totals[*j])?;
            }
        }
    }
    Ok(())
}

fn copy_into(mut to: Tensor, from: &Tensor) -> Result<(), TchError> {
    to.f_copy_(from)
}

/// Counts for the padding rows that add up to `values`, as even as can be.
fn spread(padding_rows: Tensor, values: i64) -> Result<(), TchError> {
    let rows = padding_rows.size()[0];
    if rows == 0 {
        return Ok(());
    }
    let (each, more) = (values / rows, values % rows);
    drop(padding_rows.f_narrow(0, 0, more)?.f_fill_(each + 1)?);
    drop(padding_rows.f_narrow(0, more, rows - more)?.f_fill_(each)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    fn spec(extras: Vec<ExtraSpec>) -> InputSpec {
        InputSpec {
            segment_shape: vec![1],
            segment_dtype: segpredict_core::message::SegmentDtype::F32,
            extras,
        }
    }

    #[test]
    fn roles_follow_the_calling_order() {
        let roles = roles(&spec(vec![
            ExtraSpec::Ragged,
            ExtraSpec::Float,
            ExtraSpec::Ragged,
        ]));
        assert_eq!(
            roles,
            [
                Role::Segments,
                Role::Counts,
                Role::RaggedValues(0),
                Role::RaggedCounts(0),
                Role::PerRow,
                Role::RaggedValues(1),
                Role::RaggedCounts(1),
            ]
        );
    }

    /// 3 rows of 2, 1 and 4 segments padded to 8, 3 tags in the middle row.
    fn batch() -> Vec<Tensor> {
        vec![
            Tensor::arange(8, (Kind::Float, Device::Cpu)).view([8, 1]),
            Tensor::from_slice(&[2i64, 1, 4]),
            Tensor::from_slice(&[3i64, 55, 99]),
            Tensor::from_slice(&[0i64, 3, 0]),
        ]
    }

    #[test]
    fn a_batch_is_padded_to_the_capacity_with_its_ragged_padding_spread_over_padding_rows() {
        let roles = roles(&spec(vec![ExtraSpec::Ragged]));
        let inputs = batch();
        let capacity = Capacity::for_batch(&roles, &inputs, 5);
        assert_eq!(
            capacity,
            Capacity {
                rows: 6,
                ragged: vec![16]
            }
        );
        let buffers = buffers(&roles, &inputs, &capacity).unwrap();
        fill(&roles, &buffers, &inputs, &capacity).unwrap();
        let ints = |t: &Tensor| Vec::<i64>::try_from(t).unwrap();
        assert_eq!(ints(&buffers[1]), [2, 1, 4, 0, 0, 0]);
        assert_eq!(ints(&buffers[2])[..4], [3, 55, 99, 0]);
        // 13 padding values over 3 padding rows: 5, 4, 4.
        assert_eq!(ints(&buffers[3]), [0, 3, 0, 5, 4, 4]);
        assert_eq!(ints(&buffers[3]).iter().sum::<i64>(), 16);
        assert!(buffers[0].equal(&inputs[0]));
    }

    #[test]
    fn a_batch_over_the_capacity_does_not_fit() {
        let roles = roles(&spec(vec![ExtraSpec::Ragged]));
        let inputs = batch();
        let capacity = Capacity {
            rows: 4,
            ragged: vec![16],
        };
        assert!(capacity.fits(&roles, &inputs));
        let full_rows = Capacity {
            rows: 3,
            ..capacity.clone()
        };
        assert!(!full_rows.fits(&roles, &inputs), "no padding row left");
        let few_values = Capacity {
            ragged: vec![2],
            ..capacity
        };
        assert!(!few_values.fits(&roles, &inputs));
    }
}
