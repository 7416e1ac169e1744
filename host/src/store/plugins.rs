//! The plugin registry's tables: installed stage components (name, version, stage kind,
//! sha256, the bytes) and the stage bindings that `plugins swap` sets over the profiles.

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::{Store, StoreError};

/// Installed plugins by name (an encoded [`PluginRecord`]).
pub(super) const PLUGINS: TableDefinition<&str, &[u8]> = TableDefinition::new("plugins");
/// Component bytes by sha256.
pub(super) const PLUGIN_WASM: TableDefinition<&str, &[u8]> = TableDefinition::new("plugin_wasm");
/// (profile, stage) → plugin name, set by a swap; it overrides the profile file.
pub(super) const STAGE_BINDINGS: TableDefinition<(&str, &str), &str> = TableDefinition::new("stage_bindings");

/// An installed stage component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginRecord {
    pub name: String,
    pub version: String,
    /// The stage kind it implements ("decompose", "verify", "rerank", "memory", "enrich").
    pub kind: String,
    /// sha256 of the component, hex.
    pub sha256: String,
    pub size: u64,
    /// Seconds since the Unix epoch.
    pub installed_at: u64,
    /// The contract version it was built against ("0.1.0", "0.2.0").
    pub api: String,
}

/// A plugin record as stores written before contract 0.2.0 kept it: every such plugin was
/// built against 0.1.0.
#[derive(Deserialize)]
struct PluginRecordBefore02 {
    name: String,
    version: String,
    kind: String,
    sha256: String,
    size: u64,
    installed_at: u64,
}

/// Reads a plugin record of either layout.
fn decode(bytes: &[u8]) -> Result<PluginRecord, StoreError> {
    if let Ok(record) = postcard::from_bytes::<PluginRecord>(bytes) {
        return Ok(record);
    }
    let old: PluginRecordBefore02 = postcard::from_bytes(bytes)?;
    Ok(PluginRecord {
        name: old.name,
        version: old.version,
        kind: old.kind,
        sha256: old.sha256,
        size: old.size,
        installed_at: old.installed_at,
        api: "0.1.0".into(),
    })
}

impl Store {
    /// Installs (or replaces) a plugin and its bytes in one transaction.
    pub fn put_plugin(&self, record: &PluginRecord, wasm: &[u8]) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        {
            txn.open_table(PLUGIN_WASM)?.insert(record.sha256.as_str(), wasm)?;
            txn.open_table(PLUGINS)?.insert(record.name.as_str(), postcard::to_allocvec(record)?.as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Every installed plugin, by name.
    pub fn plugins(&self) -> Result<Vec<PluginRecord>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(PLUGINS)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            out.push(decode(row?.1.value())?);
        }
        Ok(out)
    }

    /// One installed plugin and its bytes.
    pub fn plugin(&self, name: &str) -> Result<Option<(PluginRecord, Vec<u8>)>, StoreError> {
        let txn = self.db.begin_read()?;
        let Some(raw) = txn.open_table(PLUGINS)?.get(name)? else { return Ok(None) };
        let record = decode(raw.value())?;
        let wasm = txn.open_table(PLUGIN_WASM)?.get(record.sha256.as_str())?.map(|v| v.value().to_vec());
        Ok(wasm.map(|w| (record, w)))
    }

    /// Binds `stage` of `profile` to `plugin` (what a swap records).
    pub fn set_stage_binding(&self, profile: &str, stage: &str, plugin: &str) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        txn.open_table(STAGE_BINDINGS)?.insert((profile, stage), plugin)?;
        txn.commit()?;
        Ok(())
    }

    /// The stage bindings recorded for `profile`: (stage, plugin).
    pub fn stage_bindings(&self, profile: &str) -> Result<Vec<(String, String)>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(STAGE_BINDINGS)?;
        let mut out = Vec::new();
        for row in table.range((profile, "")..)? {
            let (key, value) = row?;
            let (p, stage) = key.value();
            if p != profile {
                break;
            }
            out.push((stage.to_string(), value.value().to_string()));
        }
        Ok(out)
    }
}
