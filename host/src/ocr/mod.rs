//! OCR: PP-OCRv5's text detector and recogniser for pages without a text layer, in burn on a
//! GPU (networks generated from the ONNX files set-up unpacks) and natively on the CPU
//! (`native`, read from the same files). Pre- and post-processing (DB's boxes, CTC's
//! decoding) are here in Rust.

mod detect;
mod native;
mod networks;
mod recognise;
pub mod weights;

pub use detect::{DbSettings, PixelBox, detector_input, input_size, text_boxes};
pub use native::{NativeNetwork, Tensor as NativeTensor};
pub use recognise::{DecodedChar, DecodedLine, Dictionary, LINE_HEIGHT, STEP_COLUMNS, batch_width, ctc_greedy, scaled_width, write_line_input};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use burn::prelude::*;
use burn_store::{BurnpackStore, ModuleSnapshot};
use image::RgbImage;
use rayon::prelude::*;
use thiserror::Error;

use crate::config::CpuPrecision;
use crate::error::{Classified, ErrorKind};

/// The folder under the models folder where set-up puts PP-OCRv5.
pub const MODEL_DIR: &str = "ppocrv5";
/// The detector's and recogniser's ONNX files, as set-up names them.
pub const DETECTOR_FILE: &str = "ppocrv5_det.onnx";
pub const RECOGNISER_FILE: &str = "ppocrv5_rec.onnx";
const DICTIONARY_FILE: &str = "ppocr_keys_v5.txt";
/// Lines recognised in one pass of the recogniser (PaddleOCR's `rec_batch_num`).
const LINES_PER_BATCH: usize = 6;
/// The detector sees at most this many pixels on an image's longer side unless told otherwise
/// (PaddleOCR 3's limit for PP-OCRv5).
const MAX_DETECTOR_SIDE: u32 = 4000;
/// Lines read with less confidence are dropped (PaddleOCR 2.x's `drop_score`).
const DROP_SCORE: f32 = 0.5;

/// Why OCR could not run.
#[derive(Debug, Error)]
pub enum OcrError {
    #[error("the OCR model file {0} is missing; run the set-up (scripts/setup.sh)")]
    Missing(PathBuf),
    #[error("cannot convert the OCR model {path} for burn: {reason}")]
    Convert { path: PathBuf, reason: String },
    #[error("cannot load the OCR weights {path}: {reason}; delete the file and run again to convert it anew")]
    Load { path: PathBuf, reason: String },
    #[error("the recogniser has {classes} classes but its dictionary {dictionary} has {entries}")]
    Dictionary { classes: usize, dictionary: PathBuf, entries: usize },
    #[error("the OCR networks failed: {0}")]
    Compute(String),
}

impl Classified for OcrError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Internal
    }
}

/// Where [`OcrEngine::read_timed`]'s time went.
#[derive(Debug, Clone, Copy, Default)]
pub struct OcrTimes {
    /// The detector and its boxes (the image's preparation included).
    pub detect: Duration,
    /// The recogniser over every line found.
    pub recognise: Duration,
    /// Lines the detector found.
    pub lines: usize,
}

/// A recognised text line on an image: its box, text and each character's columns.
#[derive(Debug, Clone)]
pub struct OcrLine {
    pub bbox: PixelBox,
    pub confidence: f32,
    pub chars: Vec<OcrChar>,
}

impl OcrLine {
    /// The line's text.
    pub fn text(&self) -> String {
        self.chars.iter().map(|c| c.ch).collect()
    }
}

/// A recognised character and the columns of the image it spans.
#[derive(Debug, Clone, Copy)]
pub struct OcrChar {
    pub ch: char,
    pub x0: f32,
    pub x1: f32,
    pub confidence: f32,
}

