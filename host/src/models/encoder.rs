//! Text to vectors: per-token vectors for late interaction and mean-pooled sentence vectors,
//! from the embedded all-MiniLM-L6-v2 (burn) and its tokenizer.

use std::path::Path;

use burn::prelude::Device;
use tokenizers::Tokenizer;

use super::bert::{AttentionFn, Bert, ModelError};
use super::bert_cpu::CpuBert;
use crate::config::CpuPrecision;

/// Longest window the model sees, special tokens included (sentence-transformers' limit).
pub const MAX_WINDOW: usize = 256;
/// Tokens two neighbouring windows share, so that no token is encoded without context.
const WINDOW_OVERLAP: usize = 32;
/// Token budget of one forward pass (windows are batched up to it).
const BATCH_TOKENS: usize = 4096;

/// The per-token vectors of one text, L2-normalised, `dim` values per token.
#[derive(Debug, Clone, Default)]
pub struct TokenVectors {
    pub dim: usize,
    pub vectors: Vec<f32>,
    /// The word pieces the vectors belong to, in order.
    pub tokens: Vec<String>,
}

impl TokenVectors {
    /// Number of token vectors.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// The text encoder.
pub struct TextEncoder {
    network: Network,
    tokenizer: Tokenizer,
    cls: u32,
    sep: u32,
}

/// The network behind the encoder: burn's on a GPU (or wherever a caller asks for it), the
/// native one on the CPU.
enum Network {
    Burn { bert: Box<Bert>, attention: Box<AttentionFn> },
    Cpu(CpuBert),
}

/// One window of token ids to encode, and where its vectors go.
struct Window {
    /// Index of the text it belongs to.
    text: usize,
    /// [CLS] content [SEP]
    ids: Vec<u32>,
    /// Positions in `ids` whose vectors are kept, with their index among the text's tokens.
    keep: Vec<(usize, usize)>,
}

impl TextEncoder {
    /// Loads the model and tokenizer from `dir` (as set-up unpacks them) onto `device`: burn's
    /// CPU device gets the native CPU network, any other burn's with its own attention.
    pub fn load(dir: &Path, device: &Device) -> Result<TextEncoder, ModelError> {
        if *device == Device::flex() {
            return TextEncoder::load_native(dir, CpuPrecision::F32);
        }
        TextEncoder::load_with_attention(dir, device, Box::new(super::bert::burn_attention))
    }

    /// Loads the native CPU network with its matrix products in `precision` (f32 where the CPU
    /// cannot run int8 quickly; [`TextEncoder::precision`] says which it got).
    pub fn load_native(dir: &Path, precision: CpuPrecision) -> Result<TextEncoder, ModelError> {
        TextEncoder::with_network(dir, Network::Cpu(CpuBert::load(dir)?.with_precision(precision)))
    }

    /// Loads burn's network on `device` with a chosen attention implementation.
    pub fn load_with_attention(dir: &Path, device: &Device, attention: Box<AttentionFn>) -> Result<TextEncoder, ModelError> {
        TextEncoder::with_network(dir, Network::Burn { bert: Box::new(Bert::load(dir, device)?), attention })
    }

    fn with_network(dir: &Path, network: Network) -> Result<TextEncoder, ModelError> {
        let path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&path).map_err(|e| ModelError::Tokenizer(format!("{}: {e}", path.display())))?;
        tokenizer.with_padding(None);
        tokenizer.with_truncation(None).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        let id = |t: &str| tokenizer.token_to_id(t).ok_or_else(|| ModelError::Tokenizer(format!("no {t} token")));
        let (cls, sep) = (id("[CLS]")?, id("[SEP]")?);
        Ok(TextEncoder { network, tokenizer, cls, sep })
    }

    /// The arithmetic of the matrix products (burn's networks run f32).
    pub fn precision(&self) -> CpuPrecision {
        match &self.network {
            Network::Burn { .. } => CpuPrecision::F32,
            Network::Cpu(bert) => bert.precision(),
        }
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        match &self.network {
            Network::Burn { bert, .. } => bert.config().hidden_size,
            Network::Cpu(bert) => bert.config().hidden_size,
        }
    }

