//! Evident: on-premise question answering over long PDFs, with the pages that prove each answer.

pub mod config;
pub mod generate;
pub mod ingest;
pub mod models;
pub mod pipeline;
pub mod plugins;
pub mod retrieval;
pub mod server;
pub mod store;
