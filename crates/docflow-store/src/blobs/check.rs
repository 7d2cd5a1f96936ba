//! Check, then commit: a caller's check of the bytes (ingest's PDF check) runs before the blob
//! is written out and linked under its key, so refused bytes are never keyed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use object_store::path::Path as Key;

use super::commit::link_under;
use super::durable::sync_dirs;
use super::staged::{Body, fill_staged};
use super::{BlobError, Blobs, Committed, Staged, Syncing};

/// What [`Blobs::check_and_commit`] does away from the async code: the check, then the
/// staged file written and linked under its key.
struct CheckAndLink {
    /// The staged file, when open already (a spare, or the file a streamed blob went to).
    file: Option<std::fs::File>,
    /// What is left to write into it.
    bytes: Option<Bytes>,
    path: PathBuf,
    target: PathBuf,
    gone: Arc<AtomicBool>,
}

/// A checked blob under its key ([`CheckAndLink::run`]).
struct Linked<T> {
    passed: T,
    committed: Committed,
    /// What makes a new blob durable (`None` once taken, and for a blob that was there).
    sync: Option<SyncNew>,
}

/// A new blob's bytes and name, to be made durable.
struct SyncNew {
    file: std::fs::File,
    path: PathBuf,
    target: PathBuf,
    made_dir: bool,
}

impl CheckAndLink {
    /// Blocks: `check`, then, when it passes, the bytes written and linked under the key.
    fn run<T, E>(
        self,
        check: impl FnOnce() -> Result<T, E>,
    ) -> std::io::Result<Result<Linked<T>, E>> {
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check))
            .map_err(|_| std::io::Error::other("the blob's check panicked"))?;
        let passed = match checked {
            Ok(passed) => passed,
            Err(refused) => return Ok(Err(refused)),
        };
        let file = fill_staged(self.file, &self.path, self.bytes, &self.gone)?;
        let committed = link_under(&self.path, &self.target)?;
        let sync = match committed {
            Committed::New { made_dir } => Some(SyncNew {
                file,
                path: self.path,
                target: self.target,
                made_dir,
            }),
            Committed::Existing => None,
        };
        Ok(Ok(Linked {
            passed,
            committed,
            sync,
        }))
    }
}

/// The sync of a new blob out of what [`CheckAndLink::run`] did (`None` for a blob that was
/// there, a refusal or a failure).
fn take_sync<T, E>(done: &mut std::io::Result<Result<Linked<T>, E>>) -> Option<SyncNew> {
    match done {
        Ok(Ok(linked)) => linked.sync.take(),
        _ => None,
    }
}

impl SyncNew {
    /// Blocks: the bytes, then the new name. The first sync commits the link with the bytes
    /// (one journal commit on ext4), so the directory's sync finds little left to do.
    fn run(self, root: &Path) -> Result<(), BlobError> {
        self.file.sync_data().map_err(|source| BlobError::Staging {
            path: self.path,
            source,
        })?;
        sync_dirs(&self.target, root, self.made_dir)
    }
}

/// What [`Blobs::check_and_commit`] did.
#[derive(Debug)]
pub enum Checked<T, E> {
    /// The check passed (with what it returned); the blob is under its key.
    Kept {
        /// What the check returned.
        passed: T,
        /// What the commit did.
        committed: Committed,
        /// A new blob's bytes on their way to disk.
        syncing: Syncing,
    },
    /// The check refused the bytes: nothing was written under the key.
    Refused(E),
}

