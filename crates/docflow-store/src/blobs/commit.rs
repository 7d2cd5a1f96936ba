//! Committing: a staged blob linked under its key in one step, a blob already there kept
//! when it holds the same bytes and replaced when it does not.

use std::path::Path;

use object_store::path::Path as Key;

use super::{BlobError, Blobs, Staged};

/// Links the staged file `from` under `target` and removes its staged name, making the
/// key's directory the first time; a file already at `target` is kept when it holds the
/// same bytes, and replaced when it does not (see [`Blobs::commit`]).
pub(super) fn link_under(from: &Path, target: &Path) -> std::io::Result<Committed> {
    let mut made_dir = false;
    let mut linked = std::fs::hard_link(from, target);
    if let Err(e) = &linked
        && e.kind() == std::io::ErrorKind::NotFound
        && from.exists()
        && let Some(parent) = target.parent()
    {
        std::fs::create_dir_all(parent)?;
        made_dir = true;
        linked = std::fs::hard_link(from, target);
    }
    match linked {
        Ok(()) => {
            match std::fs::remove_file(from) {
                // Removed already: the upload was dropped meanwhile (the blob stays linked).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                removed => removed?,
            }
            Ok(Committed::New { made_dir })
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if same_bytes(from, target)? {
                return Ok(Committed::Existing);
            }
            // Not the bytes its key names: a crash of the machine before an earlier upload's
            // sync can leave its file linked but short or zero-filled, and kept as it was,
            // every later upload of the bytes would be acknowledged over it while the stages
            // refuse it (digest mismatch). Replaced in one step (a reader sees the old file
            // or the new one), by bytes already on disk: two retries replacing it at once
            // must not leave the one answered first under a file whose sync never finished.
            std::fs::File::open(from)?.sync_data()?;
            std::fs::rename(from, target)?;
            tracing::warn!(blob = %target.display(), "a blob that did not hold its key's bytes was replaced");
            Ok(Committed::New { made_dir: false })
        }
        Err(e) => Err(e),
    }
}

/// Whether the file at `target` holds the bytes of the staged file at `staged`. A target
/// that cannot be read does not (it is replaced); a staged file that cannot be read is an
/// error.
fn same_bytes(staged: &Path, target: &Path) -> std::io::Result<bool> {
    use std::io::Read as _;
    let mut a = std::fs::File::open(staged)?;
    let Ok(mut b) = std::fs::File::open(target) else {
        return Ok(false);
    };
    let len = a.metadata()?.len();
    if b.metadata().ok().map(|m| m.len()) != Some(len) {
        return Ok(false);
    }
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    let mut left = len;
    while left > 0 {
        let n = usize::try_from(left).map_or(x.len(), |l| l.min(x.len()));
        a.read_exact(&mut x[..n])?;
        if b.read_exact(&mut y[..n]).is_err() || x[..n] != y[..n] {
            return Ok(false);
        }
        left -= n as u64;
    }
    Ok(true)
}

/// What [`Blobs::commit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// The staged blob is now under the key.
    New {
        /// Whether the key's directory was made for it.
        made_dir: bool,
    },
    /// A blob with the same bytes was already under the key; it was kept and the staged one
    /// dropped.
    Existing,
}

