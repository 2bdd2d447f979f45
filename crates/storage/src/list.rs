//! Listing objects below a prefix, or matching a glob on keys.

use futures::TryStreamExt;
use glob::{MatchOptions, Pattern};
use object_store::path::Path as ObjectPath;
use object_store::ObjectMeta;

use crate::{block_on, ObjectUrl, StorageError};

/// Whether a key pattern holds glob characters.
pub fn is_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// `*` and `?` stay within one `/`-separated part; `**` crosses them.
const KEY_GLOB: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: false,
};

/// Every object below `url`'s prefix, or, when the prefix holds glob
/// characters, every object whose key matches it; sorted by key.
pub fn list_objects(url: &ObjectUrl) -> Result<Vec<ObjectMeta>, StorageError> {
    let pattern = url.prefix();
    if !is_glob(pattern) && !pattern.is_empty() {
        if let Some(object) = head(url)? {
            return Ok(vec![object]);
        }
    }
    let (root, matcher) = if is_glob(pattern) {
        let matcher = Pattern::new(pattern).map_err(|e| StorageError::Url {
            location: url.url(),
            reason: format!("not a glob: {}", e.msg),
        })?;
        (literal_root(pattern), Some(matcher))
    } else {
        (pattern.to_string(), None)
    };
    let listing = url.store().list(Some(&ObjectPath::from(root.as_str())));
    let mut objects: Vec<ObjectMeta> =
        block_on(listing.try_collect()).map_err(|error| StorageError::Request {
            op: "listing",
            location: url.url(),
            error,
        })?;
    if let Some(matcher) = matcher {
        objects.retain(|o| matcher.matches_with(o.location.as_ref(), KEY_GLOB));
    }
    objects.sort_by(|a, b| a.location.cmp(&b.location));
    Ok(objects)
}

/// The object whose key is the prefix itself, if there is one.
fn head(url: &ObjectUrl) -> Result<Option<ObjectMeta>, StorageError> {
    use object_store::ObjectStoreExt;
    match block_on(url.store().head(&url.key(""))) {
        Ok(object) => Ok(Some(object)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(error) => Err(StorageError::Request {
            op: "looking up",
            location: url.url(),
            error,
        }),
    }
}

/// The `/`-separated parts of a pattern before its first glob character:
/// the prefix every match lies below.
fn literal_root(pattern: &str) -> String {
    pattern
        .split('/')
        .take_while(|part| !is_glob(part))
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_literal_root_stops_before_the_first_glob_part() {
        assert_eq!(literal_root("in/2026-12-*/part-*.parquet"), "in");
        assert_eq!(literal_root("in/day/*.parquet"), "in/day");
        assert_eq!(literal_root("*.parquet"), "");
    }

    #[test]
    fn a_star_stays_within_one_part_and_two_cross_parts() {
        let one = Pattern::new("in/*.parquet").unwrap();
        assert!(one.matches_with("in/a.parquet", KEY_GLOB));
        assert!(!one.matches_with("in/x/a.parquet", KEY_GLOB));
        let any = Pattern::new("in/**/*.parquet").unwrap();
        assert!(any.matches_with("in/x/y/a.parquet", KEY_GLOB));
    }
}
