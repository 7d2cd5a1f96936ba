//! Checking an upload's bytes and putting them under their key, the duplicate read beside.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Instant;

use docflow_store::jobs::Job;
use docflow_store::{BlobError, Checked, Committed, Staged, StoreError, Syncing};
use object_store::path::Path as Key;

use crate::AppState;
use crate::error::ApiError;
use crate::sniff::{Kind, check_pdf};
use crate::timing::{Timing, timed};

/// Where an upload's bytes are once checked.
pub(super) enum Stored {
    /// Under their key already (a held body): what the commit did, and the fsync running.
    Linked(Committed, Syncing),
    /// In their staged file (a streamed body), the fsync running: put under the key next.
    Flushed(Syncing),
}

/// An object store's failure, as the API answers it.
pub(super) fn store_error(e: BlobError) -> ApiError {
    ApiError::unavailable("object store", e)
}

/// The checks of the `staged` bytes (a PDF's structure) and the file, with `lookup` (the
/// duplicate read) beside them when it is needed; their parts go to `timing`. Returns where
/// the bytes are, and the job already recorded for them, if any.
///
/// A body held in memory is checked, written and put under its key on this thread
/// (`block_in_place`: no thread to wake and wait for; the check first, so refused bytes
/// never reach the disk), and its fsync starts on a blocking thread. Only when its key
/// held a blob already is the job read: a job is recorded only after its bytes are under
/// their key, and blobs are never removed, so a key that was free has no job to find
/// (a blob removed by hand, or a link lost in a crash of the machine, makes its next
/// upload new again: its record only counts it). Without a thread to wake for
/// the store, the read beside it was what this step waited for; now a new upload has
/// neither (this step 0.19-0.28 -> 0.10-0.16 ms at p50, 0.41-0.83 -> 0.18-0.30 at p99 over
/// seven alternating runs of ingest-bench). A bigger body is read back from its file to be
/// checked, then put under its key, the job read beside both. Only the answer waits for
/// the fsync.
pub(super) async fn check_and_store(
    state: &AppState,
    timing: &mut Timing,
    staged: &mut Staged,
    key: &Key,
    kind: Kind,
    reprocess: bool,
    lookup: impl Future<Output = Result<Option<Job>, StoreError>>,
) -> Result<(Stored, Option<Job>), ApiError> {
    let held = staged.held();
    let write_part = if held.is_some() {
        "check.store"
    } else {
        "check.write"
    };
    // `stored` is the first failure of the checks and the file (a refusal, or a store that
    // is away), `existing` the duplicate read's (`None` in the times: it did not run).
    let (stored, existing, [pdf_ms, write_ms], lookup_ms) = match held {
        Some(bytes) => {
            let max_pages = state.max_pages;
            let store = async {
                let _permit = if kind == Kind::Pdf {
                    let permit = state.pdf_checks.acquire().await;
                    Some(permit.map_err(|e| ApiError::failed("checking the PDF", e))?)
                } else {
                    None
                };
                let check = move || {
                    let started = Instant::now();
                    if kind == Kind::Pdf {
                        // A bug in the check is this server's fault (500), not a refusal of
                        // the bytes and not a store that is away (503: retried for ever).
                        let checked = std::panic::catch_unwind(|| check_pdf(&bytes, max_pages))
                            .map_err(|_| ApiError::Internal("the PDF check failed".into()))?;
                        checked?;
                    }
                    Ok::<_, ApiError>(started.elapsed().as_secs_f64() * 1e3)
                };
                let checked = state.blobs.check_and_commit(&mut *staged, key, check);
                checked.await.map_err(store_error)
            };
            let (stored, store_ms) = timed(store).await;
            let (stored, pdf_ms) = match stored {
                Ok(Checked::Kept {
                    passed,
                    committed,
                    syncing,
                }) => (Ok(Stored::Linked(committed, syncing)), passed),
                Ok(Checked::Refused(e)) | Err(e) => (Err(e), 0.0),
            };
            // (With `?reprocess=true` a job found changes nothing; while job reads or records
            // fail, the database is asked first, whatever the key.)
            let failing = state.jobs_failing.load(Ordering::Relaxed);
            let (existing, lookup_ms) = match &stored {
                Ok(Stored::Linked(committed, _))
                    if failing || (*committed == Committed::Existing && !reprocess) =>
                {
                    let (existing, ms) = timed(lookup).await;
                    (existing, Some(ms))
                }
                _ => (Ok(None), None),
            };
            (stored, existing, [pdf_ms, store_ms], lookup_ms)
        }
        None => {
            // The file is complete before it is read back, the duplicate read beside both.
            let read_back = async {
                let (syncing, write_ms) = timed(staged.flush()).await;
                let syncing = syncing.map(Stored::Flushed).map_err(store_error);
                let (checked, pdf_ms) = timed(async {
                    if kind == Kind::Pdf && syncing.is_ok() {
                        check_pdf_file(state, staged.path().to_owned()).await?;
                    }
                    Ok::<_, ApiError>(())
                })
                .await;
                (syncing, write_ms, checked, pdf_ms)
            };
            let ((stored, write_ms, checked, pdf_ms), (existing, lookup_ms)) =
                tokio::join!(read_back, timed(lookup));
            // (The check runs only once the file is whole.)
            let stored = stored.and_then(|s| checked.map(|()| s));
            (stored, existing, [pdf_ms, write_ms], Some(lookup_ms))
        }
    };
    if kind == Kind::Pdf {
        timing.part("check.pdf", pdf_ms);
    }
    timing.part(write_part, write_ms);
    if let Some(lookup_ms) = lookup_ms {
        timing.part("check.lookup", lookup_ms);
        state
            .jobs_failing
            .store(existing.is_err(), Ordering::Relaxed);
    }
    let stored = stored?;
    let existing = existing?;
    Ok((stored, existing))
}

