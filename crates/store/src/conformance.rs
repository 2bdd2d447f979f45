//! The promises every [`Store`] keeps, as one suite run against each
//! (local disk, object_store's in-memory store, the S3 server, Azurite),
//! the way object_store runs one integration suite against every backend.
//! Each check panics with what broke; [`run_all`] runs them on a store
//! whose location is empty.

use std::io::Write;

use crate::{Holder, Store};

/// Every check, in order, on an empty store.
pub fn run_all(store: &dyn Store) {
    put_get_list_delete(store);
    put_if_absent_is_refused_not_replaced(store);
    an_upload_is_visible_only_when_finished(store);
    a_lock_admits_one_holder(store);
    keys_with_odd_characters_round_trip(store);
}

fn keys(store: &dyn Store, prefix: &str) -> Vec<String> {
    store.list(prefix).expect("list")
}

/// A put replaces whole; a get after it sees it; a listing is sorted and
/// keeps to its prefix, through folders; a delete of a missing key is
/// not an error.
pub fn put_get_list_delete(store: &dyn Store) {
    store.ensure().expect("ensure");
    store.put("conf/a.json", b"one").expect("put");
    store.put("conf/a.json", b"two").expect("put again");
    store.put("conf/b/c.json", b"three").expect("put deeper");
    assert_eq!(store.get("conf/a.json").unwrap().unwrap(), &b"two"[..]);
    assert_eq!(store.get("conf/missing").unwrap(), None);
    assert_eq!(keys(store, "conf/"), ["conf/a.json", "conf/b/c.json"]);
    assert_eq!(keys(store, "conf/b"), ["conf/b/c.json"]);
    store.delete("conf/a.json").expect("delete");
    store.delete("conf/a.json").expect("delete a missing key");
    store.delete("conf/b/c.json").expect("delete");
    assert!(
        keys(store, "conf/").is_empty(),
        "{:?}",
        keys(store, "conf/")
    );
}

/// Put-if-absent takes a free key once; a second writer is refused and
/// the first bytes stay.
pub fn put_if_absent_is_refused_not_replaced(store: &dyn Store) {
    let key = "conf/log/00000000000000000001.json";
    assert!(store.put_if_absent(key, b"first").unwrap());
    assert!(!store.put_if_absent(key, b"second").unwrap());
    assert_eq!(store.get(key).unwrap().unwrap(), &b"first"[..]);
    store.delete(key).unwrap();
    assert!(
        keys(store, "conf/").is_empty(),
        "{:?}",
        keys(store, "conf/")
    );
}

/// A streamed object is invisible until finished, whole once finished,
/// and a dropped one leaves nothing (several parts' worth of bytes, so a
/// bucket's multipart upload is exercised).
pub fn an_upload_is_visible_only_when_finished(store: &dyn Store) {
    let big: Vec<u8> = (0..(17usize << 20)).map(|i| (i % 251) as u8).collect();
    let mut upload = store.upload("conf/part.parquet").unwrap();
    upload.write_all(&big).unwrap();
    let listed = keys(store, "conf/");
    assert!(
        !listed.iter().any(|k| k == "conf/part.parquet"),
        "visible before finish: {listed:?}"
    );
    assert_eq!(
        store.get("conf/part.parquet").unwrap(),
        None,
        "readable before finish"
    );
    upload.finish().unwrap();
    assert_eq!(store.get("conf/part.parquet").unwrap().unwrap(), big);
    let mut dropped = store.upload("conf/dropped.parquet").unwrap();
    dropped.write_all(&big).unwrap();
    drop(dropped);
    assert_eq!(keys(store, "conf/"), ["conf/part.parquet"]);
    store.delete("conf/part.parquet").unwrap();
}

/// One holder at a time, named to the next; freed when dropped.
pub fn a_lock_admits_one_holder(store: &dyn Store) {
    let key = "conf/lock-s000of001";
    let first = store
        .lock(key, &Holder("first".into()), None)
        .unwrap()
        .expect("a free lock is taken");
    let refused = store
        .lock(key, &Holder("second".into()), None)
        .unwrap()
        .expect_err("a held lock is refused");
    assert!(refused.0.starts_with("first"), "{refused}");
    assert!(store
        .holder(key)
        .unwrap()
        .is_some_and(|h| h.0.starts_with("first")));
    drop(first);
    assert_eq!(store.holder(key).unwrap(), None);
    let again = store.lock(key, &Holder("third".into()), None).unwrap();
    assert!(again.is_ok(), "a freed lock is taken again");
    drop(again);
    store.delete(key).unwrap();
}

/// Spaces, `&` and `=` in keys survive put, list and get. (Non-ASCII is
/// listed percent-encoded by object_store's paths: segpredict's own names
/// are ASCII.)
pub fn keys_with_odd_characters_round_trip(store: &dyn Store) {
    let key = "conf/dt=2026-12-06/a b&c.json";
    store.put(key, b"x").unwrap();
    assert_eq!(keys(store, "conf/"), [key]);
    assert_eq!(store.get(key).unwrap().unwrap(), &b"x"[..]);
    store.delete(key).unwrap();
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use segpredict_storage::object_store::memory::InMemory;
    use segpredict_storage::object_store::ObjectStore;
    use segpredict_storage::ObjectUrl;

    #[test]
    fn local_disk_keeps_every_promise() {
        let dir = tempfile::tempdir().unwrap();
        super::run_all(&crate::LocalStore::new(dir.path().join("out")));
    }

    #[test]
    fn object_stores_in_memory_store_keeps_every_promise() {
        let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let url = ObjectUrl::with_store("memory://test", "out", memory);
        super::run_all(&crate::BucketStore::new(url, Duration::from_secs(60)));
    }
}
