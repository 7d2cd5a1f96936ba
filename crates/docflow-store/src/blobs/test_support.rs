//! Helpers shared by the blob store's unit tests.

use object_store::path::Path as Key;

use super::staged::INCOMING;
use super::{Blobs, Checked, Committed, Staged, Syncing};

/// Files in the staging directory: (how many, bytes in all).
pub(super) fn staging(blobs: &Blobs) -> (usize, u64) {
    std::fs::read_dir(blobs.root().join(INCOMING)).map_or((0, 0), |dir| {
        dir.map(|e| e.unwrap().metadata().unwrap().len())
            .fold((0, 0), |(n, b), len| (n + 1, b + len))
    })
}

/// What a check that passed returned, and what the commit did.
pub(super) fn kept<T: std::fmt::Debug, E: std::fmt::Debug>(
    checked: Checked<T, E>,
) -> (T, Committed, Syncing) {
    match checked {
        Checked::Kept {
            passed,
            committed,
            syncing,
        } => (passed, committed, syncing),
        refused => panic!("refused: {refused:?}"),
    }
}

/// `bytes` staged and put under `key` with a check that passes.
pub(super) async fn commit_checked(
    blobs: &Blobs,
    key: &Key,
    bytes: &[u8],
) -> (Committed, Syncing, Staged) {
    let mut staged = blobs.stage_buffered(1 << 20);
    staged.write(bytes).await.unwrap();
    let checked = blobs
        .check_and_commit(&mut staged, key, || Ok::<_, ()>(()))
        .await
        .unwrap();
    let (_, committed, syncing) = kept(checked);
    (committed, syncing, staged)
}

/// A blob its check refuses: refused, and nothing under `key`.
pub(super) async fn refused_leaves_nothing(blobs: &Blobs, key: &Key) {
    let mut staged = blobs.stage_buffered(1 << 20);
    staged.write(b"not a document").await.unwrap();
    let checked = blobs
        .check_and_commit(&mut staged, key, || Err::<(), _>("refused"))
        .await
        .unwrap();
    assert!(matches!(checked, Checked::Refused("refused")));
    drop(staged);
    assert!(blobs.get(key).await.unwrap().is_none());
}
