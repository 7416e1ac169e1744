//! The wasmtime runtime that runs stage components: one engine, one linker with the host
//! imports, and a fresh sandboxed store per call (no filesystem, network, environment or clock
//! beyond the host interface; a memory cap, fuel and a wall-clock deadline).

use std::sync::Arc;
use std::time::Duration;

use sha2::Digest;

use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder, Trap};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{v0_1, v0_2};
use super::convert::Lift;
use super::host::{HostStop, StageHost};
use super::{ApiVersion, PluginError, StageKind, types};

pub use crate::config::StageLimits;

/// The state of one sandboxed call.
pub struct StageState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
    pub(super) host: Arc<dyn StageHost>,
}

impl WasiView for StageState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// A compiled component, checked against one stage kind's world in the contract version it
/// was built for.
#[derive(Debug)]
pub struct StageComponent {
    pub component: Component,
    pub kind: StageKind,
    pub api: ApiVersion,
    /// sha256 of the component's bytes, hex: what enrich sets are keyed by.
    pub sha256: String,
}

/// Epochs advance this often; the deadline is counted in them.
const TICK: Duration = Duration::from_millis(10);

/// A call's wall-clock limit and the setting that sets it, so that the error can name it.
#[derive(Debug, Clone, Copy)]
struct TimeLimit {
    seconds: u64,
    setting: &'static str,
}

/// Compiles components and runs stage calls.
pub struct StageRuntime {
    engine: Engine,
    linker: Linker<StageState>,
    limits: StageLimits,
}

