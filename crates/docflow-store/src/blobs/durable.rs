//! Durability: a blob's bytes and its directory entries synced to disk (`fdatasync`,
//! `fsync` on the directories), so a committed blob survives a crash of the machine.

use std::path::{Path, PathBuf};

use object_store::path::Path as Key;

use super::{BlobError, Blobs, Committed};

/// A staged blob's bytes on their way to disk ([`Staged::flush`]; with its directory entry,
/// from [`Blobs::check_and_commit`]).
///
/// [`Staged::flush`]: super::Staged::flush
#[derive(Debug, Default)]
#[must_use = "the bytes are durable only once `wait` returns"]
pub struct Syncing {
    task: Option<tokio::task::JoinHandle<Result<(), BlobError>>>,
    /// Whether the task syncs the blob's directory too (after its link under the key).
    dir: bool,
}

impl Syncing {
    pub(super) fn file(task: tokio::task::JoinHandle<Result<(), BlobError>>) -> Self {
        Syncing {
            task: Some(task),
            dir: false,
        }
    }

    /// A sync of the bytes and then the directory entry.
    pub(super) fn dir(task: tokio::task::JoinHandle<Result<(), BlobError>>) -> Self {
        Syncing {
            task: Some(task),
            dir: true,
        }
    }

    /// Returns once the bytes are on disk.
    pub async fn wait(self) -> Result<(), BlobError> {
        let Some(task) = self.task else {
            return Ok(());
        };
        task.await.map_err(|e| BlobError::Staging {
            path: PathBuf::new(),
            source: std::io::Error::other(e),
        })?
    }
}

/// Syncs the directory that holds `target` (`fsync`); with `made_dir`, every directory from
/// it up to `root` (see [`Blobs::sync_committed`]).
pub(super) fn sync_dirs(target: &Path, root: &Path, made_dir: bool) -> Result<(), BlobError> {
    let mut dir = target.parent();
    while let Some(d) = dir {
        std::fs::File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(|source| BlobError::Dir {
                dir: d.to_owned(),
                source,
            })?;
        if !made_dir || d == root || !d.starts_with(root) {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

impl Blobs {
    /// Makes a blob [`Blobs::commit`]ted under `key` durable, so that it survives a crash of
    /// the machine, not only of the process: a new blob's bytes (`syncing`, from
    /// [`Staged::flush`]) and its directory entry, with the directories above when the
    /// commit made its directory (a blob from [`Blobs::check_and_commit`] has its sync of
    /// both running already); a blob that was already there is synced again (an earlier
    /// writer may not have lived to sync it) with its directories up to the store's root.
    ///
    /// [`Staged::flush`]: super::Staged::flush
    pub async fn sync_committed(
        &self,
        key: &Key,
        committed: Committed,
        syncing: Syncing,
    ) -> Result<(), BlobError> {
        let (file, dir) = match committed {
            // Synced with its directory already (`check_and_commit`).
            Committed::New { .. } if syncing.dir => return syncing.wait().await,
            Committed::New { made_dir } => {
                tokio::join!(syncing.wait(), self.sync_dir_of(key, made_dir))
            }
            // Its directories up to the root too: the writer that made them may not have
            // lived to sync them.
            Committed::Existing => tokio::join!(self.sync_blob(key), self.sync_dir_of(key, true)),
        };
        file.and(dir)
    }

    /// Syncs the blob under `key` to disk (`fdatasync`).
    pub(super) async fn sync_blob(&self, key: &Key) -> Result<(), BlobError> {
        let path = self.store.path_to_filesystem(key)?;
        tokio::task::spawn_blocking(move || {
            std::fs::File::open(&path)
                .and_then(|f| f.sync_data())
                .map_err(|source| BlobError::Staging { path, source })
        })
        .await
        .map_err(|e| BlobError::Staging {
            path: PathBuf::new(),
            source: std::io::Error::other(e),
        })?
    }

    /// Syncs the directory that holds `key` (`fsync` on the directory): a new name is
    /// durable once its directory is. With `made_dir`, every directory from it up to the
    /// store's root is synced, so the new directory's own entry is durable too.
    pub(super) async fn sync_dir_of(&self, key: &Key, made_dir: bool) -> Result<(), BlobError> {
        let target = self.store.path_to_filesystem(key)?;
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || sync_dirs(&target, &root, made_dir))
            .await
            .map_err(|e| BlobError::Dir {
                dir: PathBuf::new(),
                source: std::io::Error::other(e),
            })?
    }
}
