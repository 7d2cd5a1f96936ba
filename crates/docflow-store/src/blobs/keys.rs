//! The key boundary: keys built from escaped segments, the tenant that owns a key, and the
//! `file://` URIs events carry, turned back into keys only when they name a blob of the store.

use std::path::Component;

use object_store::path::Path as Key;

use super::{BlobError, Blobs};

impl Blobs {
    /// The key made of `segments`, each escaped (a `/` inside a segment does not nest).
    pub fn key<'a>(segments: impl IntoIterator<Item = &'a str>) -> Key {
        Key::from_iter(segments)
    }

    /// Whether `key` lies under the top-level segment `owner`: ingest keeps a tenant's
    /// documents under `<tenant>/...`, so a stage checks an event's tenant against its key.
    pub fn is_under(key: &Key, owner: &str) -> bool {
        key.parts()
            .next()
            .is_some_and(|first| first == object_store::path::PathPart::from(owner))
    }

    /// The `file://` URI of `key`, as carried in events.
    pub fn uri(&self, key: &Key) -> String {
        let path = self.root.join(key.as_ref());
        match url::Url::from_file_path(&path) {
            Ok(u) => u.to_string(),
            Err(()) => format!("file://{}", path.display()),
        }
    }

    /// The key of a `file://` URI inside this store.
    pub fn key_of(&self, uri: &str) -> Result<Key, BlobError> {
        let foreign = |reason| BlobError::Foreign {
            uri: uri.to_owned(),
            reason,
        };
        let url = url::Url::parse(uri).map_err(|_| foreign("not a URI"))?;
        if url.scheme() != "file" {
            return Err(foreign("only file:// URIs are supported"));
        }
        let path = url
            .to_file_path()
            .map_err(|()| foreign("not a file path"))?;
        let rel = path
            .strip_prefix(&self.root)
            .map_err(|_| foreign("outside the object store directory"))?;
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(s) => parts.push(s.to_str().ok_or(foreign("not UTF-8"))?),
                _ => return Err(foreign("not a plain relative path")),
            }
        }
        if parts.is_empty() {
            return Err(foreign("names the store itself"));
        }
        Key::parse(parts.join("/")).map_err(|_| foreign("not a valid object key"))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn keys_belong_to_their_first_segment() {
        let key = Blobs::key(["demo", "abc"]);
        assert!(Blobs::is_under(&key, "demo"));
        assert!(!Blobs::is_under(&key, "mallory"));
        assert!(!Blobs::is_under(&key, "dem"));
        // Segments are escaped: a tenant named "a/b" owns "a%2Fb/...", not "a/...".
        let odd = Blobs::key(["a/b", "x"]);
        assert!(Blobs::is_under(&odd, "a/b"));
        assert!(!Blobs::is_under(&odd, "a"));
    }

    #[tokio::test]
    async fn keys_uris_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(&dir.path().join("objects")).unwrap();
        let key = Blobs::key(["acme corp", "ab/cd"]);
        assert_eq!(key.parts().count(), 2, "a slash in a segment does not nest");
        blobs.put(&key, Bytes::from_static(b"hello")).await.unwrap();
        let uri = blobs.uri(&key);
        assert!(uri.starts_with("file:///"), "{uri}");
        let back = blobs.key_of(&uri).unwrap();
        assert_eq!(back, key);
        assert_eq!(
            blobs.get(&back).await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );
        assert!(
            blobs
                .get(&Blobs::key(["acme corp", "missing"]))
                .await
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn foreign_uris_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let root = blobs.root().display().to_string();
        for uri in [
            "s3://bucket/key".to_owned(),
            "file:///etc/passwd".to_owned(),
            format!("file://{root}/../escape"),
            format!("file://{root}"),
            "not a uri".to_owned(),
        ] {
            assert!(
                matches!(blobs.key_of(&uri), Err(BlobError::Foreign { .. })),
                "{uri} accepted"
            );
        }
    }
}
