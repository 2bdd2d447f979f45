//! Temporary names: a file being written lives beside its final name as
//! `[folder/].NAME.UNIQUE.inprogress`, where `UNIQUE` starts with the
//! writing process's tag, so the next attempt of the same writer finds its
//! own leftovers and no one else's. Which folders a program writes in (and
//! so which temporary names are its own) is the layout's business.

/// What every temporary name ends with.
pub const IN_PROGRESS_SUFFIX: &str = ".inprogress";

/// The last `/`-separated part of `key`.
pub fn file_name(key: &str) -> &str {
    key.rsplit_once('/').map_or(key, |(_, name)| name)
}

/// The temporary key `key` is written under by the process tagged
/// `unique` (which starts with the shard's tag).
pub fn temp_key(key: &str, unique: &str) -> String {
    let name = file_name(key);
    let folder = &key[..key.len() - name.len()];
    format!("{folder}.{name}.{unique}{IN_PROGRESS_SUFFIX}")
}

/// Whether `key` has a temporary name's shape, wherever it is.
pub fn has_temporary_shape(key: &str) -> bool {
    let name = file_name(key);
    name.starts_with('.') && name.ends_with(IN_PROGRESS_SUFFIX)
}