impl Blobs {
    /// Puts a staged blob under `key` atomically (a hard link, then the staged name is
    /// removed: readers see the blob whole or not at all). A blob already under the key that
    /// holds the same bytes (compared, one read of each) is kept as it is: keys name their
    /// bytes (tenant and SHA-256), and replacing it with a file whose sync is still running
    /// could leave a crash with less than an earlier acknowledged upload had. One that does
    /// not (cut short or zero-filled by a crash of the machine before its sync) is replaced
    /// by a rename, reported as [`Committed::New`]. Says which happened, and whether the
    /// key's directory was made (see [`Blobs::sync_dir_of`]).
    pub async fn commit(&self, mut staged: Staged, key: &Key) -> Result<Committed, BlobError> {
        staged.finish().await?;
        let target = self.store.path_to_filesystem(key)?;
        let io = |source| BlobError::Staging {
            path: staged.path.clone(),
            source,
        };
        // One trip to a blocking thread.
        let from = staged.path.clone();
        let linked = tokio::task::spawn_blocking(move || link_under(&from, &target));
        let committed = linked
            .await
            .map_err(std::io::Error::other)
            .map_err(io)?
            .map_err(io)?;
        // A new blob's staged name is gone; an existing one's staged file is removed on drop.
        staged.committed = matches!(committed, Committed::New { .. });
        Ok(committed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blobs::test_support::{commit_checked, staging};

    /// A blob under its key that is not the key's bytes (what a crash of the machine before
    /// its sync can leave: the link kept, the bytes cut short or zero-filled) is replaced by
    /// the next upload of the bytes, on both ways in; one that is the same bytes is kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_blob_that_is_not_its_keys_bytes_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let key = Blobs::key(["t", "doc"]);
        let path = blobs.store.path_to_filesystem(&key).unwrap();
        let bytes = b"the document's bytes".to_vec();
        let (committed, syncing, first) = commit_checked(&blobs, &key, &bytes).await;
        assert_eq!(committed, Committed::New { made_dir: true });
        syncing.wait().await.unwrap();
        drop(first);

        // Held in memory (`check_and_commit`): the same length, zero-filled; then cut short.
        for broken in [vec![0u8; bytes.len()], bytes[..4].to_vec()] {
            std::fs::write(&path, &broken).unwrap();
            let (committed, syncing, again) = commit_checked(&blobs, &key, &bytes).await;
            assert_eq!(committed, Committed::New { made_dir: false }, "replaced");
            blobs
                .sync_committed(&key, committed, syncing)
                .await
                .unwrap();
            assert!(!again.path().exists(), "the staged name became the key's");
            drop(again);
            assert_eq!(blobs.get(&key).await.unwrap(), Some(bytes.clone().into()));
        }
        // The right bytes are kept.
        let (committed, _, again) = commit_checked(&blobs, &key, &bytes).await;
        assert_eq!(committed, Committed::Existing);
        drop(again);

        // Past the first 64 KiB read: one byte flipped in the fourth.
        let big_key = Blobs::key(["t", "big"]);
        let big: Vec<u8> = (0..200 * 1024).map(|i| (i % 251) as u8).collect();
        let (committed, syncing, first) = commit_checked(&blobs, &big_key, &big).await;
        assert_eq!(committed, Committed::New { made_dir: false });
        syncing.wait().await.unwrap();
        drop(first);
        let (committed, _, again) = commit_checked(&blobs, &big_key, &big).await;
        assert_eq!(committed, Committed::Existing, "the same 200 KiB");
        drop(again);
        let big_path = blobs.store.path_to_filesystem(&big_key).unwrap();
        let mut flipped = big.clone();
        flipped[150 * 1024] ^= 1;
        std::fs::write(&big_path, &flipped).unwrap();
        let (committed, syncing, again) = commit_checked(&blobs, &big_key, &big).await;
        assert_eq!(
            committed,
            Committed::New { made_dir: false },
            "one byte off"
        );
        syncing.wait().await.unwrap();
        drop(again);
        assert_eq!(std::fs::read(&big_path).unwrap(), big);

        // Streamed to its file (`commit`): an empty file under the key.
        std::fs::write(&path, b"").unwrap();
        let mut staged = blobs.stage_buffered(4);
        staged.write(&bytes).await.unwrap();
        let syncing = staged.flush().await.unwrap();
        let committed = blobs.commit(staged, &key).await.unwrap();
        assert_eq!(committed, Committed::New { made_dir: false });
        blobs
            .sync_committed(&key, committed, syncing)
            .await
            .unwrap();
        assert_eq!(blobs.get(&key).await.unwrap(), Some(bytes.clone().into()));
        assert_eq!(staging(&blobs), (0, 0), "nothing left staged");
    }

    #[tokio::test]
    async fn staged_blobs_commit_under_a_key_or_vanish() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let mut staged = blobs.stage().await.unwrap();
        staged.write(b"hel").await.unwrap();
        staged.write(b"lo").await.unwrap();
        assert_eq!(staged.len(), 5);
        staged.finish().await.unwrap();
        let path = staged.path().to_owned();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"hello",
            "written to the staged file"
        );
        let key = Blobs::key(["t", "doc"]);
        assert_eq!(
            blobs.commit(staged, &key).await.unwrap(),
            Committed::New { made_dir: true }
        );
        blobs.sync_dir_of(&key, true).await.unwrap();
        assert!(!path.exists());
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );

        // Flushed, renamed while its sync runs, then durable: the same bytes under the key.
        let mut early = blobs.stage().await.unwrap();
        early.write(b"early").await.unwrap();
        let syncing = early.flush().await.unwrap();
        assert_eq!(std::fs::read(early.path()).unwrap(), b"early");
        let key = Blobs::key(["t", "early"]);
        assert_eq!(
            blobs.commit(early, &key).await.unwrap(),
            Committed::New { made_dir: false }
        );
        syncing.wait().await.unwrap();
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"early"[..])
        );

        // Held in memory: no file until it is flushed, the bytes readable meanwhile.
        let mut small = blobs.stage_buffered(8);
        small.write(b"small").await.unwrap();
        assert!(!small.path().exists(), "held in memory");
        assert_eq!(small.held().as_deref(), Some(&b"small"[..]));
        assert!(small.write(b"more").await.is_err(), "held means complete");
        let syncing = small.flush().await.unwrap();
        assert_eq!(std::fs::read(small.path()).unwrap(), b"small");
        syncing.wait().await.unwrap();
        let key = Blobs::key(["t", "small"]);
        blobs.commit(small, &key).await.unwrap();
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"small"[..])
        );
        // The same key again: the blob there is kept, the staged one removed.
        let mut again = blobs.stage_buffered(8);
        again.write(b"small").await.unwrap();
        again.flush().await.unwrap().wait().await.unwrap();
        let staged_path = again.path().to_owned();
        assert_eq!(
            blobs.commit(again, &key).await.unwrap(),
            Committed::Existing
        );
        assert!(!staged_path.exists(), "the staged copy is removed");
        blobs.sync_blob(&key).await.unwrap();
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"small"[..])
        );
        // Past the memory limit it goes on to its file as it arrives.
        let mut big = blobs.stage_buffered(4);
        big.write(b"hel").await.unwrap();
        assert!(!big.path().exists());
        big.write(b"lo, world").await.unwrap();
        assert!(big.path().exists(), "spilled to its file");
        assert_eq!(big.held(), None);
        assert_eq!(big.len(), 12);
        big.finish().await.unwrap();
        assert_eq!(std::fs::read(big.path()).unwrap(), b"hello, world");
        drop(big);

        let mut dropped = blobs.stage().await.unwrap();
        dropped.write(b"partial").await.unwrap();
        let path = dropped.path().to_owned();
        assert!(path.exists());
        drop(dropped);
        assert!(!path.exists(), "an uncommitted blob leaves nothing");
    }
}
