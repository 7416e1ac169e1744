//! Profiles: which component runs each stage, with what parameters, and how retrieval is set.
//! They live in `appliance-config/profiles/<name>.toml`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use thiserror::Error;

use crate::error::{Classified, ErrorKind};
use crate::plugins::StageKind;
use crate::retrieval::SearchMode;

/// Why a profile cannot be used.
#[derive(Debug, Error)]
pub enum ProfileError {
    #[error("{0:?} is not a profile name")]
    BadName(String),
    #[error("there is no profile named {name} in {dir} (there are: {known})")]
    NotFound { name: String, dir: String, known: String },
    /// The operator's profile file is wrong: nothing the asker sent can fix it.
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error("profile {0} has no memory stage, which answers")]
    NoMemory(String),
}

impl Classified for ProfileError {
    fn kind(&self) -> ErrorKind {
        match self {
            ProfileError::BadName(_) => ErrorKind::BadRequest,
            ProfileError::NotFound { .. } => ErrorKind::NotFound,
            ProfileError::Invalid { .. } | ProfileError::NoMemory(_) => ErrorKind::Internal,
        }
    }
}

/// One stage of a profile.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageBinding {
    /// The plugin's name (its component file is `<plugins_dir>/<name>.wasm`).
    pub plugin: String,
    /// Parameters handed to the stage as text (it parses them).
    #[serde(default)]
    pub params: BTreeMap<String, toml::Value>,
    /// Enrich stages only: whether ingest and upload run it (true), or only `evident index`
    /// (false, for a stage too costly to run on every upload).
    #[serde(default = "at_ingest_by_default")]
    pub at_ingest: bool,
}

fn at_ingest_by_default() -> bool {
    true
}

/// How the host retrieves pages for each question of the plan.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrieveSettings {
    /// Pages per question.
    pub k: u32,
    pub mode: SearchMode,
}

/// A pipeline: retrieval settings and a component per stage (memory is required).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    #[serde(skip)]
    pub name: String,
    pub description: String,
    pub retrieve: RetrieveSettings,
    pub stages: BTreeMap<StageKind, StageBinding>,
}

impl Profile {
    /// Reads `<dir>/<name>.toml`.
    pub fn load(dir: &Path, name: &str) -> Result<Profile, ProfileError> {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(ProfileError::BadName(name.to_string()));
        }
        let path = dir.join(format!("{name}.toml"));
        let text = std::fs::read_to_string(&path).map_err(|_| ProfileError::NotFound {
            name: name.to_string(),
            dir: dir.display().to_string(),
            known: Profile::names(dir).join(", "),
        })?;
        let mut profile: Profile =
            toml::from_str(&text).map_err(|e| ProfileError::Invalid { path: path.display().to_string(), reason: e.message().to_string() })?;
        if !profile.stages.contains_key(&StageKind::Memory) {
            return Err(ProfileError::NoMemory(name.to_string()));
        }
        if let Some((kind, _)) = profile.stages.iter().find(|(kind, b)| **kind != StageKind::Enrich && !b.at_ingest) {
            return Err(ProfileError::Invalid {
                path: path.display().to_string(),
                reason: format!("at_ingest applies to the enrich stage only, not to the {kind:?} stage"),
            });
        }
        profile.name = name.to_string();
        Ok(profile)
    }

    /// Names of the profiles in `dir`.
    pub fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|it| it.filter_map(|e| e.ok()).filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".toml")).map(str::to_string)).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// A stage's parameters as the stage receives them.
    pub fn params(&self, kind: StageKind) -> Vec<crate::plugins::types::Param> {
        self.param_pairs(kind).into_iter().map(|(key, value)| crate::plugins::types::Param { key, value }).collect()
    }

    /// A stage's parameters as (key, text), sorted by key.
    pub fn param_pairs(&self, kind: StageKind) -> Vec<(String, String)> {
        let Some(binding) = self.stages.get(&kind) else { return Vec::new() };
        binding
            .params
            .iter()
            .map(|(k, v)| {
                let text = match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), text)
            })
            .collect()
    }
}
