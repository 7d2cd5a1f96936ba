//! Spare files: empty staged files made ahead of need, so a blob being staged does not make
//! its own file on the upload's path.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Blobs;
use super::staged::{INCOMING, create_staged};

/// Empty staged files made ahead of need ([`Blobs::keep_spare_files`]). Making a file is
/// the dearest step of writing a small blob: a new inode and its name cost 0.26 ms at p50 on
/// the ext4 disk of the machine the benchmarks run on, where writing 100 KiB into the file
/// costs 0.08 ms and linking it under its key 0.03 ms (and more on a network file system). So
/// a blob takes a file made earlier, and a new one is made off its path: a little later,
/// not at once, so that it does not hold the staging directory while the taker links and
/// unlinks there.
#[derive(Debug)]
pub(super) struct Spares {
    /// The staging directory.
    dir: PathBuf,
    /// How many to keep.
    keep: usize,
    files: Mutex<Vec<(PathBuf, std::fs::File)>>,
    /// Whether a top-up is under way (one at a time).
    topping_up: AtomicBool,
    /// Set by [`Blobs::release_spare_files`]: none are kept from then on.
    released: AtomicBool,
}

/// How long after a spare file is taken the top-up starts.
const TOP_UP_DELAY: Duration = Duration::from_millis(5);

impl Spares {
    /// A spare file and its path, if one is left; the pool is topped up after.
    pub(super) fn take(self: &Arc<Self>) -> Option<(PathBuf, std::fs::File)> {
        if self.released.load(Ordering::SeqCst) {
            return None;
        }
        let taken = self.files.lock().ok()?.pop();
        self.top_up(TOP_UP_DELAY);
        taken
    }

