//! The stage plugin host: WebAssembly components implementing the worlds of `wit/`, run by
//! wasmtime in a sandbox per call.

pub mod bindings;
mod runtime;

pub use bindings::types;
pub use runtime::{StageHost, StageLimits, StageRuntime};

use thiserror::Error;

/// The four kinds of stage, one WIT world each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StageKind {
    Decompose,
    Verify,
    Rerank,
    Memory,
}

impl StageKind {
    /// The WIT world a component of this kind implements.
    pub fn world(self) -> &'static str {
        match self {
            StageKind::Decompose => "decompose-stage",
            StageKind::Verify => "verify-stage",
            StageKind::Rerank => "rerank-stage",
            StageKind::Memory => "memory-stage",
        }
    }

    /// The function the world exports.
    pub fn export(self) -> &'static str {
        match self {
            StageKind::Decompose => "decompose",
            StageKind::Verify => "verify",
            StageKind::Rerank => "rerank",
            StageKind::Memory => "answer",
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
    #[error("the stage ran past its time limit of {0} s and was stopped")]
    Timeout(u64),
    #[error("the stage tried to use more than its memory limit of {0} MiB and was stopped")]
    Memory(u64),
    #[error("the stage crashed: {0}")]
    Trap(String),
    #[error("the stage reported an error: {0}")]
    Stage(String),
    #[error("the stage returned something invalid: {0}")]
    BadOutput(String),
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
            PluginError::Timeout(_) => ErrorKind::Timeout,
            PluginError::OutOfFuel(_)
            | PluginError::Memory(_)
            | PluginError::Trap(_)
            | PluginError::Stage(_)
            | PluginError::BadOutput(_)
            | PluginError::Runtime(_) => ErrorKind::Internal,
        }
    }
}
