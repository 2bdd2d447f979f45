//! A panic inside a dependency while it decodes a file (the parquet crate
//! indexing out of range on a corrupt page) becomes an error for that file
//! and row group, not a crashed stage: corrupt user data never panics the
//! program. The panic hook stays quiet for panics caught here, so stderr
//! shows one error line, not a backtrace.

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    static MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// What a caught panic said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanicMessage(pub String);

/// Installs the hook that keeps caught panics quiet (others print as
/// before). Call once, at start-up.
pub fn install_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if CATCHING.with(Cell::get) {
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            MESSAGE.with(|m| *m.borrow_mut() = Some(message));
        } else {
            default(info);
        }
    }));
}

/// Runs `f` (on this thread), turning a panic into its message.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, PanicMessage> {
    let was = CATCHING.with(|c| c.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(was));
    result.map_err(|_| {
        let message = MESSAGE.with(|m| m.borrow_mut().take());
        PanicMessage(message.unwrap_or_else(|| "a panic without a message".into()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_its_message() {
        install_hook();
        let caught = catch(|| -> u8 { panic!("range start index 9 out of range") });
        assert_eq!(
            caught,
            Err(PanicMessage("range start index 9 out of range".into()))
        );
        assert_eq!(catch(|| 7), Ok(7));
    }
}
