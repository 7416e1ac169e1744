//! The stage plugin host: WebAssembly components implementing the worlds of `wit/` (every
//! contract version side by side), run by wasmtime in a sandbox per call.

pub mod bindings;
mod convert;
mod host;
mod imports;
mod runtime;

pub use bindings::types;
pub use host::{HostFailure, HostResult, StageHost};
pub use runtime::{StageComponent, StageLimits, StageRuntime};

use thiserror::Error;

/// The kinds of stage, one WIT world each: four run for a question, enrich at ingest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StageKind {
    Decompose,
    Verify,
    Rerank,
    Memory,
    Enrich,
}

impl StageKind {
    /// Every kind, in the order a component's world is looked for.
    pub const ALL: [StageKind; 5] = [StageKind::Decompose, StageKind::Verify, StageKind::Rerank, StageKind::Memory, StageKind::Enrich];
}

/// The version of the contract (`wit/since_v*`) a component was built against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ApiVersion {
    #[serde(rename = "0.1.0")]
    V0_1,
    #[serde(rename = "0.2.0")]
    V0_2,
}

impl ApiVersion {
    /// As written in the WIT package name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V0_1 => "0.1.0",
            ApiVersion::V0_2 => "0.2.0",
        }
    }

    /// The version written `text`, when this host serves it.
    pub fn parse(text: &str) -> Option<ApiVersion> {
        match text {
            "0.1.0" => Some(ApiVersion::V0_1),
            "0.2.0" => Some(ApiVersion::V0_2),
            _ => None,
        }
    }

    /// The versions this host serves, for messages.
    pub fn served() -> &'static str {
        "0.1.0 and 0.2.0"
    }
}

impl std::fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl StageKind {
    /// The WIT world a component of this kind implements.
    pub fn world(self) -> &'static str {
        match self {
            StageKind::Decompose => "decompose-stage",
            StageKind::Verify => "verify-stage",
            StageKind::Rerank => "rerank-stage",
            StageKind::Memory => "memory-stage",
            StageKind::Enrich => "enrich-stage",
        }
    }

    /// The function the world exports.
    pub fn export(self) -> &'static str {
        match self {
            StageKind::Decompose => "decompose",
            StageKind::Verify => "verify",
            StageKind::Rerank => "rerank",
            StageKind::Memory => "answer",
            StageKind::Enrich => "enrich-page",
        }
    }
}

impl std::fmt::Display for StageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StageKind::Decompose => "decompose",
            StageKind::Verify => "verify",
            StageKind::Rerank => "rerank",
            StageKind::Memory => "memory",
            StageKind::Enrich => "enrich",
        })
    }
}

/// Why a stage could not run or what went wrong inside it.
#[derive(Debug, Error)]
pub enum PluginError {
    #[error("the plugin is not a valid WebAssembly component: {0}")]
    Invalid(String),
    #[error("the plugin does not implement the {kind} stage (world {world}, exporting `{export}`): {detail}", world = .kind.world(), export = .kind.export())]
    WrongWorld { kind: StageKind, detail: String },
    #[error("the stage used up its fuel ({0} units) and was stopped")]
    OutOfFuel(u64),
    #[error("the stage ran past its time limit of {seconds} s ({setting}) and was stopped")]
    Timeout { seconds: u64, setting: &'static str },
    #[error("the stage tried to use more than its memory limit of {0} MiB and was stopped")]
    Memory(u64),
    #[error("the stage crashed: {0}")]
    Trap(String),
    #[error("the stage reported an error: {0}")]
    Stage(String),
    #[error("the stage returned something invalid: {0}")]
    BadOutput(String),
    #[error("the stage was stopped because the request was cancelled (it timed out or its client went away)")]
    Cancelled,
    #[error("the stage was stopped because the host failed while serving it: {0}")]
    Host(String),
    #[error("the plugin runtime failed: {0}")]
    Runtime(String),
}

impl crate::error::Classified for PluginError {
    /// A component that is not a stage is refused content; anything a running stage does
    /// wrong is the appliance's failure (its operator installed the stage), not the asker's.
    fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind;
        match self {
            PluginError::Invalid(_) | PluginError::WrongWorld { .. } => ErrorKind::Invalid,
            PluginError::Timeout { .. } | PluginError::Cancelled => ErrorKind::Timeout,
            PluginError::OutOfFuel(_)
            | PluginError::Memory(_)
            | PluginError::Trap(_)
            | PluginError::Stage(_)
            | PluginError::BadOutput(_)
            | PluginError::Host(_)
            | PluginError::Runtime(_) => ErrorKind::Internal,
        }
    }
}