impl StageRuntime {
    /// An engine with fuel and epoch interruption, and a linker holding the host imports and
    /// an empty WASI (Rust components import a few WASI interfaces even when they use none).
    pub fn new(limits: StageLimits) -> Result<StageRuntime, PluginError> {
        let mut config = Config::new();
        config.wasm_component_model(true).consume_fuel(true).epoch_interruption(true);
        let engine = Engine::new(&config).map_err(|e| PluginError::Runtime(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| PluginError::Runtime(e.to_string()))?;
        v0_1::HostImports::add_to_linker::<StageState, HasSelf<StageState>>(&mut linker, |s| s).map_err(|e| PluginError::Runtime(e.to_string()))?;
        v0_2::HostImports::add_to_linker::<StageState, HasSelf<StageState>>(&mut linker, |s| s).map_err(|e| PluginError::Runtime(e.to_string()))?;
        let ticker = engine.weak();
        std::thread::Builder::new()
            .name("stage-epochs".into())
            .spawn(move || {
                while let Some(engine) = ticker.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(TICK);
                }
            })
            .map_err(|e| PluginError::Runtime(e.to_string()))?;
        Ok(StageRuntime { engine, linker, limits })
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> StageLimits {
        self.limits
    }

    /// Compiles a component (Cranelift), checking that it implements `kind`'s world in the
    /// contract version it imports.
    pub fn compile(&self, wasm: &[u8], kind: StageKind) -> Result<StageComponent, PluginError> {
        let component = Component::new(&self.engine, wasm).map_err(|e| PluginError::Invalid(crate::error::one_line(&format!("{e:#}"))))?;
        let api = self.api_of(&component, kind)?;
        self.check_world(&component, kind, api)?;
        let sha256 = sha2::Sha256::digest(wasm).iter().map(|b| format!("{b:02x}")).collect();
        Ok(StageComponent { component, kind, api, sha256 })
    }

    /// The contract version whose interfaces the component imports. One that imports none of
    /// them (a stage that asks nothing of the host) is taken as the newest that has its kind.
    fn api_of(&self, component: &Component, kind: StageKind) -> Result<ApiVersion, PluginError> {
        let ty = component.component_type();
        let mut found: Option<ApiVersion> = None;
        for (name, _) in ty.imports(&self.engine) {
            let Some(version) = name.strip_prefix("evident:pipeline/").and_then(|n| n.split_once('@')).map(|(_, v)| v) else { continue };
            let api = ApiVersion::parse(version).ok_or_else(|| PluginError::WrongWorld {
                kind,
                detail: format!("it imports {name}, of a contract version this host does not serve (it serves {})", ApiVersion::served()),
            })?;
            if found.is_some_and(|f| f != api) {
                return Err(PluginError::WrongWorld { kind, detail: "it imports interfaces of two contract versions at once".into() });
            }
            found = Some(api);
        }
        Ok(found.unwrap_or(ApiVersion::V0_2))
    }

    /// Refuses a component that lacks the world's export or imports what the host lacks,
    /// naming what is missing.
    fn check_world(&self, component: &Component, kind: StageKind, api: ApiVersion) -> Result<(), PluginError> {
        let wrong = |e: wasmtime::Error| PluginError::WrongWorld { kind, detail: format!("{e:#}") };
        let pre = self.linker.instantiate_pre(component).map_err(wrong)?;
        let checked = match (api, kind) {
            (ApiVersion::V0_1, StageKind::Decompose) => v0_1::decompose::DecomposeStagePre::new(pre).map(drop),
            (ApiVersion::V0_1, StageKind::Verify) => v0_1::verify::VerifyStagePre::new(pre).map(drop),
            (ApiVersion::V0_1, StageKind::Rerank) => v0_1::rerank::RerankStagePre::new(pre).map(drop),
            (ApiVersion::V0_1, StageKind::Memory) => v0_1::memory::MemoryStagePre::new(pre).map(drop),
            (ApiVersion::V0_1, StageKind::Enrich) => {
                return Err(PluginError::WrongWorld {
                    kind,
                    detail: "the enrich stage exists from contract 0.2.0 on, and this component imports 0.1.0".into(),
                });
            }
            (ApiVersion::V0_2, StageKind::Decompose) => v0_2::decompose::DecomposeStagePre::new(pre).map(drop),
            (ApiVersion::V0_2, StageKind::Verify) => v0_2::verify::VerifyStagePre::new(pre).map(drop),
            (ApiVersion::V0_2, StageKind::Rerank) => v0_2::rerank::RerankStagePre::new(pre).map(drop),
            (ApiVersion::V0_2, StageKind::Memory) => v0_2::memory::MemoryStagePre::new(pre).map(drop),
            (ApiVersion::V0_2, StageKind::Enrich) => v0_2::enrich::EnrichStagePre::new(pre).map(drop),
        };
        checked.map_err(wrong)
    }

    /// The time limit of a question's stage call.
    fn stage_limit(&self) -> TimeLimit {
        TimeLimit { seconds: self.limits.timeout_s, setting: "plugins.limits.timeout_s" }
    }

    /// The time limit of an enrich call.
    fn enrich_limit(&self) -> TimeLimit {
        TimeLimit { seconds: self.limits.enrich_timeout_s, setting: "plugins.limits.enrich_timeout_s" }
    }

    fn store(&self, host: Arc<dyn StageHost>, limit: TimeLimit) -> Result<Store<StageState>, PluginError> {
        let limits = StoreLimitsBuilder::new()
            .memory_size((self.limits.memory_mib as usize) << 20)
            .trap_on_grow_failure(true)
            .instances(32)
            .tables(32)
            .memories(4)
            .build();
        let state = StageState { wasi: WasiCtxBuilder::new().build(), table: ResourceTable::new(), limits, host };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_fuel(self.limits.fuel).map_err(|e| PluginError::Runtime(e.to_string()))?;
        let ticks = limit.seconds.saturating_mul(1000).div_ceil(TICK.as_millis() as u64).max(1);
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();
        Ok(store)
    }

    /// Turns a wasmtime failure into a sentence: fuel, deadline, memory, or the trap itself.
    fn failure(&self, error: wasmtime::Error, limit: TimeLimit) -> PluginError {
        let root = error.root_cause().to_string();
        match error.downcast_ref::<HostStop>() {
            Some(HostStop::Cancelled) => return PluginError::Cancelled,
            Some(HostStop::Failed(reason)) => return PluginError::Host(reason.clone()),
            None => {}
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => PluginError::OutOfFuel(self.limits.fuel),
            Some(Trap::Interrupt) => PluginError::Timeout { seconds: limit.seconds, setting: limit.setting },
            // StoreLimits refusing a memory.grow is not a Trap variant, only this message.
            _ if root.contains("growing memory") => PluginError::Memory(self.limits.memory_mib),
            Some(Trap::UnreachableCodeReached) => PluginError::Trap("it panicked or aborted (unreachable code reached)".into()),
            Some(trap) => PluginError::Trap(trap.to_string()),
            None => PluginError::Trap(root),
        }
    }

    /// Runs a decompose stage.
    pub fn decompose(&self, stage: &StageComponent, host: Arc<dyn StageHost>, ctx: &types::StageContext) -> Result<types::Plan, PluginError> {
        let limit = self.stage_limit();
        let mut store = self.store(host, limit)?;
        let out = match stage.api {
            ApiVersion::V0_1 => {
                let s = v0_1::decompose::DecomposeStage::instantiate(&mut store, &stage.component, &self.linker).map_err(|e| self.failure(e, limit))?;
                s.call_decompose(&mut store, &ctx.clone().lift()).map(|r| r.map(Lift::lift))
            }
            ApiVersion::V0_2 => v0_2::decompose::DecomposeStage::instantiate(&mut store, &stage.component, &self.linker)
                .map_err(|e| self.failure(e, limit))?
                .call_decompose(&mut store, ctx),
        };
        out.map_err(|e| self.failure(e, limit))?.map_err(PluginError::Stage)
    }

    /// Runs a verify stage.
    pub fn verify(
        &self,
        stage: &StageComponent,
        host: Arc<dyn StageHost>,
        ctx: &types::StageContext,
        question: &str,
        candidates: &[types::Candidate],
    ) -> Result<Vec<types::Verdict>, PluginError> {
        let limit = self.stage_limit();
        let mut store = self.store(host, limit)?;
        let out = match stage.api {
            ApiVersion::V0_1 => {
                let s = v0_1::verify::VerifyStage::instantiate(&mut store, &stage.component, &self.linker).map_err(|e| self.failure(e, limit))?;
                s.call_verify(&mut store, &ctx.clone().lift(), question, &candidates.to_vec().lift()).map(|r| r.map(Lift::lift))
            }
            ApiVersion::V0_2 => v0_2::verify::VerifyStage::instantiate(&mut store, &stage.component, &self.linker)
                .map_err(|e| self.failure(e, limit))?
                .call_verify(&mut store, ctx, question, candidates),
        };
        out.map_err(|e| self.failure(e, limit))?.map_err(PluginError::Stage)
    }

    /// Runs a rerank stage.
    #[allow(clippy::too_many_arguments)]
    pub fn rerank(
        &self,
        stage: &StageComponent,
        host: Arc<dyn StageHost>,
        ctx: &types::StageContext,
        question: &str,
        is_root: bool,
        candidates: &[types::Candidate],
        verdicts: &[types::Verdict],
    ) -> Result<Vec<types::Candidate>, PluginError> {
        let limit = self.stage_limit();
        let mut store = self.store(host, limit)?;
        let out = match stage.api {
            ApiVersion::V0_1 => {
                let s = v0_1::rerank::RerankStage::instantiate(&mut store, &stage.component, &self.linker).map_err(|e| self.failure(e, limit))?;
                s.call_rerank(&mut store, &ctx.clone().lift(), question, is_root, &candidates.to_vec().lift(), &verdicts.to_vec().lift())
                    .map(|r| r.map(Lift::lift))
            }
            ApiVersion::V0_2 => v0_2::rerank::RerankStage::instantiate(&mut store, &stage.component, &self.linker)
                .map_err(|e| self.failure(e, limit))?
                .call_rerank(&mut store, ctx, question, is_root, candidates, verdicts),
        };
        out.map_err(|e| self.failure(e, limit))?.map_err(PluginError::Stage)
    }

    /// Runs a memory (answer) stage.
    pub fn answer(
        &self,
        stage: &StageComponent,
        host: Arc<dyn StageHost>,
        ctx: &types::StageContext,
        plan: &types::Plan,
        evidence: &[types::QuestionEvidence],
    ) -> Result<types::Answer, PluginError> {
        let limit = self.stage_limit();
        let mut store = self.store(host, limit)?;
        let out = match stage.api {
            ApiVersion::V0_1 => {
                let s = v0_1::memory::MemoryStage::instantiate(&mut store, &stage.component, &self.linker).map_err(|e| self.failure(e, limit))?;
                s.call_answer(&mut store, &ctx.clone().lift(), &plan.clone().lift(), &evidence.to_vec().lift()).map(|r| r.map(Lift::lift))
            }
            ApiVersion::V0_2 => v0_2::memory::MemoryStage::instantiate(&mut store, &stage.component, &self.linker)
                .map_err(|e| self.failure(e, limit))?
                .call_answer(&mut store, ctx, plan, evidence),
        };
        out.map_err(|e| self.failure(e, limit))?.map_err(PluginError::Stage)
    }

    /// Runs an enrich stage over one page.
    pub fn enrich_page(
        &self,
        stage: &StageComponent,
        host: Arc<dyn StageHost>,
        ctx: &types::EnrichContext,
        page: &types::PageContent,
    ) -> Result<Vec<types::Artifact>, PluginError> {
        let limit = self.enrich_limit();
        let mut store = self.store(host, limit)?;
        let s = self.enrich_instance(&mut store, stage, limit)?;
        s.call_enrich_page(&mut store, ctx, page).map_err(|e| self.failure(e, limit))?.map_err(PluginError::Stage)
    }

    /// Runs an enrich stage over the whole document, given what its pages made.
    pub fn enrich_document(
        &self,
        stage: &StageComponent,
        host: Arc<dyn StageHost>,
        ctx: &types::EnrichContext,
        made: &[types::Artifact],
    ) -> Result<Vec<types::Artifact>, PluginError> {
        let limit = self.enrich_limit();
        let mut store = self.store(host, limit)?;
        let s = self.enrich_instance(&mut store, stage, limit)?;
        s.call_enrich_document(&mut store, ctx, made).map_err(|e| self.failure(e, limit))?.map_err(PluginError::Stage)
    }

    fn enrich_instance(&self, store: &mut Store<StageState>, stage: &StageComponent, limit: TimeLimit) -> Result<v0_2::enrich::EnrichStage, PluginError> {
        if stage.kind != StageKind::Enrich {
            return Err(PluginError::WrongWorld { kind: StageKind::Enrich, detail: format!("it was checked as a {} stage", stage.kind) });
        }
        v0_2::enrich::EnrichStage::instantiate(store, &stage.component, &self.linker).map_err(|e| self.failure(e, limit))
    }
}
