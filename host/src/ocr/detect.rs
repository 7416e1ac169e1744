//! The detector's side of OCR: a page image into the network's input, and its probability map
//! into text-line boxes (DB's post-processing).

use image::RgbImage;

/// A box in image pixels, origin top-left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PixelBox {
    pub x0: f32,
    pub y0: f32,
    pub x1: f32,
    pub y1: f32,
}

impl PixelBox {
    pub fn width(&self) -> f32 {
        self.x1 - self.x0
    }

    pub fn height(&self) -> f32 {
        self.y1 - self.y0
    }
}

/// PaddleOCR's DB post-processing settings for PP-OCRv5, its defaults.
#[derive(Debug, Clone, Copy)]
pub struct DbSettings {
    /// A pixel is text when its probability exceeds this.
    pub threshold: f32,
    /// A box is kept when the mean probability inside it exceeds this.
    pub box_threshold: f32,
    /// How far a shrunk text kernel is grown back: area × ratio / perimeter.
    pub unclip_ratio: f32,
    /// Boxes with a shorter side (in map pixels) are noise.
    pub min_size: f32,
    /// At most this many components are considered, largest first.
    pub max_candidates: usize,
}

impl Default for DbSettings {
    fn default() -> Self {
        DbSettings { threshold: 0.3, box_threshold: 0.6, unclip_ratio: 1.5, min_size: 3.0, max_candidates: 1000 }
    }
}

/// ImageNet's mean and deviation, in the blue-green-red order PaddleOCR reads images in.
const DET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const DET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// The detector's input size for an image: each side scaled by `scale` and rounded to a
/// multiple of 32 (at least 32), as PaddleOCR's `DetResizeForTest` does.
pub fn input_size(width: u32, height: u32, scale: f32) -> (u32, u32) {
    let round32 = |v: u32| (((v as f32 * scale / 32.0).round() as u32) * 32).max(32);
    (round32(width), round32(height))
}

/// The detector's input: `image` resized to `width` × `height`, normalised, channels first in
/// blue-green-red order.
pub fn detector_input(image: &RgbImage, width: u32, height: u32) -> Vec<f32> {
    let resized = if image.dimensions() == (width, height) {
        image.clone()
    } else {
        image::imageops::resize(image, width, height, image::imageops::FilterType::Triangle)
    };
    let plane = (width * height) as usize;
    let mut out = vec![0.0f32; 3 * plane];
    for (i, pixel) in resized.pixels().enumerate() {
        for c in 0..3 {
            // Channel c of the input is BGR's c: the pixel's channel 2 - c.
            out[c * plane + i] = (pixel[2 - c] as f32 / 255.0 - DET_MEAN[c]) / DET_STD[c];
        }
    }
    out
}

/// Text-line boxes from the detector's probability map (`width` × `height`, row after row),
/// scaled to an image of `image_width` × `image_height`.
///
/// PaddleOCR traces each component's contour and fits a rotated rectangle; here each
/// 8-connected component gives its axis-aligned rectangle, which is the same for the upright
/// text of scanned pages and looser for slanted lines. Scoring ("fast": the mean probability
/// inside the rectangle), the minimum size and the unclip distance are PaddleOCR's.
pub fn text_boxes(prob: &[f32], width: usize, height: usize, image_width: u32, image_height: u32, settings: &DbSettings) -> Vec<PixelBox> {
    let mut components = components(prob, width, height, settings.threshold);
    components.sort_by_key(|c| std::cmp::Reverse(c.pixels));
    components.truncate(settings.max_candidates);
    let (sx, sy) = (image_width as f32 / width as f32, image_height as f32 / height as f32);
    let mut boxes = Vec::new();
    for c in components {
        // Contour points lie on pixel centres, so a component one pixel wide has width 0.
        let (w, h) = ((c.x1 - c.x0) as f32, (c.y1 - c.y0) as f32);
        if w.min(h) < settings.min_size {
            continue;
        }
        if mean_in_rect(prob, width, &c) < settings.box_threshold {
            continue;
        }
        let distance = w * h * settings.unclip_ratio / (2.0 * (w + h));
        let (w2, h2) = (w + 2.0 * distance, h + 2.0 * distance);
        if w2.min(h2) < settings.min_size + 2.0 {
            continue;
        }
        let clamp = |v: f32, limit: u32| v.round().clamp(0.0, limit as f32);
        let b = PixelBox {
            x0: clamp((c.x0 as f32 - distance) * sx, image_width),
            y0: clamp((c.y0 as f32 - distance) * sy, image_height),
            x1: clamp((c.x1 as f32 + distance) * sx, image_width),
            y1: clamp((c.y1 as f32 + distance) * sy, image_height),
        };
        if b.width() >= 1.0 && b.height() >= 1.0 {
            boxes.push(b);
        }
    }
    boxes
}

