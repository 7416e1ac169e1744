//! Evaluation on a benchmark: its questions, the retrieval metrics and answer accuracy, the
//! results log a long run resumes from, and the rows of the tables. `evident eval` parses its
//! arguments and prints; what it measures, and how, lives here.

pub mod accuracy;
mod answers;
pub mod metrics;
pub mod ocr_errors;
mod questions;
mod ranking;

pub use answers::{ABSTAINED, AnswerRecord, AnswerRow, ResultsLog, TraceLog, TraceRecord, answer_question, answer_rows, answer_rows_by, rejudge};
pub use questions::{Question, file_name, in_turn, load_questions};
pub use ranking::{ROUTING_KS, RankingReport, RankingTotals, score_rankings};

use std::path::PathBuf;

use thiserror::Error;

/// Why an evaluation could not run.
#[derive(Debug, Error)]
pub enum EvalError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} line {line}: not a question ({reason})")]
    BadQuestion { path: PathBuf, line: usize, reason: String },
    #[error("cannot write the log {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Retrieval(#[from] crate::retrieval::RetrievalError),
}

impl crate::error::Classified for EvalError {
    fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind;
        match self {
            EvalError::Read { .. } => ErrorKind::NotFound,
            EvalError::BadQuestion { .. } => ErrorKind::Invalid,
            EvalError::Write { .. } => ErrorKind::Internal,
            EvalError::Retrieval(e) => e.kind(),
        }
    }
}
