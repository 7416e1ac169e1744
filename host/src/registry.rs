//! The plugin registry: installed components (in the store), compiled once per process, and
//! the live stage bindings of each profile. A swap compiles and checks the new component first,
//! then replaces the profile's binding in one pointer swap: a request holds the profile it
//! resolved at its start, so it finishes on the components it began with.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::error::{self, Classified, ErrorKind};
use crate::pipeline::{Profile, ProfileError, ResolvedProfile};
use crate::plugins::{PluginError, StageComponent, StageKind, StageRuntime};
use crate::store::{PluginRecord, Store, StoreError};

/// Why a plugin could not be installed, found or put behind a stage.
#[derive(Debug, Error)]
pub enum RegistryError {
    #[error("{0:?} is not a plugin name (letters, digits, - and _)")]
    BadName(String),
    #[error("no plugin named {name} is installed or bundled in {dir}; `evident plugins list` shows them")]
    NotInstalled { name: String, dir: String },
    #[error(
        "{0} cannot be installed: it implements none of the stage worlds (decompose-stage, verify-stage, rerank-stage, memory-stage, enrich-stage) of evident:pipeline 0.1.0 or 0.2.0"
    )]
    NoStageWorld(String),
    #[error("{name} cannot be installed: {source}")]
    Rejected { name: String, source: PluginError },
    #[error("plugin {name} is a {is} stage, not a {wanted} stage")]
    WrongKind { name: String, is: String, wanted: StageKind },
    #[error("profile {profile} has no {stage} stage to swap")]
    NoSuchStage { profile: String, stage: StageKind },
    /// A stored plugin that no longer compiles, or a binding to a stage this build lacks.
    #[error("plugin {name} cannot be used: {reason}")]
    Unusable { name: String, reason: String },
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Classified for RegistryError {
    fn kind(&self) -> ErrorKind {
        match self {
            RegistryError::BadName(_) | RegistryError::WrongKind { .. } | RegistryError::NoSuchStage { .. } => ErrorKind::BadRequest,
            RegistryError::NotInstalled { .. } => ErrorKind::NotFound,
            RegistryError::NoStageWorld(_) | RegistryError::Rejected { .. } => ErrorKind::Invalid,
            RegistryError::Unusable { .. } => ErrorKind::Internal,
            RegistryError::Profile(e) => e.kind(),
            RegistryError::Store(e) => e.kind(),
        }
    }
}

/// Installed plugins and live profiles.
pub struct PluginRegistry {
    runtime: Arc<StageRuntime>,
    store: Arc<Store>,
    /// Components shipped with the appliance (`<name>.wasm`), installed on first use.
    bundled_dir: PathBuf,
    profiles_dir: PathBuf,
    /// Compiled components by sha256 and the stage kind they were checked against: a component
    /// checked as one kind must not pass as another from the cache.
    compiled: Mutex<HashMap<(String, StageKind), Arc<StageComponent>>>,
    live: RwLock<HashMap<String, Arc<ResolvedProfile>>>,
}

fn kind_name(kind: StageKind) -> String {
    kind.to_string()
}

impl PluginRegistry {
    /// A registry over `store`, running components with `runtime`.
    pub fn new(runtime: Arc<StageRuntime>, store: Arc<Store>, bundled_dir: PathBuf, profiles_dir: PathBuf) -> PluginRegistry {
        PluginRegistry { runtime, store, bundled_dir, profiles_dir, compiled: Mutex::new(HashMap::new()), live: RwLock::new(HashMap::new()) }
    }

    /// Names of the profiles in the profiles folder.
    pub fn profile_names(&self) -> Vec<String> {
        Profile::names(&self.profiles_dir)
    }

    /// A profile as its file says, its components not compiled.
    pub fn profile_file(&self, name: &str) -> Result<Profile, RegistryError> {
        Ok(Profile::load(&self.profiles_dir, name)?)
    }

    /// The runtime components run in.
    pub fn runtime(&self) -> &StageRuntime {
        &self.runtime
    }

    fn compile(&self, sha256: &str, wasm: &[u8], kind: StageKind) -> Result<Arc<StageComponent>, PluginError> {
        let key = (sha256.to_string(), kind);
        if let Some(c) = error::lock(&self.compiled).get(&key) {
            return Ok(c.clone());
        }
        let component = Arc::new(self.runtime.compile(wasm, kind)?);
        error::lock(&self.compiled).insert(key, component.clone());
        Ok(component)
    }

