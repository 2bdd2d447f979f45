//! What a store's server answered, read back from object_store's error:
//! its retry error is not public, so its text is parsed (status line, the
//! XML or JSON error body, the retries spent). The body appears at every
//! level of the error's chain; a person needs it once, in one line.

use std::error::Error as StdError;

/// The server's answer to a request that failed, as far as it is known.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Answer {
    /// `404`, when the server answered.
    pub status: Option<u16>,
    /// `404 Not Found`.
    status_line: String,
    /// `NoSuchBucket` (S3 and GCS XML), `ContainerNotFound` (Azure).
    code: String,
    /// The server's message, one line.
    message: String,
    /// `after 37 retries in 181.2s`, when object_store retried.
    retries: String,
}

/// object_store's prefix of a status error's text.
const STATUS_PREFIX: &str = "Server returned non-2xx status code: ";

impl Answer {
    /// The answer inside `error`'s chain, when a server gave one or the
    /// request was retried.
    pub fn of(error: &object_store::Error) -> Option<Answer> {
        let mut answer = Answer::default();
        let mut level: Option<&(dyn StdError + 'static)> = Some(error);
        let mut found = false;
        while let Some(e) = level {
            let text = e.to_string();
            if let Some(at) = text.find("Error performing ") {
                answer.retries = retries_of(&text[at..]);
                found = true;
            }
            if let Some(at) = text.find(STATUS_PREFIX) {
                answer.read_status(&text[at + STATUS_PREFIX.len()..]);
                found = true;
            }
            level = e.source();
        }
        found.then_some(answer)
    }

    /// `404 Not Found: <body>`.
    fn read_status(&mut self, text: &str) {
        let (line, body) = text.split_once(": ").unwrap_or((text, ""));
        self.status = line.split(' ').next().and_then(|s| s.parse().ok());
        self.status_line = line.trim().to_string();
        self.code = between(body, "<Code>", "</Code>")
            .or_else(|| json_string(body, "reason"))
            .unwrap_or_default();
        self.message = between(body, "<Message>", "</Message>")
            .or_else(|| json_string(body, "message"))
            .unwrap_or_else(|| body.to_string());
        self.message = squeeze(&self.message, 200);
    }

    pub fn is_missing_bucket(&self) -> bool {
        let said =
            |needle: &str| self.code.eq_ignore_ascii_case(needle) || self.message.contains(needle);
        self.status == Some(404)
            && (said("NoSuchBucket")
                || said("ContainerNotFound")
                || self.message.contains("bucket does not exist"))
    }

    fn text(&self) -> String {
        let mut parts = Vec::new();
        if !self.status_line.is_empty() {
            parts.push(format!("HTTP {}", self.status_line));
        }
        if !self.code.is_empty() {
            parts.push(self.code.clone());
        }
        if !self.message.is_empty() && self.message != self.code {
            parts.push(self.message.clone());
        }
        let mut line = parts.join(": ");
        if !self.retries.is_empty() {
            line = format!("{line} ({})", self.retries).trim().to_string();
        }
        line
    }
}

/// `error` in one line ([`crate::one_line`]).
pub(crate) fn one_line(error: &object_store::Error) -> String {
    match Answer::of(error) {
        Some(answer) if answer.status.is_some() => answer.text(),
        Some(answer) => {
            // No answer from a server: the transport's failure, the deepest.
            let mut deepest: &(dyn StdError + 'static) = error;
            while let Some(next) = deepest.source() {
                deepest = next;
            }
            let line = squeeze(&deepest.to_string(), 300);
            match answer.retries.is_empty() {
                true => line,
                false => format!("{line} ({})", answer.retries),
            }
        }
        None => squeeze(&error.to_string(), 300),
    }
}

/// `after 3 retries in 1.2s` from a retry error's text (`Error performing
/// GET URI in 1.2s, after 3 retries, max_retries: ...`).
fn retries_of(text: &str) -> String {
    let head = text.split(" - ").next().unwrap_or(text);
    let elapsed = head
        .rsplit_once(" in ")
        .map(|(_, rest)| rest.split([',', ' ']).next().unwrap_or(""))
        .unwrap_or("");
    let retries = head
        .split_once("after ")
        .and_then(|(_, rest)| rest.split(' ').next())
        .unwrap_or("0");
    match retries {
        "0" => String::new(),
        n => format!("after {n} retries in {elapsed}"),
    }
}

fn between(text: &str, open: &str, close: &str) -> Option<String> {
    let start = text.find(open)? + open.len();
    let end = text[start..].find(close)? + start;
    Some(text[start..end].trim().to_string())
}

/// `"key": "value"` in a JSON error body (GCS), without parsing the JSON.
fn json_string(text: &str, key: &str) -> Option<String> {
    let at = text.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_string())
}

/// One line of at most `max` characters.
fn squeeze(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// object_store's S3 error for a list of a missing bucket, as its
    /// levels print: the body at each.
    #[derive(Debug)]
    struct Level(String, Option<Box<Level>>);

    impl std::fmt::Display for Level {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl StdError for Level {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            self.1.as_deref().map(|l| l as &(dyn StdError + 'static))
        }
    }

    fn missing_bucket() -> object_store::Error {
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchBucket</Code>\
                    <Message>The specified bucket does not exist</Message><BucketName>nope</BucketName></Error>";
        let status = format!("{STATUS_PREFIX}404 Not Found: {body}");
        let retry =
            format!("Error performing GET http://127.0.0.1:9/nope?list-type=2 in 2.1ms - {status}");
        let list = format!("Error performing list request: {retry}");
        object_store::Error::Generic {
            store: "S3",
            source: Box::new(Level(
                list,
                Some(Box::new(Level(retry, Some(Box::new(Level(status, None)))))),
            )),
        }
    }

    #[test]
    fn a_missing_bucket_is_one_line_and_permanent() {
        let error = missing_bucket();
        let line = one_line(&error);
        assert_eq!(
            line,
            "HTTP 404 Not Found: NoSuchBucket: The specified bucket does not exist"
        );
        assert!(crate::is_missing_bucket(&error));
        assert!(crate::is_permanent(&error));
        let io = crate::io_error(&error);
        assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
        assert!(io.get_ref().unwrap().source().is_none());
    }

    #[test]
    fn a_server_error_after_retries_is_retryable_and_says_how_long() {
        let status = format!("{STATUS_PREFIX}503 Slow Down: <Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>");
        let retry = format!("Error performing GET http://h/b/k in 181.5s, after 40 retries, max_retries: 18446744073709551615, retry_timeout: 180s  - {status}");
        let error = object_store::Error::Generic {
            store: "S3",
            source: Box::new(Level(retry, Some(Box::new(Level(status, None))))),
        };
        assert_eq!(
            one_line(&error),
            "HTTP 503 Slow Down: SlowDown: Please reduce your request rate. (after 40 retries in 181.5s)"
        );
        assert!(!crate::is_permanent(&error));
    }

    #[test]
    fn a_transport_failure_is_its_deepest_cause() {
        let retry = "Error performing GET http://h/b/k in 3s, after 5 retries, max_retries: 9, retry_timeout: 180s  - HTTP error: error sending request".to_string();
        let error = object_store::Error::Generic {
            store: "S3",
            source: Box::new(Level(
                retry,
                Some(Box::new(Level("connection refused".into(), None))),
            )),
        };
        assert_eq!(
            one_line(&error),
            "connection refused (after 5 retries in 3s)"
        );
    }

    #[test]
    fn a_gcs_json_body_gives_its_message() {
        let mut answer = Answer::default();
        answer.read_status(
            "404 Not Found: {\"error\": {\"code\": 404, \"message\": \"The specified bucket does not exist.\"}}",
        );
        assert!(answer.is_missing_bucket());
        assert_eq!(
            answer.text(),
            "HTTP 404 Not Found: The specified bucket does not exist."
        );
    }
}
