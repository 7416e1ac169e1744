//! What enrich stages make at ingest: per document, one set of artifacts per (plugin, its
//! sha256, its parameters), with the set's progress. A set is written a page at a time, each
//! page in one transaction with the set's progress, so an interrupted enrich resumes where it
//! stopped; only a set marked complete is ever served to a stage.

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::model::BoundingBox;
use super::{DOCUMENTS, Store, StoreError};

/// Enrich sets by (document, set id): an encoded [`EnrichSet`].
pub(super) const ENRICH_SETS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("enrich_sets");
/// Artifacts by (document, set id, place in the order made): an encoded [`ArtifactRecord`].
pub(super) const ARTIFACTS: TableDefinition<(&str, &str, u32), &[u8]> = TableDefinition::new("artifacts");

/// One enrich stage's work on one document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnrichSet {
    /// Derived from the plugin's sha256 and parameters: a change of either is another set.
    pub set: String,
    pub plugin: String,
    pub plugin_sha256: String,
    /// The parameters as the stage received them, sorted by key.
    pub params: Vec<(String, String)>,
    /// Pages whose artifacts are stored, counting from page 1.
    pub pages_done: u32,
    /// The document step ran too: the set may be served.
    pub complete: bool,
    /// The sentence that stopped the last run, if it failed.
    pub failure: Option<String>,
    /// Artifacts stored so far.
    pub artifacts: u32,
    /// Model calls and tokens the stage spent, and seconds it ran, over every run.
    pub llm_calls: u64,
    pub tokens: u64,
    pub seconds: f64,
}

/// A stored artifact, with its text's vectors for search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    pub key: String,
    pub kind: String,
    pub page: Option<u32>,
    pub bbox: Option<BoundingBox>,
    pub blocks: Vec<u32>,
    pub text: String,
    pub fields: Vec<(String, String)>,
    pub links: Vec<String>,
    /// The text's sentence embedding (unit length), f16 bits.
    #[serde(with = "f16_bits")]
    pub embedding: Vec<u16>,
    /// The text's token vectors for MaxSim, token after token, f16 bits.
    #[serde(with = "f16_bits")]
    pub tokens: Vec<u16>,
}

/// f16 bits written as one run of little-endian bytes. Postcard writes a `Vec<u16>` as one
/// varint per value (3 bytes for most f16 bits), and decoding those one by one was most of a
/// HiKEY question over a corpus whose artifacts outgrow the cache (schema 1; `migrate`).
pub(super) mod f16_bits {
    use serde::de::{Error, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bits: &[u16], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        s.serialize_bytes(&bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u16>, D::Error> {
        d.deserialize_bytes(Bits)
    }

    struct Bits;

    impl Visitor<'_> for Bits {
        type Value = Vec<u16>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an even number of bytes holding f16 values")
        }

        fn visit_bytes<E: Error>(self, bytes: &[u8]) -> Result<Vec<u16>, E> {
            if !bytes.len().is_multiple_of(2) {
                return Err(E::invalid_length(bytes.len(), &self));
            }
            Ok(bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect())
        }
    }
}

/// The id of the set an enrich stage makes with these bytes and parameters: a change of
/// either names another set, so the old one reads as stale.
pub fn enrich_set_id(plugin_sha256: &str, params: &[(String, String)]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(plugin_sha256.as_bytes());
    for (k, v) in params {
        h.update(b"\n");
        h.update(k.as_bytes());
        h.update(b"=");
        h.update(v.as_bytes());
    }
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

impl Store {
    /// Every enrich set of a document.
    pub fn enrich_sets(&self, doc_id: &str) -> Result<Vec<EnrichSet>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(ENRICH_SETS)?;
        let mut out = Vec::new();
        for row in table.range((doc_id, "")..)? {
            let (key, value) = row?;
            if key.value().0 != doc_id {
                break;
            }
            out.push(postcard::from_bytes(value.value())?);
        }
        Ok(out)
    }

    /// One enrich set of a document.
    pub fn enrich_set(&self, doc_id: &str, set: &str) -> Result<Option<EnrichSet>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(ENRICH_SETS)?;
        Ok(match table.get((doc_id, set))? {
            Some(v) => Some(postcard::from_bytes(v.value())?),
            None => None,
        })
    }

    /// Writes a set's progress and the artifacts of its latest step together;
    /// `NoSuchDocument` when the document was removed meanwhile. `first` is the place of the
    /// first of `artifacts` in the set's order.
    pub fn put_enrich_step(&self, doc_id: &str, set: &EnrichSet, first: u32, artifacts: &[ArtifactRecord]) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        {
            if txn.open_table(DOCUMENTS)?.get(doc_id)?.is_none() {
                return Err(StoreError::NoSuchDocument(doc_id.to_string()));
            }
            let mut table = txn.open_table(ARTIFACTS)?;
            for (i, a) in artifacts.iter().enumerate() {
                table.insert((doc_id, set.set.as_str(), first + i as u32), postcard::to_stdvec(a)?.as_slice())?;
            }
            txn.open_table(ENRICH_SETS)?.insert((doc_id, set.set.as_str()), postcard::to_stdvec(set)?.as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Starts a set afresh (its earlier artifacts removed), in one transaction.
    pub fn restart_enrich_set(&self, doc_id: &str, set: &EnrichSet) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        {
            if txn.open_table(DOCUMENTS)?.get(doc_id)?.is_none() {
                return Err(StoreError::NoSuchDocument(doc_id.to_string()));
            }
            sweep_set(&txn, doc_id, &set.set)?;
            txn.open_table(ENRICH_SETS)?.insert((doc_id, set.set.as_str()), postcard::to_stdvec(set)?.as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Removes a set and its artifacts.
    pub fn remove_enrich_set(&self, doc_id: &str, set: &str) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        sweep_set(&txn, doc_id, set)?;
        txn.open_table(ENRICH_SETS)?.remove((doc_id, set))?;
        txn.commit()?;
        Ok(())
    }

    /// A set's artifacts in the order they were made.
    pub fn artifacts(&self, doc_id: &str, set: &str) -> Result<Vec<ArtifactRecord>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(ARTIFACTS)?;
        let mut out = Vec::new();
        for row in table.range((doc_id, set, 0)..=(doc_id, set, u32::MAX))? {
            out.push(postcard::from_bytes(row?.1.value())?);
        }
        Ok(out)
    }
}

/// Removes every artifact of one set.
fn sweep_set(txn: &redb::WriteTransaction, doc_id: &str, set: &str) -> Result<(), StoreError> {
    txn.open_table(ARTIFACTS)?.extract_from_if((doc_id, set, 0)..=(doc_id, set, u32::MAX), |_, _| true)?.for_each(drop);
    Ok(())
}

/// Removes every set and artifact of a document (its removal, or its text changed by OCR).
pub(super) fn sweep_document(txn: &redb::WriteTransaction, doc_id: &str) -> Result<(), StoreError> {
    let sets: Vec<String> = {
        let table = txn.open_table(ENRICH_SETS)?;
        let mut sets = Vec::new();
        for row in table.range((doc_id, "")..)? {
            let (key, _) = row?;
            let (d, s) = key.value();
            if d != doc_id {
                break;
            }
            sets.push(s.to_string());
        }
        sets
    };
    for set in &sets {
        sweep_set(txn, doc_id, set)?;
        txn.open_table(ENRICH_SETS)?.remove((doc_id, set.as_str()))?;
    }
    Ok(())
}
