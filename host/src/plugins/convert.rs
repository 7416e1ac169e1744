//! Between the frozen 0.1.0 types and the current ones: the records both versions share are the
//! same shape under two Rust types, so one macro writes each conversion both ways; what 0.2.0
//! added (crops and thinking in a generate request) takes its default on the way up.

use super::bindings::{v0_1::types as v1, v0_2::types as v2};

/// A value of one contract version as the other's.
pub trait Lift<T> {
    fn lift(self) -> T;
}

macro_rules! same_value {
    ($($t:ty),*) => {$(
        impl Lift<$t> for $t {
            fn lift(self) -> $t { self }
        }
    )*};
}
same_value!(String, bool, u8, u32, f32, (f32, f32, f32, f32));

impl<A: Lift<B>, B> Lift<Vec<B>> for Vec<A> {
    fn lift(self) -> Vec<B> {
        self.into_iter().map(Lift::lift).collect()
    }
}

impl<A: Lift<B>, B> Lift<Option<B>> for Option<A> {
    fn lift(self) -> Option<B> {
        self.map(Lift::lift)
    }
}

/// Records of the same fields in both versions, converted field by field, both ways.
macro_rules! same_records {
    ($($name:ident { $($field:ident),* $(,)? })*) => {$(
        impl Lift<v2::$name> for v1::$name {
            fn lift(self) -> v2::$name { v2::$name { $($field: self.$field.lift()),* } }
        }
        impl Lift<v1::$name> for v2::$name {
            fn lift(self) -> v1::$name { v1::$name { $($field: self.$field.lift()),* } }
        }
    )*};
}

same_records! {
    PageRef { document, page }
    Candidate { page, score, rank }
    Verdict { page, relevant, label, score, notes }
    SubQuestion { text, instructions }
    Plan { sub_questions, difficulty, notes }
    QuestionEvidence { question, is_root, evidence, verdicts }
    Citation { page, blocks, quote }
    Answer { text, answerable, citations, notes }
    Param { key, value }
    StageContext { question, documents, params }
    Block { kind, text, bbox, font_size, bold }
    PageContent { page, width, height, text, blocks }
    OutlineEntry { title, level, page, parent }
    Generation { text, prompt_tokens, completion_tokens, finished }
}

/// Enums of the same cases in both versions, both ways.
macro_rules! same_enums {
    ($($name:ident { $($case:ident),* $(,)? })*) => {$(
        impl Lift<v2::$name> for v1::$name {
            fn lift(self) -> v2::$name { match self { $(v1::$name::$case => v2::$name::$case),* } }
        }
        impl Lift<v1::$name> for v2::$name {
            fn lift(self) -> v1::$name { match self { $(v2::$name::$case => v1::$name::$case),* } }
        }
    )*};
}

same_enums! {
    SearchMode { Maxsim, Bm25, Hybrid }
    LogLevel { Debug, Info, Warn }
}

/// A 0.1.0 stage asks for no crops and never for the thinking model.
impl Lift<v2::GenerateRequest> for v1::GenerateRequest {
    fn lift(self) -> v2::GenerateRequest {
        v2::GenerateRequest {
            system: self.system,
            prompt: self.prompt,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            stop: self.stop,
            images: self.images.lift(),
            crops: Vec::new(),
            thinking: false,
        }
    }
}
