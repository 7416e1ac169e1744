//! The wasmtime runtime that runs stage components: one engine, one linker with the host
//! imports, and a fresh sandboxed store per call (no filesystem, network, environment or clock
//! beyond the host interface; a memory cap, fuel and a wall-clock deadline).

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder, Trap};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{self, HostFunctions, HostImports, types};
use super::{PluginError, StageKind};

pub use crate::config::StageLimits;

/// What the host offers a stage during one request; the pipeline implements it.
pub trait StageHost: Send + Sync {
    fn generate(&self, request: types::GenerateRequest) -> Result<types::Generation, String>;
    fn score_choices(&self, system: String, prompt: String, choices: Vec<String>) -> Result<Vec<f32>, String>;
    fn search(&self, query: String, mode: types::SearchMode, k: u32, documents: Vec<String>) -> Result<Vec<types::Candidate>, String>;
    fn page(&self, page: types::PageRef) -> Result<types::PageContent, String>;
    fn page_count(&self, document: String) -> Result<u32, String>;
    fn outline(&self, document: String) -> Result<Vec<types::OutlineEntry>, String>;
    fn similarity(&self, a: String, b: String) -> Result<f32, String>;
    fn count_tokens(&self, text: String) -> u32;
    fn random(&self) -> u64;
    fn log(&self, level: types::LogLevel, message: String);
}

/// The state of one sandboxed call.
pub struct StageState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
    host: Arc<dyn StageHost>,
}

impl WasiView for StageState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl types::Host for StageState {}

impl HostFunctions for StageState {
    fn generate(&mut self, request: types::GenerateRequest) -> Result<types::Generation, String> {
        self.host.generate(request)
    }
    fn score_choices(&mut self, system: String, prompt: String, choices: Vec<String>) -> Result<Vec<f32>, String> {
        self.host.score_choices(system, prompt, choices)
    }
    fn search(&mut self, query: String, mode: types::SearchMode, k: u32, documents: Vec<String>) -> Result<Vec<types::Candidate>, String> {
        self.host.search(query, mode, k, documents)
    }
    fn page(&mut self, page: types::PageRef) -> Result<types::PageContent, String> {
        self.host.page(page)
    }
    fn page_count(&mut self, document: String) -> Result<u32, String> {
        self.host.page_count(document)
    }
    fn outline(&mut self, document: String) -> Result<Vec<types::OutlineEntry>, String> {
        self.host.outline(document)
    }
    fn similarity(&mut self, a: String, b: String) -> Result<f32, String> {
        self.host.similarity(a, b)
    }
    fn count_tokens(&mut self, text: String) -> u32 {
        self.host.count_tokens(text)
    }
    fn random(&mut self) -> u64 {
        self.host.random()
    }
    fn log(&mut self, level: types::LogLevel, message: String) {
        self.host.log(level, message)
    }
}

