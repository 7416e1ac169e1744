//! The recogniser's side of OCR: line crops into its input, and its per-step probabilities
//! into text with each character's horizontal extent (CTC's greedy decoding).

use std::path::Path;

use image::RgbImage;

use super::OcrError;

/// The recogniser's input height.
pub const LINE_HEIGHT: u32 = 48;
/// PaddleOCR pads every line to at least this width (its input shape 3 × 48 × 320).
pub const MIN_LINE_WIDTH: u32 = 320;
/// The widest line input; longer lines are squeezed (PaddleOCR's `max_side_limit` is 4000).
pub const MAX_LINE_WIDTH: u32 = 3200;
/// Input columns per output step: the network downsamples the width by 8.
pub const STEP_COLUMNS: u32 = 8;

/// The recogniser's characters, index-aligned with its output classes; class 0 is CTC's blank.
#[derive(Debug, Clone)]
pub struct Dictionary {
    chars: Vec<char>,
}

impl Dictionary {
    /// Reads `ppocr_keys_v5.txt`: one character a line, the blank's placeholder first.
    pub fn load(path: &Path) -> Result<Dictionary, OcrError> {
        let text = std::fs::read_to_string(path).map_err(|_| OcrError::Missing(path.to_path_buf()))?;
        Ok(Dictionary::parse(&text))
    }

    /// The dictionary in `text`. A line holds one character; an empty line (the file's last)
    /// is not a class.
    pub fn parse(text: &str) -> Dictionary {
        let mut chars: Vec<char> = text.split('\n').map(|line| line.chars().next().unwrap_or('\0')).collect();
        if text.ends_with('\n') {
            chars.pop();
        }
        Dictionary { chars }
    }

    /// Number of classes, blank included.
    pub fn len(&self) -> usize {
        self.chars.len()
    }

    /// Whether it has no classes.
    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    /// The character of a class (None for the blank and for classes past the end).
    pub fn char_of(&self, class: usize) -> Option<char> {
        if class == 0 { None } else { self.chars.get(class).copied() }
    }
}

/// The width a crop of `width` × `height` takes at the recogniser's height.
pub fn scaled_width(width: u32, height: u32) -> u32 {
    ((LINE_HEIGHT as f32 * width as f32 / height.max(1) as f32).ceil() as u32).clamp(1, MAX_LINE_WIDTH)
}

/// The input width for a batch of lines: the widest line's, and at least PaddleOCR's 320.
pub fn batch_width(scaled_widths: &[u32]) -> u32 {
    scaled_widths.iter().copied().max().unwrap_or(0).max(MIN_LINE_WIDTH)
}

/// Writes one line into its slot of a batch (3 × 48 × `width`, channels first, blue-green-red):
/// the crop resized to `scaled` × 48 and normalised to [-1, 1]; the columns past it stay as
/// they are (zeros: PaddleOCR's padding).
pub fn write_line_input(crop: &RgbImage, scaled: u32, width: u32, slot: &mut [f32]) {
    let resized = image::imageops::resize(crop, scaled.min(width), LINE_HEIGHT, image::imageops::FilterType::Triangle);
    let plane = (LINE_HEIGHT * width) as usize;
    for (x, y, pixel) in resized.enumerate_pixels() {
        let at = (y * width + x) as usize;
        for c in 0..3 {
            slot[c * plane + at] = (pixel[2 - c] as f32 / 255.0 - 0.5) / 0.5;
        }
    }
}

/// A recognised character: where its run of output steps lies, and its probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodedChar {
    pub ch: char,
    /// First and one-past-last output step of the character's run.
    pub steps: (usize, usize),
    pub confidence: f32,
}

/// A recognised line: its characters and its confidence (their mean probability).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DecodedLine {
    pub chars: Vec<DecodedChar>,
    pub confidence: f32,
}

impl DecodedLine {
    /// The line's text.
    pub fn text(&self) -> String {
        self.chars.iter().map(|c| c.ch).collect()
    }
}

/// CTC's greedy decoding of one line from each step's best class and its probability: runs of
/// one class make one character, blanks separate repeats and are dropped. A character's
/// probability is the first of its run, as PaddleOCR's decoder counts it.
pub fn ctc_greedy(best: &[usize], best_prob: &[f32], dictionary: &Dictionary) -> DecodedLine {
    let mut chars: Vec<DecodedChar> = Vec::new();
    let mut previous = 0usize;
    for (step, (&class, &prob)) in best.iter().zip(best_prob).enumerate() {
        if class == previous && class != 0 {
            if let Some(last) = chars.last_mut() {
                last.steps.1 = step + 1;
            }
            continue;
        }
        previous = class;
        if let Some(ch) = dictionary.char_of(class) {
            chars.push(DecodedChar { ch, steps: (step, step + 1), confidence: prob });
        }
    }
    let confidence = if chars.is_empty() { 0.0 } else { chars.iter().map(|c| c.confidence).sum::<f32>() / chars.len() as f32 };
    DecodedLine { chars, confidence }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dictionary() -> Dictionary {
        Dictionary::parse("blank\na\nb\nc\n \n")
    }

    #[test]
    fn the_dictionary_keeps_the_blank_first_and_the_space_last() {
        let d = dictionary();
        assert_eq!(d.len(), 5);
        assert_eq!((d.char_of(0), d.char_of(1), d.char_of(4), d.char_of(5)), (None, Some('a'), Some(' '), None));
    }

    #[test]
    fn repeats_collapse_unless_a_blank_separates_them() {
        // a a _ a b b _ _ c  ->  "aabc" with the runs' steps.
        let best = [1, 1, 0, 1, 2, 2, 0, 0, 3];
        let prob = [0.9, 0.5, 0.99, 0.8, 0.7, 0.6, 0.9, 0.9, 0.4];
        let line = ctc_greedy(&best, &prob, &dictionary());
        assert_eq!(line.text(), "aabc");
        assert_eq!(line.chars.iter().map(|c| c.steps).collect::<Vec<_>>(), vec![(0, 2), (3, 4), (4, 6), (8, 9)]);
        assert!((line.confidence - (0.9 + 0.8 + 0.7 + 0.4) / 4.0).abs() < 1e-6);
        assert_eq!(ctc_greedy(&[0, 0], &[1.0, 1.0], &dictionary()), DecodedLine::default());
    }

    #[test]
    fn lines_keep_their_aspect_and_pad_to_the_batch() {
        assert_eq!(scaled_width(200, 24), 400);
        assert_eq!(scaled_width(10, 48), 10);
        assert_eq!(scaled_width(100_000, 10), MAX_LINE_WIDTH);
        assert_eq!(batch_width(&[100, 200]), MIN_LINE_WIDTH);
        assert_eq!(batch_width(&[100, 500]), 500);
        let crop = RgbImage::from_pixel(20, 48, image::Rgb([255, 255, 255]));
        let width = 32;
        let mut slot = vec![0.0f32; (3 * LINE_HEIGHT * width) as usize];
        write_line_input(&crop, 20, width, &mut slot);
        assert_eq!(slot[19], 1.0, "white is 1 inside the line");
        assert_eq!(slot[20], 0.0, "padding stays 0");
    }
}
