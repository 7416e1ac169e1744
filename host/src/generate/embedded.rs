//! The embedded generator: SmolLM2-135M-Instruct (or any llama GGUF) run by burn.

use std::path::Path;

use crate::models::{
    CausalAttentionFn, ChatTokenizer, ChatTurn, ComputeDevice, KvCache, Llama, LogitsFor, ModelError, NativeDecoder, burn_causal_attention,
    wgsl_causal_attention,
};
use crate::models::gguf::GgufFile;

use super::sampling::{Sampler, log_prob};
use super::{ChoiceScore, FinishReason, GenerateError, GenerateRequest, Generation, Generator, Message};

/// A GGUF decoder and its tokenizer on one burn device.
pub struct EmbeddedGenerator {
    model: Llama,
    /// Single-token steps on the CPU with quantised weights (None on wgpu).
    native: Option<NativeDecoder>,
    tokenizer: ChatTokenizer,
    attention: Box<CausalAttentionFn>,
    name: String,
    wgpu: bool,
}

impl EmbeddedGenerator {
    /// Loads the model in `path` onto `compute` (weights dequantised to f32).
    pub fn load(path: &Path, compute: &ComputeDevice) -> Result<EmbeddedGenerator, ModelError> {
        let file = GgufFile::open(path)?;
        let tokenizer = ChatTokenizer::from_gguf(&file)?;
        let model = Llama::load(&file, &compute.device)?;
        let native = if compute.wgpu { None } else { Some(NativeDecoder::load(&file, model.config())?) };
        let name = file.string("general.name").unwrap_or("model").to_string();
        // On wgpu attention runs through the WGSL kernel; on the CPU burn's own op is the fast one.
        let attention: Box<CausalAttentionFn> = if compute.wgpu { Box::new(wgsl_causal_attention) } else { Box::new(burn_causal_attention) };
        Ok(EmbeddedGenerator { model, native, tokenizer, attention, name, wgpu: compute.wgpu })
    }

    /// Replaces how attention is computed (the fused WGSL kernel on wgpu, for instance).
    pub fn with_attention(mut self, attention: Box<CausalAttentionFn>) -> EmbeddedGenerator {
        self.attention = attention;
        self
    }

    /// The tokenizer and chat template.
    pub fn tokenizer(&self) -> &ChatTokenizer {
        &self.tokenizer
    }

    /// The token ids of a conversation's prompt, the assistant's turn opened.
    pub fn prompt_ids(&self, messages: &[Message]) -> Result<Vec<u32>, ModelError> {
        let turns: Vec<ChatTurn> = messages.iter().map(|m| m.turn.clone()).collect();
        self.tokenizer.encode(&self.tokenizer.render(&turns, true)?)
    }

    /// Next-token logits after running `tokens` on top of `cache`: the last position's, or all.
    pub fn logits(&self, tokens: &[u32], cache: &mut KvCache, which: LogitsFor) -> Result<Vec<f32>, ModelError> {
        if let (Some(native), [token]) = (&self.native, tokens) {
            return native.step(*token, cache);
        }
        let t = self.model.forward(tokens, cache, which, self.attention.as_ref())?;
        t.into_data().convert::<f32>().try_into_vec::<f32>().map_err(|e| ModelError::Compute(format!("{e:?}")))
    }

