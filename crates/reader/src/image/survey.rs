//! What `inspect` tells of an encoded image column: formats and sizes from
//! each image's header alone (no pixel decoded), and what the pipeline's
//! resize makes of each size.

use std::collections::BTreeMap;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;

use super::column::{one_per_row, type_problem, EncodedImages};
use super::fit::Geometry;
use super::sniff;
use super::{ImageInput, ResizeMode, Target};

/// The images of one column, by their headers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageSurvey {
    /// Images whose header reads, by format (`PNG`, `JPEG`, `WebP`).
    pub formats: BTreeMap<String, u64>,
    /// Images by (width, height).
    pub sizes: BTreeMap<(u32, u32), u64>,
    /// Images without bytes (null), which a run rejects.
    pub missing: u64,
    /// Images whose header does not read, which a run rejects as
    /// `bad_image`; the first one's reason.
    pub unreadable: u64,
    /// Why the first unreadable image did not read, to show one example.
    pub first_unreadable: Option<String>,
}

impl ImageSurvey {
    /// Images seen: readable ones of every format, missing and unreadable.
    pub fn images(&self) -> u64 {
        self.formats.values().sum::<u64>() + self.missing + self.unreadable
    }

    /// Another file's images added to these.
    pub fn merge(&mut self, other: ImageSurvey) {
        for (format, n) in other.formats {
            *self.formats.entry(format).or_default() += n;
        }
        for (size, n) in other.sizes {
            *self.sizes.entry(size).or_default() += n;
        }
        self.missing += other.missing;
        self.unreadable += other.unreadable;
        if self.first_unreadable.is_none() {
            self.first_unreadable = other.first_unreadable;
        }
    }

    /// One image's header, or a missing image (None).
    fn add(&mut self, image: Option<&[u8]>) {
        let Some(bytes) = image else {
            self.missing += 1;
            return;
        };
        match sniff::header(bytes) {
            Ok(header) => {
                *self.formats.entry(header.format.to_string()).or_default() += 1;
                *self.sizes.entry((header.width, header.height)).or_default() += 1;
            }
            Err(why) => {
                self.unreadable += 1;
                self.first_unreadable.get_or_insert(format!("{why}"));
            }
        }
    }
}

/// Whether a column of this type can hold encoded images: binary (or a
/// list of it) is only a candidate, a `datasets` struct is one.
pub fn can_hold_images(data_type: &DataType) -> bool {
    type_problem(data_type).is_none()
}

/// Whether the column is `datasets`' image layout: `struct<bytes, path>`
/// or a list of it.
pub fn is_datasets_image(data_type: &DataType) -> bool {
    let item = crate::columns::list_child(data_type).unwrap_or(data_type);
    matches!(item, DataType::Struct(_)) && can_hold_images(item)
}

/// Adds the header of every image in `array` (one column batch) to `survey`.
pub(crate) fn add_images(
    array: &ArrayRef,
    survey: &mut ImageSurvey,
) -> Result<(), arrow::error::ArrowError> {
    let items = match array.data_type() {
        t if one_per_row(t) => array.clone(),
        DataType::List(_) => array.as_list::<i32>().values().clone(),
        _ => array.as_list::<i64>().values().clone(),
    };
    let images = EncodedImages::new(&items)?;
    for j in 0..items.len() {
        // A null image (or one with only a path) is counted apart.
        survey.add(images.get(j).ok());
    }
    Ok(())
}

/// What the resize does to a `width x height` image, in a few words.
pub fn describe_resize(width: u32, height: u32, input: &ImageInput, target: &Target) -> String {
    let geometry = Geometry::of(width, height, target, input.resize);
    if geometry.is_identity(width, height) {
        return "copied as it is".into();
    }
    let (_, _, box_w, box_h) = geometry.source_box;
    let (sx, sy) = (
        f64::from(geometry.drawn.0) / box_w,
        f64::from(geometry.drawn.1) / box_h,
    );
    let how = if sx > 1.0 || sy > 1.0 {
        "upscaled"
    } else {
        "shrunk"
    };
    let scale = if (sx - sy).abs() < 1e-9 {
        format!("x{sx:.3}")
    } else {
        format!("x{sx:.3} wide, x{sy:.3} high (the aspect ratio changes)")
    };
    match input.resize {
        ResizeMode::Stretch => format!("{how} {scale}"),
        ResizeMode::Fit => format!(
            "{how} {scale} to {}x{}, padded to {}x{}",
            geometry.drawn.0, geometry.drawn.1, target.width, target.height
        ),
        ResizeMode::Crop => format!(
            "{how} {scale}, {:.0}x{:.0} source pixels of the middle kept",
            box_w, box_h
        ),
    }
}
