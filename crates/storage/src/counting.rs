//! Every HTTP request to object storage passes here, so the run can say
//! how many it made, how many failed (and were retried) and how many bytes
//! moved: object_store retries inside its clients, out of our sight.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use http_body_util::BodyExt;
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse,
    HttpResponseBody, HttpService, ReqwestConnector,
};
use segpredict_core::requests::StoreRequests;

static REQUESTS: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
static BYTES_READ: AtomicU64 = AtomicU64::new(0);
static BYTES_WRITTEN: AtomicU64 = AtomicU64::new(0);
static REFETCHED_RANGES: AtomicU64 = AtomicU64::new(0);

/// An input range that did not decode was fetched again and then decoded.
pub fn count_refetched_range() {
    count(&REFETCHED_RANGES, 1);
}

/// Requests since the process started.
pub fn requests() -> StoreRequests {
    StoreRequests {
        requests: REQUESTS.load(Ordering::Relaxed),
        failed: FAILED.load(Ordering::Relaxed),
        bytes_read: BYTES_READ.load(Ordering::Relaxed),
        bytes_written: BYTES_WRITTEN.load(Ordering::Relaxed),
        refetched_ranges: REFETCHED_RANGES.load(Ordering::Relaxed),
    }
}

fn count(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// Builds object_store's own reqwest client, wrapped in [`Counted`].
#[derive(Debug, Default)]
pub(crate) struct CountingConnector;

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Counted(inner)))
    }
}

#[derive(Debug)]
struct Counted(HttpClient);

/// Throttling and server errors: object_store retries both.
fn is_failure(status: u16) -> bool {
    status == 429 || status >= 500
}

#[async_trait]
impl HttpService for Counted {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        count(&REQUESTS, 1);
        count(&BYTES_WRITTEN, request.body().content_length() as u64);
        let response = self
            .0
            .execute(request)
            .await
            .inspect_err(|_| count(&FAILED, 1))?;
        if is_failure(response.status().as_u16()) {
            count(&FAILED, 1);
        }
        let (parts, body) = response.into_parts();
        let body = body
            .map_frame(|frame| {
                if let Some(data) = frame.data_ref() {
                    count(&BYTES_READ, data.len() as u64);
                }
                frame
            })
            // A body cut short: object_store resumes it from where it broke.
            .map_err(|error| {
                count(&FAILED, 1);
                error
            });
        Ok(HttpResponse::from_parts(parts, HttpResponseBody::new(body)))
    }
}