/// Whether a recognised line is kept: read with at least PaddleOCR's confidence, and holding a
/// letter or digit. A line of punctuation alone carries nothing a question can match, and it is
/// what the detector's rare false finds on flat fills and rules read as.
fn worth_keeping(line: &DecodedLine) -> bool {
    line.confidence >= DROP_SCORE && line.chars.iter().any(|c| c.ch.is_alphanumeric())
}

/// Where the two networks run.
enum Networks {
    /// burn's generated networks on a burn device.
    Burn { detector: Box<networks::detector::Model>, recogniser: Box<networks::recogniser::Model>, device: Device },
    /// The native CPU networks.
    Native { detector: NativeNetwork, recogniser: NativeNetwork },
}

/// PP-OCRv5's detector and recogniser, loaded on one burn device or natively on the CPU.
pub struct OcrEngine {
    networks: Networks,
    dictionary: Dictionary,
    settings: DbSettings,
    detector_side: u32,
}

impl OcrEngine {
    /// Loads the networks from `dir` (set-up's `models/ppocrv5`) into burn on `device`,
    /// converting their weights on first use.
    pub fn load(dir: &Path, device: &Device) -> Result<OcrEngine, OcrError> {
        let dictionary = Dictionary::load(&dir.join(DICTIONARY_FILE))?;
        let mut detector = networks::detector::Model::new(device);
        load_weights(&mut detector, &dir.join(DETECTOR_FILE))?;
        let mut recogniser = networks::recogniser::Model::new(device);
        load_weights(&mut recogniser, &dir.join(RECOGNISER_FILE))?;
        Ok(OcrEngine::with_networks(Networks::Burn { detector: Box::new(detector), recogniser: Box::new(recogniser), device: device.clone() }, dictionary))
    }

    /// Loads the networks from `dir` as native CPU networks whose products run in `precision`.
    pub fn load_native(dir: &Path, precision: CpuPrecision) -> Result<OcrEngine, OcrError> {
        let dictionary = Dictionary::load(&dir.join(DICTIONARY_FILE))?;
        let detector = NativeNetwork::load(&dir.join(DETECTOR_FILE), precision)?;
        let recogniser = NativeNetwork::load(&dir.join(RECOGNISER_FILE), precision)?;
        Ok(OcrEngine::with_networks(Networks::Native { detector, recogniser }, dictionary))
    }

    /// The engine for a compute device: burn on a wgpu one, the native networks in
    /// `precision` on the CPU.
    pub fn load_on(dir: &Path, device: &crate::models::ComputeDevice, precision: CpuPrecision) -> Result<OcrEngine, OcrError> {
        if device.wgpu { OcrEngine::load(dir, &device.device) } else { OcrEngine::load_native(dir, precision) }
    }

    /// Whether the networks are the native CPU ones.
    pub fn is_native(&self) -> bool {
        matches!(self.networks, Networks::Native { .. })
    }

    /// Whether the native networks' products run in 8-bit integers.
    pub fn is_int8(&self) -> bool {
        matches!(&self.networks, Networks::Native { recogniser, .. } if recogniser.is_int8())
    }

    fn with_networks(networks: Networks, dictionary: Dictionary) -> OcrEngine {
        OcrEngine { networks, dictionary, settings: DbSettings::default(), detector_side: MAX_DETECTOR_SIDE }
    }

    /// The engine with its detector seeing images scaled down to at most `px` pixels on their
    /// longer side (lines are still read from the full image).
    pub fn with_detector_side(mut self, px: u32) -> OcrEngine {
        self.detector_side = px.clamp(32, MAX_DETECTOR_SIDE);
        self
    }

    /// The text lines of an image, top to bottom, each read left to right.
    pub fn read(&self, image: &RgbImage) -> Result<Vec<OcrLine>, OcrError> {
        self.read_timed(image).map(|(lines, _)| lines)
    }