    /// Makes files until `keep` are ready, after `delay`, on a blocking thread (nothing when
    /// a top-up is running already, or outside a Tokio runtime). A failure ends the top-up:
    /// blobs then make their own files, and say why when that fails too.
    fn top_up(self: &Arc<Self>, delay: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.released.load(Ordering::SeqCst) || self.topping_up.swap(true, Ordering::SeqCst) {
            return;
        }
        /// Clears the flag however the top-up ends (a runtime shutting down drops it).
        struct Running(Arc<Spares>);
        impl Drop for Running {
            fn drop(&mut self) {
                self.0.topping_up.store(false, Ordering::SeqCst);
            }
        }
        let running = Running(Arc::clone(self));
        runtime.spawn(async move {
            tokio::time::sleep(delay).await;
            let this = Arc::clone(&running.0);
            let filler = Arc::clone(&this);
            let made = tokio::task::spawn_blocking(move || {
                while filler.files.lock().is_ok_and(|f| f.len() < filler.keep) {
                    let path = filler.dir.join(uuid::Uuid::new_v4().simple().to_string());
                    let file = create_staged(&path)?;
                    let Ok(mut files) = filler.files.lock() else {
                        break;
                    };
                    if filler.released.load(Ordering::SeqCst) {
                        // Released while it was made (the flag is set under the lock).
                        let _ = std::fs::remove_file(&path);
                        break;
                    }
                    files.push((path, file));
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            drop(running);
            match made {
                Ok(Ok(())) => {
                    // One taken after the last check of the loop, before the flag was
                    // cleared, found it set: make up for it.
                    if this.files.lock().is_ok_and(|f| f.len() < this.keep) {
                        this.top_up(TOP_UP_DELAY);
                    }
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, dir = %this.dir.display(), "making spare staged files failed");
                }
                Err(_) => {}
            }
        });
    }
}

impl Spares {
    /// Removes the files nobody took, and keeps none from now on.
    fn release(&self) {
        if let Ok(mut files) = self.files.lock() {
            self.released.store(true, Ordering::SeqCst);
            for (path, _) in files.drain(..) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        // Best effort: files nobody took leave with the store (a crash leaves them, empty).
        self.release();
    }
}

impl Blobs {
    /// Keeps `count` empty staged files made ahead of need (see [`Spares`]), so a blob being
    /// staged does not make its own file on the upload's path; they are made on a blocking
    /// thread from now on (within a Tokio runtime), and those not taken are removed when
    /// the last clone of the store, and of the blobs staged from it, is dropped. For the
    /// service that stages many blobs (ingest).
    #[must_use]
    pub fn keep_spare_files(mut self, count: usize) -> Self {
        let spares = Arc::new(Spares {
            dir: self.root.join(INCOMING),
            keep: count,
            files: Mutex::new(Vec::with_capacity(count)),
            topping_up: AtomicBool::new(false),
            released: AtomicBool::new(false),
        });
        spares.top_up(Duration::ZERO);
        self.spares = (count > 0).then_some(spares);
        self
    }

    /// Removes the spare files nobody took ([`Blobs::keep_spare_files`]) and keeps none from
    /// now on, for every clone of the store: at shutdown, where the store itself may outlive
    /// the process's last tasks.
    pub fn release_spare_files(&self) {
        if let Some(spares) = &self.spares {
            spares.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blobs::test_support::{commit_checked, kept, refused_leaves_nothing, staging};
    use crate::blobs::{BlobError, Checked, Committed};

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The check runs first and decides: refused bytes never reach a file or the key; passed
    /// ones are written, keyed (a blob already there kept) and synced. With spare files kept,
    /// a blob takes one (no file made on its path) and the pool is made whole again; they
    /// go with the store.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checked_blobs_take_spare_files_and_refused_ones_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap().keep_spare_files(3);
        until("three spare files made", || staging(&blobs) == (3, 0)).await;
        let spares: Vec<PathBuf> = std::fs::read_dir(blobs.root().join(INCOMING))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();

        let key = Blobs::key(["t", "doc"]);
        let mut staged = blobs.stage_buffered(1 << 20);
        staged.write(b"hello").await.unwrap();
        // On a runtime worker the check runs on the caller's thread (no hop).
        let (checked, staged) = tokio::spawn({
            let (blobs, key) = (blobs.clone(), key.clone());
            async move {
                let on = std::thread::current().id();
                let checked = blobs
                    .check_and_commit(&mut staged, &key, move || {
                        Ok::<_, ()>((7, std::thread::current().id() == on))
                    })
                    .await
                    .unwrap();
                (checked, staged)
            }
        })
        .await
        .unwrap();
        let (passed, committed, syncing) = kept(checked);
        assert_eq!(
            (passed, committed),
            ((7, true), Committed::New { made_dir: true })
        );
        assert!(
            spares.contains(&staged.path().to_owned()),
            "a spare was taken"
        );
        syncing.wait().await.unwrap();
        drop(staged);
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );
        until("the spare taken is made again", || {
            staging(&blobs) == (3, 0)
        })
        .await;

        // The same bytes again: the blob there is kept, the new staged file goes.
        let (committed, _, again) = commit_checked(&blobs, &key, b"hello").await;
        assert_eq!(committed, Committed::Existing);
        drop(again);

        // Refused: nothing under the key, no bytes staged.
        let bad = Blobs::key(["t", "bad"]);
        refused_leaves_nothing(&blobs, &bad).await;
        until("back to three empty spares", || staging(&blobs) == (3, 0)).await;

        // A check that panics: an error, nothing under the key, nothing staged.
        let mut staged = blobs.stage_buffered(1 << 20);
        staged.write(b"boom").await.unwrap();
        let panicked = blobs
            .check_and_commit(&mut staged, &bad, || -> Result<(), ()> { panic!("a bug") })
            .await;
        assert!(matches!(panicked, Err(BlobError::Staging { .. })));
        drop(staged);
        assert!(blobs.get(&bad).await.unwrap().is_none());
        until("three empty spares again", || staging(&blobs) == (3, 0)).await;

        // A store without spares makes its own file.
        let plain = Blobs::open(dir.path()).unwrap();
        let mut staged = plain.stage_buffered(1 << 20);
        staged.write(b"plain").await.unwrap();
        let own = staged.path().to_owned();
        let checked = plain
            .check_and_commit(&mut staged, &Blobs::key(["t", "plain"]), || Ok::<_, ()>(()))
            .await
            .unwrap();
        assert!(matches!(checked, Checked::Kept { .. }));
        assert_eq!(staged.path(), own);

        // Released (shutdown): the spares go at once, and a blob makes its own file.
        let other = Blobs::open(&dir.path().join("other"))
            .unwrap()
            .keep_spare_files(2);
        until("two spare files made", || staging(&other) == (2, 0)).await;
        other.release_spare_files();
        assert_eq!(staging(&other), (0, 0));
        let mut own = other.stage_buffered(1 << 20);
        own.write(b"own").await.unwrap();
        let path = own.path().to_owned();
        own.flush().await.unwrap().wait().await.unwrap();
        assert_eq!(own.path(), path, "no spare taken");
        drop(own);
        tokio::time::sleep(TOP_UP_DELAY * 4).await;
        assert_eq!(staging(&other), (0, 0), "none made again");

        // The spares go with the last clone of the store (a top-up ending holds one a
        // moment longer).
        let clone = blobs.clone();
        drop(blobs);
        assert_eq!(staging(&clone), (3, 0));
        drop(clone);
        until("spares removed", || staging(&plain) == (0, 0)).await;
    }
}