    /// Greedy or sampled continuation of raw token ids (no chat template).
    pub fn generate_ids(&self, prompt: &[u32], request: &GenerateRequest, on_text: &mut dyn FnMut(&str)) -> Result<(Vec<u32>, Generation), GenerateError> {
        let context = self.model.config().context;
        if prompt.is_empty() || prompt.len() >= context {
            return Err(GenerateError::PromptTooLong { tokens: prompt.len(), context });
        }
        let mut sampler = Sampler::new(request.sampling);
        let mut cache = KvCache::default();
        let mut logits = self.logits(prompt, &mut cache, LogitsFor::Last)?;
        let mut ids: Vec<u32> = Vec::new();
        let mut emitted = String::new();
        let mut finish = FinishReason::Length;
        let mut text = String::new();
        while ids.len() < request.max_tokens {
            let next = sampler.next(&logits);
            if self.tokenizer.eos.contains(&next) {
                finish = FinishReason::Stop;
                break;
            }
            ids.push(next);
            text = self.tokenizer.decode(&ids)?;
            if let Some(cut) = request.stop.iter().filter(|s| !s.is_empty()).filter_map(|s| text.find(s.as_str())).min() {
                text.truncate(cut);
                finish = FinishReason::Stop;
                break;
            }
            let ready = text.len() - held_back(&text, &request.stop);
            if ready > emitted.len() && text.starts_with(&emitted) {
                on_text(&text[emitted.len()..ready]);
                emitted = text[..ready].to_string();
            }
            if cache.len() + 1 >= context || ids.len() == request.max_tokens {
                break;
            }
            logits = self.logits(&[next], &mut cache, LogitsFor::Last)?;
        }
        if text.len() > emitted.len() && text.starts_with(&emitted) {
            on_text(&text[emitted.len()..]);
        }
        let generation = Generation { text, prompt_tokens: prompt.len(), completion_tokens: ids.len(), finish };
        Ok((ids, generation))
    }
}

/// How many bytes at the end of `text` to keep back: an unfinished UTF-8 character (decoded
/// as U+FFFD) or the start of a stop string that the next token may complete.
fn held_back(text: &str, stop: &[String]) -> usize {
    if text.ends_with('\u{FFFD}') {
        return text.len() - text.trim_end_matches('\u{FFFD}').len();
    }
    stop.iter()
        .flat_map(|s| (1..s.len()).filter(|&n| s.is_char_boundary(n)).map(move |n| &s[..n]))
        .filter(|prefix| text.ends_with(prefix))
        .map(str::len)
        .max()
        .unwrap_or(0)
}

impl Generator for EmbeddedGenerator {
    fn generate(&self, request: &GenerateRequest, on_text: &mut dyn FnMut(&str)) -> Result<Generation, GenerateError> {
        let prompt = self.prompt_ids(&request.messages)?;
        Ok(self.generate_ids(&prompt, request, on_text)?.1)
    }

    fn score_choices(&self, messages: &[Message], choices: &[String]) -> Result<Vec<ChoiceScore>, GenerateError> {
        let prompt = self.prompt_ids(messages)?;
        let context = self.model.config().context;
        let mut cache = KvCache::default();
        let first = self.logits(&prompt, &mut cache, LogitsFor::Last)?;
        let vocab = first.len();
        let mut scores = Vec::with_capacity(choices.len());
        for choice in choices {
            let ids = self.tokenizer.encode(choice)?;
            if ids.is_empty() {
                return Err(GenerateError::Invalid("an empty choice cannot be scored".into()));
            }
            if prompt.len() + ids.len() > context {
                return Err(GenerateError::PromptTooLong { tokens: prompt.len() + ids.len(), context });
            }
            let mut logprob = log_prob(&first, ids[0]);
            if ids.len() > 1 {
                // Teacher-forced: each later token scored after the ones before it, all in one pass.
                let mut branch = cache.clone();
                let rest = self.logits(&ids[..ids.len() - 1], &mut branch, LogitsFor::All)?;
                for (row, &id) in rest.chunks_exact(vocab).zip(&ids[1..]) {
                    logprob += log_prob(row, id);
                }
            }
            scores.push(ChoiceScore { choice: choice.clone(), logprob });
        }
        Ok(scores)
    }

    fn count_tokens(&self, text: &str) -> usize {
        self.tokenizer.encode(text).map_or(text.len() / 4, |ids| ids.len())
    }

    fn describe(&self) -> String {
        format!("{} (embedded, {})", self.name, if self.wgpu { "wgpu" } else { "cpu" })
    }
}

#[cfg(test)]
mod tests {
    use super::held_back;

    #[test]
    fn partial_stop_strings_and_characters_are_held_back() {
        let stop = vec!["\nQuestion:".to_string()];
        assert_eq!(held_back("The answer\nQue", &stop), 4);
        assert_eq!(held_back("The answer", &stop), 0);
        assert_eq!(held_back("caf\u{FFFD}", &stop), 3);
    }
}