    /// Sentence vectors, as sentence-transformers makes them: the text truncated to
    /// MAX_WINDOW tokens, hidden states mean-pooled over all its tokens, L2-normalised.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut windows = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let (ids, _) = self.word_pieces(text)?;
            let mut w = vec![self.cls];
            w.extend(ids.iter().take(MAX_WINDOW - 2));
            w.push(self.sep);
            let keep = (0..w.len()).map(|p| (p, p)).collect();
            windows.push(Window { text: i, ids: w, keep });
        }
        let dim = self.dim();
        let mut out: Vec<Vec<f32>> = windows.iter().map(|_| vec![0.0; dim]).collect();
        let mut counts = vec![0usize; windows.len()];
        self.run(&windows, |w, _, v| {
            for (a, b) in out[w.text].iter_mut().zip(v) {
                *a += b;
            }
            counts[w.text] += 1;
        })?;
        for (v, n) in out.iter_mut().zip(counts) {
            v.iter_mut().for_each(|x| *x /= n.max(1) as f32);
            normalize(v);
        }
        Ok(out)
    }

    /// Per-token vectors of each text (special tokens and pure punctuation left out), long
    /// texts split into overlapping windows; each token keeps the vector from the window
    /// where it sits furthest from an edge.
    pub fn token_vectors(&self, texts: &[&str]) -> Result<Vec<TokenVectors>, ModelError> {
        let dim = self.dim();
        let mut results = Vec::with_capacity(texts.len());
        let mut windows = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            let (ids, pieces) = self.word_pieces(text)?;
            let kept: Vec<usize> = (0..ids.len()).filter(|&t| pieces[t].chars().any(char::is_alphanumeric)).collect();
            let mut slot = vec![usize::MAX; ids.len()];
            for (k, &t) in kept.iter().enumerate() {
                slot[t] = k;
            }
            results.push(TokenVectors { dim, vectors: vec![0.0; kept.len() * dim], tokens: kept.iter().map(|&t| pieces[t].clone()).collect() });
            let content = MAX_WINDOW - 2;
            let stride = content - WINDOW_OVERLAP;
            let mut start = 0;
            loop {
                let end = (start + content).min(ids.len());
                // Tokens shared with a neighbour go to the window where they are further in.
                let lo = if start == 0 { 0 } else { start + WINDOW_OVERLAP / 2 };
                let hi = if end == ids.len() { end } else { end - WINDOW_OVERLAP / 2 };
                let mut w = vec![self.cls];
                w.extend(&ids[start..end]);
                w.push(self.sep);
                let keep = (lo..hi).filter(|&t| slot[t] != usize::MAX).map(|t| (t - start + 1, slot[t])).collect();
                windows.push(Window { text: i, ids: w, keep });
                if end >= ids.len() {
                    break;
                }
                start += stride;
            }
        }
        self.run(&windows, |w, k, v| {
            let dst = &mut results[w.text].vectors[k * dim..(k + 1) * dim];
            dst.copy_from_slice(v);
            normalize(dst);
        })?;
        Ok(results)
    }

    /// [`TextEncoder::embed`] and [`TextEncoder::token_vectors`] of each text. A text that fits
    /// one window (most artifacts: a unit, a query, a card) is encoded once, since both come
    /// from the hidden states of the same window; longer texts take the two passes.
    pub fn embed_with_token_vectors(&self, texts: &[&str]) -> Result<(Vec<Vec<f32>>, Vec<TokenVectors>), ModelError> {
        let dim = self.dim();
        let mut embeddings: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        let mut tokens: Vec<TokenVectors> = vec![TokenVectors::default(); texts.len()];
        let mut long = Vec::new();
        let mut windows = Vec::new();
        // For each text that fits a window: the token-vector slot of each position (usize::MAX:
        // none).
        let mut slots: Vec<Vec<usize>> = vec![Vec::new(); texts.len()];
        for (i, text) in texts.iter().enumerate() {
            let (ids, pieces) = self.word_pieces(text)?;
            if ids.len() > MAX_WINDOW - 2 {
                long.push(i);
                continue;
            }
            let mut slot = vec![usize::MAX; ids.len() + 2];
            let mut kept = Vec::new();
            for (t, piece) in pieces.iter().enumerate() {
                if piece.chars().any(char::is_alphanumeric) {
                    slot[t + 1] = kept.len();
                    kept.push(piece.clone());
                }
            }
            tokens[i] = TokenVectors { dim, vectors: vec![0.0; kept.len() * dim], tokens: kept };
            embeddings[i] = vec![0.0; dim];
            let mut w = vec![self.cls];
            w.extend(&ids);
            w.push(self.sep);
            let keep = (0..w.len()).map(|p| (p, p)).collect();
            windows.push(Window { text: i, ids: w, keep });
            slots[i] = slot;
        }
        self.run(&windows, |w, p, v| {
            for (a, b) in embeddings[w.text].iter_mut().zip(v) {
                *a += b;
            }
            let slot = slots[w.text][p];
            if slot != usize::MAX {
                let dst = &mut tokens[w.text].vectors[slot * dim..(slot + 1) * dim];
                dst.copy_from_slice(v);
                normalize(dst);
            }
        })?;
        for w in &windows {
            let v = &mut embeddings[w.text];
            v.iter_mut().for_each(|x| *x /= w.ids.len() as f32);
            normalize(v);
        }
        if !long.is_empty() {
            let long_texts: Vec<&str> = long.iter().map(|&i| texts[i]).collect();
            for ((&i, e), t) in long.iter().zip(self.embed(&long_texts)?).zip(self.token_vectors(&long_texts)?) {
                embeddings[i] = e;
                tokens[i] = t;
            }
        }
        Ok((embeddings, tokens))
    }

    /// How many token vectors [`TextEncoder::token_vectors`] gives `text`, without running
    /// the network.
    pub fn vector_count(&self, text: &str) -> Result<usize, ModelError> {
        Ok(self.word_pieces(text)?.1.iter().filter(|p| p.chars().any(char::is_alphanumeric)).count())
    }

    /// Tokens the model sees for these texts in `embed` (special tokens included).
    pub fn count_tokens(&self, texts: &[&str]) -> Result<usize, ModelError> {
        let mut n = 0;
        for text in texts {
            n += self.word_pieces(text)?.0.len().min(MAX_WINDOW - 2) + 2;
        }
        Ok(n)
    }

    fn word_pieces(&self, text: &str) -> Result<(Vec<u32>, Vec<String>), ModelError> {
        let enc = self.tokenizer.encode(text, false).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        Ok((enc.get_ids().to_vec(), enc.get_tokens().to_vec()))
    }

    /// Encodes windows in length-sorted batches; `sink(window, keep index, vector)` receives the
    /// hidden state of every kept position (for `embed`, every position).
    fn run(&self, windows: &[Window], mut sink: impl FnMut(&Window, usize, &[f32])) -> Result<(), ModelError> {
        let dim = self.dim();
        let mut order: Vec<usize> = (0..windows.len()).collect();
        order.sort_by_key(|&i| windows[i].ids.len());
        let mut i = 0;
        while i < order.len() {
            let seq = windows[order[i]].ids.len();
            let mut j = i;
            while j < order.len() && (j - i + 1) * windows[order[j]].ids.len().max(seq) <= BATCH_TOKENS.max(seq) {
                j += 1;
            }
            let batch: Vec<&Window> = order[i..j.max(i + 1)].iter().map(|&w| &windows[w]).collect();
            let (hidden, starts) = self.hidden_states(&batch)?;
            for (win, start) in batch.iter().zip(starts) {
                for &(pos, k) in &win.keep {
                    let at = (start + pos) * dim;
                    sink(win, k, &hidden[at..at + dim]);
                }
            }
            i += batch.len();
        }
        Ok(())
    }

    /// Hidden states of a batch of windows, and the row where each window's first token is.
    fn hidden_states(&self, batch: &[&Window]) -> Result<(Vec<f32>, Vec<usize>), ModelError> {
        match &self.network {
            Network::Cpu(bert) => {
                let seqs: Vec<&[u32]> = batch.iter().map(|w| w.ids.as_slice()).collect();
                let starts = seqs.iter().scan(0, |row, s| {
                    let start = *row;
                    *row += s.len();
                    Some(start)
                });
                Ok((bert.forward(&seqs)?, starts.collect()))
            }
            Network::Burn { bert, attention } => {
                let seq = batch.iter().map(|w| w.ids.len()).max().unwrap_or(1);
                let mut ids = vec![0u32; batch.len() * seq];
                let mut mask = vec![0u32; batch.len() * seq];
                for (b, w) in batch.iter().enumerate() {
                    ids[b * seq..b * seq + w.ids.len()].copy_from_slice(&w.ids);
                    mask[b * seq..b * seq + w.ids.len()].iter_mut().for_each(|m| *m = 1);
                }
                let hidden = bert.forward(&ids, &mask, batch.len(), seq, attention.as_ref())?;
                Ok((hidden, (0..batch.len()).map(|b| b * seq).collect()))
            }
        }
    }
}

fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}