/// The page and structure checks of a PDF in its staged file (a body too big to hold):
/// read back and parsed off the async threads, at most --pdf-checks at a time (each may
/// hold the document and up to [`crate::sniff::MAX_INFLATED`] of inflated object streams).
/// A held body is checked by the thread that writes it ([`check_and_store`]), under the same
/// limit.
async fn check_pdf_file(state: &AppState, path: std::path::PathBuf) -> Result<usize, ApiError> {
    let _permit = state
        .pdf_checks
        .acquire()
        .await
        .map_err(|e| ApiError::failed("checking the PDF", e))?;
    let max_pages = state.max_pages;
    let checked = tokio::task::spawn_blocking(move || {
        let bytes = std::fs::read(&path)?;
        Ok::<_, std::io::Error>(check_pdf(&bytes, max_pages))
    })
    .await
    .map_err(|e| ApiError::failed("checking the PDF", e))?
    .map_err(|e| ApiError::unavailable("object store", e))?;
    Ok(checked?)
}

/// The bytes under their key: visible there before the event is produced, so a stage finds
/// them (while the machine stays up; after a crash of the machine, only an answered upload's
/// bytes are sure to be there). A blob already under the key is kept when it holds these
/// bytes, and replaced when it does not (a crash of the machine before its fsync left it
/// short or zero-filled): the upload then goes on as a new one, its event produced again.
/// Returns what the commit did and the fsync running.
pub(super) async fn commit(
    state: &AppState,
    timing: &mut Timing,
    stored: Stored,
    staged: Staged,
    key: &Key,
) -> Result<(Committed, Syncing), ApiError> {
    Ok(match stored {
        Stored::Linked(committed, syncing) => {
            // A duplicate's staged copy goes now, not when the answer is sent.
            drop(staged);
            (committed, syncing)
        }
        Stored::Flushed(syncing) => {
            let committed = state.blobs.commit(staged, key).await.map_err(store_error)?;
            timing.mark("store");
            (committed, syncing)
        }
    })
}
