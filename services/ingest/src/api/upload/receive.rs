//! Receiving an upload: a raw body or one `multipart/form-data` part, streamed to a staged
//! blob within the size limit and the body timeout.

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::{HeaderMap, StatusCode, header};
use docflow_store::Staged;
use futures::StreamExt;
use sha2::{Digest, Sha256};

use crate::AppState;
use crate::error::ApiError;

/// Bodies up to this size are held in memory while they arrive (at most
/// --max-concurrent-uploads of them, 32 MiB by default), checked there and written to their
/// staged file in one go; bigger ones stream to the file as they arrive.
const HELD_BODY_BYTES: usize = 1 << 20;

/// An upload being received: its bytes go to a staged blob as they arrive (a slow or large
/// upload holds a file, not memory), hashed on the way (the document id), with the first
/// bytes kept to tell its type.
struct Receiver {
    staged: Staged,
    hasher: Sha256,
    head: Vec<u8>,
    limit: u64,
}

/// Bytes of the head kept for sniffing.
const HEAD: usize = 16;

impl Receiver {
    async fn push(&mut self, chunk: &[u8]) -> Result<(), ApiError> {
        if self.staged.len() + chunk.len() as u64 > self.limit {
            return Err(ApiError::TooLarge { limit: self.limit });
        }
        self.hasher.update(chunk);
        let want = HEAD.saturating_sub(self.head.len()).min(chunk.len());
        self.head.extend_from_slice(&chunk[..want]);
        self.staged
            .write(chunk)
            .await
            .map_err(|e| ApiError::unavailable("object store", e))
    }
}

/// A received upload (not empty): its staged blob, the hash of its bytes, its first bytes,
/// and the multipart part's file name.
pub(super) struct Received {
    pub(super) staged: Staged,
    pub(super) hasher: Sha256,
    pub(super) head: Vec<u8>,
    pub(super) part_name: Option<String>,
}

pub(super) fn is_multipart(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("multipart/form-data"))
}

/// A raw body announces its size: refuse before reading. (A multipart length includes
/// the framing, so its limit is checked on the part itself.)
pub(super) fn check_length(
    headers: &HeaderMap,
    multipart: bool,
    limit: u64,
) -> Result<(), ApiError> {
    if !multipart
        && let Some(len) = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        && len > limit
    {
        return Err(ApiError::TooLarge { limit });
    }
    Ok(())
}

/// Receives the body of `req` (`multipart`: the part named `file`) into a staged blob, at most
/// `limit` bytes, within --body-timeout; an empty body is refused.
pub(super) async fn receive(
    state: &AppState,
    req: Request,
    multipart: bool,
    limit: u64,
) -> Result<Received, ApiError> {
    let staged = state.blobs.stage_buffered(HELD_BODY_BYTES);
    let mut rx = Receiver {
        staged,
        hasher: Sha256::new(),
        head: Vec::with_capacity(HEAD),
        limit,
    };
    let read = async {
        if multipart {
            read_multipart(req, &mut rx).await
        } else {
            read_raw(req.into_body(), &mut rx).await
        }
    };
    let part_name = tokio::time::timeout(state.body_timeout, read)
        .await
        .map_err(|_| ApiError::BodyTimeout(state.body_timeout))??;
    let Receiver {
        staged,
        hasher,
        head,
        ..
    } = rx;
    if staged.is_empty() {
        return Err(ApiError::BadRequest(
            "empty body: send the document bytes".into(),
        ));
    }
    Ok(Received {
        staged,
        hasher,
        head,
        part_name,
    })
}

/// A raw body, streamed into `rx`.
async fn read_raw(body: Body, rx: &mut Receiver) -> Result<Option<String>, ApiError> {
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::BadRequest(format!("reading the body failed: {e}")))?;
        rx.push(&chunk).await?;
    }
    Ok(None)
}

/// A `multipart/form-data` body: exactly one part named `file`, streamed into `rx` (the
/// limit is enforced while reading); returns the part's file name.
async fn read_multipart(req: Request, rx: &mut Receiver) -> Result<Option<String>, ApiError> {
    let limit = rx.limit;
    let bad = |e: axum::extract::multipart::MultipartError| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge { limit }
        } else {
            ApiError::BadRequest(format!("malformed multipart body: {}", e.body_text()))
        }
    };
    let mut multipart = Multipart::from_request(req, &())
        .await
        .map_err(|e| ApiError::BadRequest(format!("multipart: {}", e.body_text())))?;
    let mut file: Option<Option<String>> = None;
    while let Some(mut field) = multipart.next_field().await.map_err(bad)? {
        if field.name() != Some("file") {
            return Err(ApiError::BadRequest(format!(
                "unexpected multipart part {:?}: send the document as the part named \"file\"",
                field.name().unwrap_or("")
            )));
        }
        if file.is_some() {
            return Err(ApiError::BadRequest(
                "more than one part named \"file\": one document per request".into(),
            ));
        }
        file = Some(field.file_name().map(str::to_owned));
        while let Some(chunk) = field.chunk().await.map_err(bad)? {
            rx.push(&chunk).await?;
        }
    }
    file.ok_or_else(|| ApiError::BadRequest("multipart body has no part named \"file\"".into()))
}
