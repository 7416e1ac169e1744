//! The host functions of both contract versions, served from one [`StageHost`]: 0.2.0's
//! capability interfaces directly, 0.1.0's single `host` interface through the conversions.

use super::bindings::{v0_1, v0_2};
use super::convert::Lift;
use super::host::to_guest;
use super::runtime::StageState;
use super::types;

type Guest<T> = wasmtime::Result<Result<T, String>>;

impl v0_2::types::Host for StageState {}

impl v0_2::pages::Host for StageState {
    fn document(&mut self, id: String) -> Guest<types::DocumentInfo> {
        to_guest(self.host.document(id))
    }
    fn page(&mut self, page: types::PageRef) -> Guest<types::PageContent> {
        to_guest(self.host.page(page))
    }
    fn outline(&mut self, document: String) -> Guest<Vec<types::OutlineEntry>> {
        to_guest(self.host.outline(document))
    }
    fn regions(&mut self, page: types::PageRef) -> Guest<Vec<types::Region>> {
        to_guest(self.host.regions(page))
    }
}

impl v0_2::retrieval::Host for StageState {
    fn search(&mut self, query: String, mode: types::SearchMode, k: u32, documents: Vec<String>) -> Guest<Vec<types::Candidate>> {
        to_guest(self.host.search(query, mode, k, documents))
    }
    fn search_weighted(&mut self, query: String, alpha: f32, k: u32, documents: Vec<String>) -> Guest<Vec<types::Candidate>> {
        to_guest(self.host.search_weighted(query, alpha, k, documents))
    }
    fn similarity(&mut self, a: String, b: String) -> Guest<f32> {
        to_guest(self.host.similarities(a, vec![b]).map(|v| v.first().copied().unwrap_or(0.0)))
    }
    fn similarities(&mut self, query: String, texts: Vec<String>) -> Guest<Vec<f32>> {
        to_guest(self.host.similarities(query, texts))
    }
}

impl v0_2::generation::Host for StageState {
    fn generate(&mut self, request: types::GenerateRequest) -> Guest<types::Generation> {
        to_guest(self.host.generate(request))
    }
    fn score_choices(&mut self, system: String, prompt: String, choices: Vec<String>) -> Guest<Vec<f32>> {
        to_guest(self.host.score_choices(system, prompt, choices))
    }
    fn count_tokens(&mut self, text: String) -> wasmtime::Result<u32> {
        Ok(self.host.count_tokens(text))
    }
    fn takes_images(&mut self) -> wasmtime::Result<bool> {
        Ok(self.host.takes_images())
    }
    fn has_thinking(&mut self) -> wasmtime::Result<bool> {
        Ok(self.host.has_thinking())
    }
}

impl v0_2::artifacts::Host for StageState {
    fn get(&mut self, document: String, key: String) -> Guest<Option<types::StoredArtifact>> {
        to_guest(self.host.artifact(document, key))
    }
    fn of_kind(&mut self, document: String, kind: String) -> Guest<Vec<types::StoredArtifact>> {
        to_guest(self.host.artifacts_of_kind(document, kind))
    }
    fn search(&mut self, query: String, kind: String, mode: types::SearchMode, alpha: f32, k: u32, documents: Vec<String>) -> Guest<Vec<types::ArtifactHit>> {
        to_guest(self.host.search_artifacts(query, kind, mode, alpha, k, documents))
    }
    fn neighbours(&mut self, document: String, key: String, k: u32) -> Guest<Vec<types::ArtifactHit>> {
        to_guest(self.host.artifact_neighbours(document, key, k))
    }
}

impl v0_2::runtime::Host for StageState {
    fn random(&mut self) -> wasmtime::Result<u64> {
        Ok(self.host.random())
    }
    fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        self.host.log(level, message);
        Ok(())
    }
}

impl v0_1::types::Host for StageState {}

impl v0_1::host::Host for StageState {
    fn generate(&mut self, request: v0_1::types::GenerateRequest) -> Guest<v0_1::types::Generation> {
        to_guest(self.host.generate(request.lift()).map(Lift::lift))
    }
    fn score_choices(&mut self, system: String, prompt: String, choices: Vec<String>) -> Guest<Vec<f32>> {
        to_guest(self.host.score_choices(system, prompt, choices))
    }
    fn search(&mut self, query: String, mode: v0_1::types::SearchMode, k: u32, documents: Vec<String>) -> Guest<Vec<v0_1::types::Candidate>> {
        to_guest(self.host.search(query, mode.lift(), k, documents).map(Lift::lift))
    }
    fn page(&mut self, page: v0_1::types::PageRef) -> Guest<v0_1::types::PageContent> {
        to_guest(self.host.page(page.lift()).map(Lift::lift))
    }
    fn page_count(&mut self, document: String) -> Guest<u32> {
        to_guest(self.host.document(document).map(|d| d.page_count))
    }
    fn outline(&mut self, document: String) -> Guest<Vec<v0_1::types::OutlineEntry>> {
        to_guest(self.host.outline(document).map(Lift::lift))
    }
    fn similarity(&mut self, a: String, b: String) -> Guest<f32> {
        to_guest(self.host.similarities(a, vec![b]).map(|v| v.first().copied().unwrap_or(0.0)))
    }
    fn count_tokens(&mut self, text: String) -> wasmtime::Result<u32> {
        Ok(self.host.count_tokens(text))
    }
    fn random(&mut self) -> wasmtime::Result<u64> {
        Ok(self.host.random())
    }
    fn log(&mut self, level: v0_1::types::LogLevel, message: String) -> wasmtime::Result<()> {
        self.host.log(level.lift(), message);
        Ok(())
    }
}
