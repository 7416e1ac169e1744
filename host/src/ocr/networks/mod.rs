//! PP-OCRv5's networks as burn modules, generated from the ONNX files by burn-onnx.

#[rustfmt::skip]
#[allow(clippy::all, unused, missing_docs)]
pub mod detector;
#[rustfmt::skip]
#[allow(clippy::all, unused, missing_docs)]
pub mod recogniser;