/// One connected component of above-threshold pixels: its bounds (inclusive) and size.
#[derive(Debug, Clone, Copy)]
struct Component {
    x0: usize,
    y0: usize,
    x1: usize,
    y1: usize,
    pixels: usize,
}

/// The 8-connected components of the pixels above `threshold`, by a flood fill per component.
fn components(prob: &[f32], width: usize, height: usize, threshold: f32) -> Vec<Component> {
    let mut seen = vec![false; width * height];
    let mut stack = Vec::new();
    let mut out = Vec::new();
    for start in 0..width * height {
        if seen[start] || prob[start] <= threshold {
            continue;
        }
        seen[start] = true;
        stack.push(start);
        let mut c = Component { x0: start % width, y0: start / width, x1: start % width, y1: start / width, pixels: 0 };
        while let Some(i) = stack.pop() {
            let (x, y) = (i % width, i / width);
            c.x0 = c.x0.min(x);
            c.x1 = c.x1.max(x);
            c.y0 = c.y0.min(y);
            c.y1 = c.y1.max(y);
            c.pixels += 1;
            for ny in y.saturating_sub(1)..=(y + 1).min(height - 1) {
                for nx in x.saturating_sub(1)..=(x + 1).min(width - 1) {
                    let j = ny * width + nx;
                    if !seen[j] && prob[j] > threshold {
                        seen[j] = true;
                        stack.push(j);
                    }
                }
            }
        }
        out.push(c);
    }
    out
}

/// The mean probability over a component's rectangle, edges included.
fn mean_in_rect(prob: &[f32], width: usize, c: &Component) -> f32 {
    let mut sum = 0.0f64;
    for y in c.y0..=c.y1 {
        sum += prob[y * width + c.x0..=y * width + c.x1].iter().map(|&v| v as f64).sum::<f64>();
    }
    (sum / ((c.x1 - c.x0 + 1) * (c.y1 - c.y0 + 1)) as f64) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_with(width: usize, height: usize, rects: &[(usize, usize, usize, usize, f32)]) -> Vec<f32> {
        let mut prob = vec![0.01f32; width * height];
        for &(x0, y0, x1, y1, v) in rects {
            for y in y0..=y1 {
                for x in x0..=x1 {
                    prob[y * width + x] = v;
                }
            }
        }
        prob
    }

    #[test]
    fn a_confident_kernel_becomes_a_box_grown_by_the_unclip_distance() {
        let prob = map_with(64, 32, &[(10, 8, 40, 14, 0.9)]);
        let boxes = text_boxes(&prob, 64, 32, 128, 64, &DbSettings::default());
        assert_eq!(boxes.len(), 1);
        // w = 30, h = 6: distance = 30 * 6 * 1.5 / 72 = 3.75 map pixels; the image is twice the map.
        let b = boxes[0];
        assert_eq!(
            (b.x0, b.y0, b.x1, b.y1),
            (((10.0 - 3.75) * 2.0f32).round(), ((8.0 - 3.75) * 2.0f32).round(), ((40.0 + 3.75) * 2.0f32).round(), ((14.0 + 3.75) * 2.0f32).round())
        );
    }

    #[test]
    fn faint_specks_and_separate_lines_are_told_apart() {
        // Two lines, a faint region above threshold but below the box threshold, and a speck.
        let prob = map_with(80, 40, &[(5, 5, 60, 10, 0.95), (5, 20, 50, 25, 0.8), (65, 30, 75, 36, 0.4), (2, 35, 3, 36, 0.99)]);
        let mut boxes = text_boxes(&prob, 80, 40, 80, 40, &DbSettings::default());
        boxes.sort_by(|a, b| a.y0.total_cmp(&b.y0));
        assert_eq!(boxes.len(), 2, "{boxes:?}");
        assert!(boxes[0].y1 < boxes[1].y0 + 4.0 && boxes[0].x1 > boxes[1].x1);
    }

    #[test]
    fn diagonal_neighbours_are_one_component() {
        let mut prob = vec![0.0f32; 16];
        prob[0] = 0.9;
        prob[5] = 0.9;
        prob[10] = 0.9;
        let c = components(&prob, 4, 4, 0.3);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].x0, c[0].y0, c[0].x1, c[0].y1, c[0].pixels), (0, 0, 2, 2, 3));
    }

    #[test]
    fn input_sides_are_multiples_of_32() {
        assert_eq!(input_size(1000, 700, 1.0), (992, 704));
        assert_eq!(input_size(10, 10, 1.0), (32, 32));
        let image = RgbImage::from_pixel(40, 20, image::Rgb([255, 0, 0]));
        let input = detector_input(&image, 64, 32);
        assert_eq!(input.len(), 3 * 64 * 32);
        // Red sits in the third (red) channel of BGR.
        assert!((input[0] - (0.0 - 0.485) / 0.229).abs() < 1e-5);
        assert!((input[2 * 64 * 32] - (1.0 - 0.406) / 0.225).abs() < 1e-5);
    }
}