    /// [`OcrEngine::read`], and how long finding the lines and reading them took.
    pub fn read_timed(&self, image: &RgbImage) -> Result<(Vec<OcrLine>, OcrTimes), OcrError> {
        let started = Instant::now();
        let (w, h) = image.dimensions();
        let scale = (self.detector_side as f32 / w.max(h).max(1) as f32).min(1.0);
        let (dw, dh) = input_size(w, h, scale);
        let prob = self.probability_map(detector_input(image, dw, dh), dw as usize, dh as usize)?;
        let mut boxes = text_boxes(&prob, dw as usize, dh as usize, w, h, &self.settings);
        boxes.sort_by(|a, b| (a.y0 + a.y1).total_cmp(&(b.y0 + b.y1)).then(a.x0.total_cmp(&b.x0)));
        let crops: Vec<RgbImage> = boxes
            .iter()
            .map(|b| image::imageops::crop_imm(image, b.x0 as u32, b.y0 as u32, b.width().max(1.0) as u32, b.height().max(1.0) as u32).to_image())
            .collect();
        let detect = started.elapsed();
        let decoded = self.recognise(&crops)?;
        let times = OcrTimes { detect, recognise: started.elapsed() - detect, lines: crops.len() };
        let lines = boxes
            .into_iter()
            .zip(crops.iter().zip(decoded))
            .filter(|(_, (_, line))| worth_keeping(line))
            .map(|(bbox, (crop, line))| {
                // Output step s covers input columns [8s, 8s + 8) of the line scaled to height 48.
                let per_column = crop.width() as f32 / scaled_width(crop.width(), crop.height()) as f32;
                let column = |step: usize| bbox.x0 + (step as u32 * STEP_COLUMNS) as f32 * per_column;
                let chars = line
                    .chars
                    .iter()
                    .map(|c| {
                        // A character read in the padding past the line's end stays at its end.
                        let x0 = column(c.steps.0).min(bbox.x1);
                        OcrChar { ch: c.ch, x0, x1: column(c.steps.1).min(bbox.x1).max(x0), confidence: c.confidence }
                    })
                    .collect();
                OcrLine { bbox, confidence: line.confidence, chars }
            })
            .collect();
        Ok((lines, times))
    }

    /// The detector's text probability map for an input made by [`detector_input`].
    pub fn probability_map(&self, input: Vec<f32>, width: usize, height: usize) -> Result<Vec<f32>, OcrError> {
        match &self.networks {
            Networks::Burn { detector, device, .. } => {
                let x = Tensor::<4>::from_data(TensorData::new(input, [1, 3, height, width]), device);
                let prob = detector.forward(x);
                prob.into_data().convert::<f32>().try_into_vec::<f32>().map_err(|e| OcrError::Compute(format!("{e:?}")))
            }
            Networks::Native { detector, .. } => Ok(detector.run(NativeTensor::new(vec![1, 3, height, width], input)?)?.data),
        }
    }

    /// Each crop's text, in batches of lines of similar width as PaddleOCR runs them. The
    /// batches run side by side: burn's CPU passes leave a core idle much of the time, and
    /// each batch's lines are the same whichever runs first, so the text is too.
    pub fn recognise(&self, crops: &[RgbImage]) -> Result<Vec<DecodedLine>, OcrError> {
        let widths: Vec<u32> = crops.iter().map(|c| scaled_width(c.width(), c.height())).collect();
        let mut order: Vec<usize> = (0..crops.len()).collect();
        order.sort_by_key(|&i| widths[i]);
        let batches: Vec<&[usize]> = order.chunks(LINES_PER_BATCH).collect();
        let decoded = batches
            .par_iter()
            .map(|batch| {
                let width = batch_width(&batch.iter().map(|&i| widths[i]).collect::<Vec<_>>());
                let slot = (3 * LINE_HEIGHT * width) as usize;
                let mut input = vec![0.0f32; slot * batch.len()];
                for (k, &i) in batch.iter().enumerate() {
                    write_line_input(&crops[i], widths[i], width, &mut input[k * slot..(k + 1) * slot]);
                }
                self.recognise_input(input, batch.len(), width as usize)
            })
            .collect::<Result<Vec<_>, OcrError>>()?;
        let mut out = vec![DecodedLine::default(); crops.len()];
        for (batch, lines) in batches.iter().zip(decoded) {
            for (&i, line) in batch.iter().zip(lines) {
                out[i] = line;
            }
        }
        Ok(out)
    }

