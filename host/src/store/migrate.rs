//! Brings a store written by an older schema up to this one, inside the transaction that opens
//! it, so a store is either wholly migrated or not at all.

use std::ops::Bound;

use redb::{ReadableTable, ReadableTableMetadata, WriteTransaction};
use serde::Deserialize;
use tracing::{info, warn};

use super::StoreError;
use super::artifacts::{ARTIFACTS, ArtifactRecord};
use super::model::BoundingBox;

/// Records re-encoded per step, so memory stays bounded whatever the store's size.
const BATCH: usize = 512;

/// An artifact as schema 1 wrote it: its f16 bits one varint each.
#[derive(Deserialize)]
struct ArtifactRecordV1 {
    key: String,
    kind: String,
    page: Option<u32>,
    bbox: Option<BoundingBox>,
    blocks: Vec<u32>,
    text: String,
    fields: Vec<(String, String)>,
    links: Vec<String>,
    embedding: Vec<u16>,
    tokens: Vec<u16>,
}

impl From<ArtifactRecordV1> for ArtifactRecord {
    fn from(a: ArtifactRecordV1) -> Self {
        ArtifactRecord {
            key: a.key,
            kind: a.kind,
            page: a.page,
            bbox: a.bbox,
            blocks: a.blocks,
            text: a.text,
            fields: a.fields,
            links: a.links,
            embedding: a.embedding,
            tokens: a.tokens,
        }
    }
}

type ArtifactKey = (String, String, u32);

/// Schema 1 to 2: every enrich artifact's vectors written as raw bytes. Returns how many
/// artifacts were rewritten.
pub(super) fn artifacts_v1_to_v2(txn: &WriteTransaction) -> Result<u64, StoreError> {
    let mut table = txn.open_table(ARTIFACTS)?;
    let total = table.len()?;
    if total > 0 {
        // Said at warning level so an operator sees why this first open takes a while.
        warn!(
            artifacts = total,
            "migrating the store's enrich artifacts to schema 2 (once: a minute or two for a store of some 100,000 artifacts, then the file is compacted)"
        );
    }
    let mut after: Option<ArtifactKey> = None;
    let mut done = 0u64;
    loop {
        let batch: Vec<(ArtifactKey, Vec<u8>)> = {
            let range = match &after {
                None => table.range::<(&str, &str, u32)>(..)?,
                Some((doc, set, place)) => table.range::<(&str, &str, u32)>((Bound::Excluded((doc.as_str(), set.as_str(), *place)), Bound::Unbounded))?,
            };
            let mut batch = Vec::with_capacity(BATCH);
            for row in range.take(BATCH) {
                let (key, value) = row?;
                let (doc, set, place) = key.value();
                let record: ArtifactRecord = postcard::from_bytes::<ArtifactRecordV1>(value.value())?.into();
                batch.push(((doc.to_string(), set.to_string(), place), postcard::to_stdvec(&record)?));
            }
            batch
        };
        let Some((last, _)) = batch.last() else { break };
        after = Some(last.clone());
        for ((doc, set, place), bytes) in &batch {
            table.insert((doc.as_str(), set.as_str(), *place), bytes.as_slice())?;
        }
        done += batch.len() as u64;
    }
    if total > 0 {
        info!(artifacts = done, "enrich artifacts migrated to schema 2");
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;
    use crate::store::{META, SCHEMA_VERSION, STORE_FILE, Store};

    /// Schema 1's encoding, to write a store as an older evident did.
    #[derive(Serialize)]
    struct WrittenV1<'a> {
        key: &'a str,
        kind: &'a str,
        page: Option<u32>,
        bbox: Option<BoundingBox>,
        blocks: Vec<u32>,
        text: &'a str,
        fields: Vec<(String, String)>,
        links: Vec<String>,
        embedding: Vec<u16>,
        tokens: Vec<u16>,
    }

    fn bits(seed: u32, n: usize) -> Vec<u16> {
        // f16 bits across the whole range, odd counts included.
        (0..n as u32).map(|i| (seed.wrapping_mul(2_654_435_761).wrapping_add(i.wrapping_mul(40_503)) >> 7) as u16).collect()
    }

    #[test]
    fn a_schema_1_store_opens_with_its_artifacts_rewritten_and_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let count = BATCH as u32 * 2 + 37; // more than one step, the last one partial
        {
            let db = redb::Database::create(dir.path().join(STORE_FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            {
                txn.open_table(META).unwrap().insert("schema_version", 1).unwrap();
                let mut table = txn.open_table(ARTIFACTS).unwrap();
                for i in 0..count {
                    let doc = if i.is_multiple_of(3) { "doc-a" } else { "doc-b" };
                    let old = WrittenV1 {
                        key: &format!("u{i}"),
                        kind: "unit",
                        page: Some(i % 7 + 1),
                        bbox: i.is_multiple_of(2).then_some(BoundingBox { x0: 1.0, y0: 2.0, x1: 3.5, y1: i as f32 }),
                        blocks: vec![i, i + 1],
                        text: &format!("text {i}"),
                        fields: vec![("type".into(), "table".into())],
                        links: vec![format!("u{}", i + 1)],
                        embedding: bits(i, 11),
                        tokens: bits(i + 1000, (i as usize % 5) * 3 + 1),
                    };
                    table.insert((doc, "set1", i), postcard::to_stdvec(&old).unwrap().as_slice()).unwrap();
                }
            }
            txn.commit().unwrap();
        }

        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        let mut seen = 0;
        for doc in ["doc-a", "doc-b"] {
            for a in store.artifacts(doc, "set1").unwrap() {
                let i: u32 = a.key[1..].parse().unwrap();
                assert_eq!(a.embedding, bits(i, 11), "embedding of {}", a.key);
                assert_eq!(a.tokens, bits(i + 1000, (i as usize % 5) * 3 + 1), "tokens of {}", a.key);
                assert_eq!(
                    (a.page, a.blocks.clone(), a.text.as_str(), a.links.clone()),
                    (Some(i % 7 + 1), vec![i, i + 1], format!("text {i}").as_str(), vec![format!("u{}", i + 1)])
                );
                assert_eq!(a.bbox.map(|b| b.y1), i.is_multiple_of(2).then_some(i as f32));
                seen += 1;
            }
        }
        assert_eq!(seen, count);
        drop(store);
        // Opening again finds schema 2 and leaves the records as they are.
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.artifacts("doc-a", "set1").unwrap().len(), count.div_ceil(3) as usize);
    }

    #[test]
    fn f16_bits_round_trip_and_refuse_an_odd_byte() {
        let record = ArtifactRecord {
            key: "k".into(),
            kind: "unit".into(),
            page: None,
            bbox: None,
            blocks: vec![],
            text: String::new(),
            fields: vec![],
            links: vec![],
            embedding: bits(7, 385),
            tokens: vec![0, 1, 0x7bff, 0xfbff, 0xffff],
        };
        let bytes = postcard::to_stdvec(&record).unwrap();
        assert_eq!(postcard::from_bytes::<ArtifactRecord>(&bytes).unwrap(), record);
        // The tokens field is the last: its length prefix (one byte, 10) and its 10 bytes.
        let mut odd = bytes.clone();
        let n = odd.len();
        odd[n - 11] = 9;
        odd.truncate(n - 1);
        assert!(postcard::from_bytes::<ArtifactRecord>(&odd).is_err());
    }
}