/// Epochs advance this often; the deadline is counted in them.
const TICK: Duration = Duration::from_millis(10);

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
        HostImports::add_to_linker::<StageState, HasSelf<StageState>>(&mut linker, |s| s).map_err(|e| PluginError::Runtime(e.to_string()))?;
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

    /// Compiles a component (Cranelift), checking that it implements `kind`'s world.
    pub fn compile(&self, wasm: &[u8], kind: StageKind) -> Result<Component, PluginError> {
        let component = Component::new(&self.engine, wasm).map_err(|e| PluginError::Invalid(crate::error::one_line(&format!("{e:#}"))))?;
        self.check_world(&component, kind)?;
        Ok(component)
    }

    /// Refuses a component that lacks the world's export or imports what the host lacks,
    /// naming what is missing.
    fn check_world(&self, component: &Component, kind: StageKind) -> Result<(), PluginError> {
        let pre = self.linker.instantiate_pre(component).map_err(|e| PluginError::WrongWorld { kind, detail: format!("{e:#}") })?;
        let checked = match kind {
            StageKind::Decompose => bindings::decompose::DecomposeStagePre::new(pre).map(drop),
            StageKind::Verify => bindings::verify::VerifyStagePre::new(pre).map(drop),
            StageKind::Rerank => bindings::rerank::RerankStagePre::new(pre).map(drop),
            StageKind::Memory => bindings::memory::MemoryStagePre::new(pre).map(drop),
        };
        checked.map_err(|e| PluginError::WrongWorld { kind, detail: format!("{e:#}") })
    }

    fn store(&self, host: Arc<dyn StageHost>) -> Result<Store<StageState>, PluginError> {
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
        let ticks = (self.limits.timeout_s * 1000).div_ceil(TICK.as_millis() as u64).max(1);
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();
        Ok(store)
    }

    /// Turns a wasmtime failure into a sentence: fuel, deadline, memory, or the trap itself.
    fn failure(&self, error: wasmtime::Error) -> PluginError {
        let root = error.root_cause().to_string();
        match error.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => PluginError::OutOfFuel(self.limits.fuel),
            Some(Trap::Interrupt) => PluginError::Timeout(self.limits.timeout_s),
            // StoreLimits refusing a memory.grow is not a Trap variant, only this message.
            _ if root.contains("growing memory") => PluginError::Memory(self.limits.memory_mib),
            Some(Trap::UnreachableCodeReached) => PluginError::Trap("it panicked or aborted (unreachable code reached)".into()),
            Some(trap) => PluginError::Trap(trap.to_string()),
            None => PluginError::Trap(root),
        }
    }

    /// Runs a decompose stage.
    pub fn decompose(&self, component: &Component, host: Arc<dyn StageHost>, ctx: &types::StageContext) -> Result<types::Plan, PluginError> {
        let mut store = self.store(host)?;
        let stage = bindings::decompose::DecomposeStage::instantiate(&mut store, component, &self.linker).map_err(|e| self.failure(e))?;
        stage.call_decompose(&mut store, ctx).map_err(|e| self.failure(e))?.map_err(PluginError::Stage)
    }

    /// Runs a verify stage.
    pub fn verify(
        &self,
        component: &Component,
        host: Arc<dyn StageHost>,
        ctx: &types::StageContext,
        question: &str,
        candidates: &[types::Candidate],
    ) -> Result<Vec<types::Verdict>, PluginError> {
        let mut store = self.store(host)?;
        let stage = bindings::verify::VerifyStage::instantiate(&mut store, component, &self.linker).map_err(|e| self.failure(e))?;
        stage.call_verify(&mut store, ctx, question, candidates).map_err(|e| self.failure(e))?.map_err(PluginError::Stage)
    }

    /// Runs a rerank stage.
    #[allow(clippy::too_many_arguments)]
    pub fn rerank(
        &self,
        component: &Component,
        host: Arc<dyn StageHost>,
        ctx: &types::StageContext,
        question: &str,
        is_root: bool,
        candidates: &[types::Candidate],
        verdicts: &[types::Verdict],
    ) -> Result<Vec<types::Candidate>, PluginError> {
        let mut store = self.store(host)?;
        let stage = bindings::rerank::RerankStage::instantiate(&mut store, component, &self.linker).map_err(|e| self.failure(e))?;
        stage.call_rerank(&mut store, ctx, question, is_root, candidates, verdicts).map_err(|e| self.failure(e))?.map_err(PluginError::Stage)
    }

    /// Runs a memory (answer) stage.
    pub fn answer(
        &self,
        component: &Component,
        host: Arc<dyn StageHost>,
        ctx: &types::StageContext,
        plan: &types::Plan,
        evidence: &[types::QuestionEvidence],
    ) -> Result<types::Answer, PluginError> {
        let mut store = self.store(host)?;
        let stage = bindings::memory::MemoryStage::instantiate(&mut store, component, &self.linker).map_err(|e| self.failure(e))?;
        stage.call_answer(&mut store, ctx, plan, evidence).map_err(|e| self.failure(e))?.map_err(PluginError::Stage)
    }
}