    /// Installs a component under `name`, as the stage kind it implements (or `kind` when given).
    /// A component that implements no stage world (or not `kind`'s) is refused.
    pub fn install(&self, wasm: &[u8], name: &str, version: &str, kind: Option<StageKind>) -> Result<PluginRecord, RegistryError> {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(RegistryError::BadName(name.to_string()));
        }
        let sha256: String = Sha256::digest(wasm).iter().map(|b| format!("{b:02x}")).collect();
        let kinds: Vec<StageKind> = match kind {
            Some(k) => vec![k],
            None => StageKind::ALL.to_vec(),
        };
        let mut last = None;
        let mut found = None;
        for k in kinds {
            match self.compile(&sha256, wasm, k) {
                Ok(c) => {
                    found = Some((k, c.api));
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some((kind, api)) = found else {
            let err = last.unwrap_or(PluginError::Invalid("no stage kind to check".into()));
            return Err(match (kind, err) {
                (None, PluginError::WrongWorld { .. }) => RegistryError::NoStageWorld(name.to_string()),
                (_, source) => RegistryError::Rejected { name: name.to_string(), source },
            });
        };
        let installed_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let record = PluginRecord {
            name: name.into(),
            version: version.into(),
            kind: kind_name(kind),
            sha256,
            size: wasm.len() as u64,
            installed_at,
            api: api.as_str().into(),
        };
        self.store.put_plugin(&record, wasm)?;
        Ok(record)
    }

    /// Installed plugins, with the bundled ones not installed yet listed as such (version "bundled").
    pub fn list(&self) -> Result<Vec<PluginRecord>, RegistryError> {
        let mut out = self.store.plugins()?;
        let bundled = std::fs::read_dir(&self.bundled_dir).map(|it| it.filter_map(|e| e.ok()).collect::<Vec<_>>()).unwrap_or_default();
        for entry in bundled {
            let path = entry.path();
            let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_string) else { continue };
            if path.extension().is_some_and(|e| e == "wasm")
                && !out.iter().any(|p| p.name == name)
                && let Ok(record) = self.install_bundled(&name)
            {
                out.push(record);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Whether the bundled component `name` exists and is not the one with `sha256`.
    fn bundled_differs(&self, name: &str, sha256: &str) -> bool {
        match std::fs::read(self.bundled_dir.join(format!("{name}.wasm"))) {
            Ok(wasm) => Sha256::digest(&wasm).iter().map(|b| format!("{b:02x}")).collect::<String>() != sha256,
            Err(_) => false,
        }
    }

    fn install_bundled(&self, name: &str) -> Result<PluginRecord, RegistryError> {
        let path = self.bundled_dir.join(format!("{name}.wasm"));
        let wasm = std::fs::read(&path).map_err(|_| RegistryError::NotInstalled { name: name.to_string(), dir: self.bundled_dir.display().to_string() })?;
        self.install(&wasm, name, "bundled", None)
    }

    /// The stored plugin `name`, just installed.
    fn stored(&self, name: &str) -> Result<(PluginRecord, Vec<u8>), RegistryError> {
        self.store
            .plugin(name)?
            .ok_or_else(|| RegistryError::Unusable { name: name.to_string(), reason: "it vanished from the store as it was installed".into() })
    }

    /// The compiled component of plugin `name`, which must implement `kind`.
    fn component(&self, name: &str, kind: StageKind) -> Result<Arc<StageComponent>, RegistryError> {
        let installed = self.store.plugin(name)?;
        let (record, wasm) = match installed {
            // A plugin installed from the bundle follows the bundle: a newer build of Evident
            // brings newer bundled components, which an existing store must not hide. One an
            // operator installed stays as it is.
            Some((record, _)) if record.version == "bundled" && self.bundled_differs(name, &record.sha256) => {
                self.install_bundled(name)?;
                self.stored(name)?
            }
            Some(found) => found,
            None => {
                self.install_bundled(name)?;
                self.stored(name)?
            }
        };
        if record.kind != kind_name(kind) {
            return Err(RegistryError::WrongKind { name: name.to_string(), is: record.kind, wanted: kind });
        }
        self.compile(&record.sha256, &wasm, kind).map_err(|e| RegistryError::Unusable { name: name.to_string(), reason: e.to_string() })
    }

    fn build(&self, name: &str) -> Result<ResolvedProfile, RegistryError> {
        let mut profile = Profile::load(&self.profiles_dir, name)?;
        for (stage, plugin) in self.store.stage_bindings(name)? {
            let kind: StageKind = serde_json::from_value(serde_json::Value::String(stage.clone()))
                .map_err(|_| RegistryError::Unusable { name: plugin.clone(), reason: format!("the store binds it to an unknown stage {stage}") })?;
            if let Some(binding) = profile.stages.get_mut(&kind) {
                binding.plugin = plugin;
            }
        }
        let mut components = HashMap::new();
        for (kind, binding) in &profile.stages {
            components.insert(*kind, (binding.plugin.clone(), self.component(&binding.plugin, *kind)?));
        }
        Ok(ResolvedProfile { profile, components })
    }

    /// The profile as it stands now; a request keeps this snapshot to its end.
    pub fn resolve(&self, name: &str) -> Result<Arc<ResolvedProfile>, RegistryError> {
        if let Some(p) = error::read(&self.live).get(name) {
            return Ok(p.clone());
        }
        let built = Arc::new(self.build(name)?);
        Ok(error::write(&self.live).entry(name.to_string()).or_insert(built).clone())
    }

    /// Puts `plugin` behind `stage` of `profile`, for every request that starts from now on.
    pub fn swap(&self, profile: &str, stage: StageKind, plugin: &str) -> Result<(), RegistryError> {
        let current = self.resolve(profile)?;
        if !current.profile.stages.contains_key(&stage) {
            return Err(RegistryError::NoSuchStage { profile: profile.to_string(), stage });
        }
        let component = self.component(plugin, stage)?;
        let mut next = (*current).clone();
        if let Some(binding) = next.profile.stages.get_mut(&stage) {
            binding.plugin = plugin.to_string();
        }
        next.components.insert(stage, (plugin.to_string(), component));
        self.store.set_stage_binding(profile, &kind_name(stage), plugin)?;
        error::write(&self.live).insert(profile.to_string(), Arc::new(next));
        Ok(())
    }
}
