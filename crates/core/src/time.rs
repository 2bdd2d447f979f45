//! Times as a person reads them: RFC 3339 in UTC, and how long ago.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `t` as RFC 3339, UTC, to the second (`2026-12-06T23:59:01Z`).
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Now, as [`rfc3339`].
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// Milliseconds since the Unix epoch as [`rfc3339`].
pub fn rfc3339_ms(unix_ms: u64) -> String {
    rfc3339(UNIX_EPOCH + Duration::from_millis(unix_ms))
}

/// Nanoseconds since the Unix epoch as RFC 3339 to the millisecond
/// (`2026-12-03T09:41:07.123Z`); a time before 1970 says so.
pub fn rfc3339_ns(ns: i64) -> String {
    match u64::try_from(ns) {
        Ok(ns) => {
            humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
        }
        Err(_) => format!("{} ns before 1970-01-01T00:00:00Z", ns.unsigned_abs()),
    }
}

/// `t` against now: `in 4 min` or `3 min ago`, to the second below a
/// minute.
pub fn relative(t: SystemTime) -> String {
    let (span, future) = match t.duration_since(SystemTime::now()) {
        Ok(ahead) => (ahead, true),
        Err(behind) => (behind.duration(), false),
    };
    let secs = span.as_secs();
    let text = match secs {
        0..=59 => format!("{secs} s"),
        60..=7199 => format!("{} min", secs / 60),
        _ => format!("{} h", secs / 3600),
    };
    match future {
        true => format!("in {text}"),
        false => format!("{text} ago"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc_and_relative() {
        assert_eq!(rfc3339_ms(1_765_065_541_000), "2025-12-06T23:59:01Z");
        let later = SystemTime::now() + Duration::from_secs(300);
        assert!(relative(later).starts_with("in 4 min") || relative(later) == "in 5 min");
        let earlier = SystemTime::now() - Duration::from_secs(7300);
        assert_eq!(relative(earlier), "2 h ago");
    }
}