impl Blobs {
    /// Runs `check` and, when it passes, writes out the blob and puts it under `key` as
    /// [`Blobs::commit`] does, then syncs a new blob's bytes (`fdatasync`) and its directory.
    /// On a multi-threaded runtime the check, the write and the link run on the caller's
    /// thread, in [`tokio::task::block_in_place`] (the runtime hands the thread's other tasks
    /// to another thread meanwhile; futures joined or selected with this call in the same
    /// task wait for it); on a current-thread runtime, on one blocking thread, there and
    /// back. A blob streaming to its file is flushed first. A panic in `check` is an error
    /// of the staged blob, as an I/O failure is. Bytes that `check` refuses are never written
    /// or keyed; their staged file, if any, goes when `staged` is dropped. Returns once the
    /// key is taken, with the sync running on a blocking thread (for
    /// [`Blobs::sync_committed`]). After the first call there is nothing left to write.
    pub async fn check_and_commit<T, E>(
        &self,
        staged: &mut Staged,
        key: &Key,
        check: impl FnOnce() -> Result<T, E> + Send + 'static,
    ) -> Result<Checked<T, E>, BlobError>
    where
        T: Send + 'static,
        E: Send + 'static,
    {
        use tokio::io::AsyncWriteExt;
        let target = self.store.path_to_filesystem(key)?;
        let (file, bytes) = match std::mem::replace(&mut staged.body, Body::Flushed) {
            Body::Flushed => return Err(staged.io(std::io::Error::other("already written"))),
            Body::Memory(buf) => (None, Some(Bytes::from(buf))),
            Body::Held(bytes) => (None, Some(bytes)),
            Body::File(mut file) => {
                file.flush().await.map_err(|e| staged.io(e))?;
                (Some(file.into_std().await), None)
            }
        };
        let file = file.or_else(|| staged.take_spare());
        let job = CheckAndLink {
            file,
            bytes,
            path: staged.path.clone(),
            target,
            gone: staged.gone.clone(),
        };
        let root = self.root.clone();
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let (done, syncing) = if multi_thread {
            let mut done = tokio::task::block_in_place(|| job.run(check));
            // A blob that was already there is synced by `sync_committed`.
            let syncing = take_sync(&mut done).map_or_else(Syncing::default, |sync| {
                Syncing::dir(tokio::task::spawn_blocking(move || sync.run(&root)))
            });
            (done, syncing)
        } else {
            // On one blocking thread: the answer comes back once the key is taken, and the
            // same thread goes on to sync.
            let (done_tx, done_rx) = tokio::sync::oneshot::channel();
            let task = tokio::task::spawn_blocking(move || {
                let mut done = job.run(check);
                let sync = take_sync(&mut done);
                let _ = done_tx.send(done);
                sync.map_or(Ok(()), |sync| sync.run(&root))
            });
            let done = done_rx
                .await
                .map_err(|_| std::io::Error::other("the blob's writer stopped"));
            let done = done.and_then(|d| d);
            (done, Syncing::dir(task))
        };
        Ok(match done.map_err(|e| staged.io(e))? {
            Ok(linked) => {
                // A new blob's staged name is gone; an existing one's staged file is removed
                // on drop.
                staged.committed = matches!(linked.committed, Committed::New { .. });
                Checked::Kept {
                    passed: linked.passed,
                    committed: linked.committed,
                    syncing,
                }
            }
            Err(refused) => Checked::Refused(refused),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blobs::test_support::{commit_checked, kept, refused_leaves_nothing, staging};

    /// On a current-thread runtime (where `block_in_place` is not allowed) the check, the
    /// write and the link run on a blocking thread instead, with the same outcomes.
    #[tokio::test(flavor = "current_thread")]
    async fn checked_blobs_on_a_current_thread_runtime() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let key = Blobs::key(["t", "doc"]);
        let mut staged = blobs.stage_buffered(1 << 20);
        staged.write(b"hello").await.unwrap();
        let on = std::thread::current().id();
        let checked = blobs
            .check_and_commit(&mut staged, &key, move || {
                Ok::<_, ()>(std::thread::current().id() != on)
            })
            .await
            .unwrap();
        let (passed, committed, syncing) = kept(checked);
        assert!(passed, "checked on another thread");
        assert_eq!(committed, Committed::New { made_dir: true });
        blobs
            .sync_committed(&key, committed, syncing)
            .await
            .unwrap();
        drop(staged);
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );

        let (committed, syncing, again) = commit_checked(&blobs, &key, b"hello").await;
        assert_eq!(committed, Committed::Existing);
        blobs
            .sync_committed(&key, committed, syncing)
            .await
            .unwrap();
        drop(again);

        refused_leaves_nothing(&blobs, &Blobs::key(["t", "bad"])).await;
        assert_eq!(staging(&blobs), (0, 0), "nothing left staged");
    }
}