    /// Decodes a batch input made by [`write_line_input`] (`lines` × 3 × 48 × `width`).
    pub fn recognise_input(&self, input: Vec<f32>, lines: usize, width: usize) -> Result<Vec<DecodedLine>, OcrError> {
        let (best, best_prob, steps) = self.best_classes(input, lines, width)?;
        Ok((0..lines).map(|k| ctc_greedy(&best[k * steps..(k + 1) * steps], &best_prob[k * steps..(k + 1) * steps], &self.dictionary)).collect())
    }

    /// The best class and its probability at every output step of each line, and the steps
    /// per line.
    pub fn best_classes(&self, input: Vec<f32>, lines: usize, width: usize) -> Result<(Vec<usize>, Vec<f32>, usize), OcrError> {
        let shape = [lines, 3, LINE_HEIGHT as usize, width];
        let check = |classes: usize| match classes == self.dictionary.len() {
            true => Ok(()),
            false => Err(OcrError::Dictionary { classes, dictionary: DICTIONARY_FILE.into(), entries: self.dictionary.len() }),
        };
        match &self.networks {
            Networks::Burn { recogniser, device, .. } => {
                let probs = recogniser.forward(Tensor::<4>::from_data(TensorData::new(input, shape), device));
                let [_, steps, classes] = probs.dims();
                check(classes)?;
                let (values, indices) = probs.max_dim_with_indices(2);
                let err = |e| OcrError::Compute(format!("{e:?}"));
                let best_prob = values.into_data().convert::<f32>().try_into_vec::<f32>().map_err(err)?;
                let best = indices.into_data().convert::<i64>().try_into_vec::<i64>().map_err(err)?.into_iter().map(|i| i.max(0) as usize).collect();
                Ok((best, best_prob, steps))
            }
            Networks::Native { recogniser, .. } => {
                let probs = recogniser.run(NativeTensor::new(shape.to_vec(), input)?)?;
                let [_, steps, classes] = probs.shape[..] else {
                    return Err(OcrError::Compute(format!("the recogniser's output has shape {:?}", probs.shape)));
                };
                check(classes)?;
                // The first of equal maxima, as burn's `max_dim_with_indices` picks.
                let (best, best_prob) = probs
                    .data
                    .chunks(classes.max(1))
                    .map(|row| row.iter().enumerate().fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| if v > bv { (i, v) } else { (bi, bv) }))
                    .unzip();
                Ok((best, best_prob, steps))
            }
        }
    }
}

/// Loads a generated network's weights from the burnpack converted from `onnx`.
fn load_weights<M: ModuleSnapshot>(network: &mut M, onnx: &Path) -> Result<(), OcrError> {
    let path = weights::burnpack_for(onnx)?;
    let mut store = BurnpackStore::from_file(&path);
    network.load_from(&mut store).map(|_| ()).map_err(|e| OcrError::Load { path, reason: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str, confidence: f32) -> DecodedLine {
        let chars = text.chars().enumerate().map(|(i, ch)| DecodedChar { ch, steps: (i, i + 1), confidence }).collect();
        DecodedLine { chars, confidence }
    }

    #[test]
    fn lines_of_punctuation_or_low_confidence_are_dropped() {
        assert!(worth_keeping(&line("Total 12", 0.9)));
        assert!(worth_keeping(&line("$4", 0.5)));
        assert!(!worth_keeping(&line("Total 12", 0.49)));
        assert!(!worth_keeping(&line("-", 0.99)));
        assert!(!worth_keeping(&line("", 1.0)));
    }
}
