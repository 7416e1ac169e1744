//! The embedded generator: a Llama-family GGUF model (Qwen2.5-Coder, SmolLM2), on Evident's
//! native CPU decoder or on burn.

use std::path::Path;

use crate::models::gguf::GgufFile;
use crate::models::{
    CausalAttentionFn, ChatTokenizer, ChatTurn, ComputeDevice, KvCache, Llama, LlamaConfig, LogitsFor, ModelError, NativeDecoder, burn_causal_attention,
    wgsl_causal_attention,
};

use super::prompt_cache::PromptCache;
use super::sampling::{Sampler, log_prob};
use super::{ChoiceScore, FinishReason, GenerateError, GenerateRequest, Generation, Generator, Message};

/// Which network runs multi-token passes (the prompt, teacher-forced choices) on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuPromptPass {
    /// Evident's own decoder on f32 gemm (the default, and the faster).
    Native,
    /// Burn's network on its flex backend (kept as a cross-check and for the benchmark).
    Burn,
}

/// A GGUF decoder and its tokenizer, on the CPU or on a burn GPU device.
pub struct EmbeddedGenerator {
    /// Burn's network and its attention: every pass on wgpu; multi-token passes on the CPU
    /// only when asked for (None otherwise).
    burn: Option<(Llama, Box<CausalAttentionFn>)>,
    /// The native CPU decoder (None on wgpu).
    native: Option<NativeDecoder>,
    config: LlamaConfig,
    tokenizer: ChatTokenizer,
    name: String,
    wgpu: bool,
}

impl EmbeddedGenerator {
    /// Loads the model in `path` onto `compute`: the native decoder on the CPU, burn on wgpu.
    pub fn load(path: &Path, compute: &ComputeDevice) -> Result<EmbeddedGenerator, ModelError> {
        EmbeddedGenerator::load_with(path, compute, CpuPromptPass::Native)
    }

    /// Loads the model in `path` onto `compute`, choosing the CPU's prompt pass.
    pub fn load_with(path: &Path, compute: &ComputeDevice, prompt_pass: CpuPromptPass) -> Result<EmbeddedGenerator, ModelError> {
        let file = GgufFile::open(path)?;
        let tokenizer = ChatTokenizer::from_gguf(&file)?;
        let config = LlamaConfig::from_gguf(&file)?;
        let native = if compute.wgpu { None } else { Some(NativeDecoder::load(&file, &config)?) };
        // On wgpu attention runs through the WGSL kernel; on the CPU through burn's own op.
        let burn = if compute.wgpu {
            Some((Llama::load(&file, &compute.device)?, Box::new(wgsl_causal_attention) as Box<CausalAttentionFn>))
        } else if prompt_pass == CpuPromptPass::Burn {
            Some((Llama::load(&file, &compute.device)?, Box::new(burn_causal_attention) as Box<CausalAttentionFn>))
        } else {
            None
        };
        let name = file.string("general.name").unwrap_or("model").to_string();
        Ok(EmbeddedGenerator { burn, native, config, tokenizer, name, wgpu: compute.wgpu })
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
        match (&self.native, &self.burn, tokens) {
            (Some(native), _, [_]) | (Some(native), None, _) => native.forward(tokens, cache, which),
            (_, Some((model, attention)), _) => {
                let t = model.forward(tokens, cache, which, attention.as_ref())?;
                read_logits(t)
            }
            (None, None, _) => Err(ModelError::Compute("no network is loaded".into())),
        }
    }

    /// The native decoder's weight bytes (None on wgpu).
    pub fn weight_bytes(&self) -> Option<usize> {
        self.native.as_ref().map(NativeDecoder::weight_bytes)
    }

    /// Runs a prompt, starting from the longest prefix `reuse` holds; returns the cache and the
    /// last position's logits, and leaves a copy of the prompt's cache in `reuse`.
    fn prompt_pass(&self, prompt: &[u32], reuse: Option<&PromptCache>) -> Result<(KvCache, Vec<f32>), ModelError> {
        let mut cache = reuse.map(|r| r.longest_prefix(prompt)).unwrap_or_default();
        let start = cache.len();
        let logits = self.logits(&prompt[start..], &mut cache, LogitsFor::Last)?;
        if let Some(reuse) = reuse {
            reuse.store(prompt, cache.prefix(prompt.len()), prompt.len() - start);
        }
        Ok((cache, logits))
    }

    /// Greedy or sampled continuation of raw token ids (no chat template), reusing and adding
    /// to `reuse`'s prompt caches when given.
    pub fn generate_ids(
        &self,
        prompt: &[u32],
        request: &GenerateRequest,
        reuse: Option<&PromptCache>,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<(Vec<u32>, Generation), GenerateError> {
        let context = self.config.context;
        if prompt.is_empty() || prompt.len() >= context {
            return Err(GenerateError::PromptTooLong { tokens: prompt.len(), context });
        }
        let mut sampler = Sampler::new(request.sampling);
        let (mut cache, mut logits) = self.prompt_pass(prompt, reuse)?;
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

/// Burn's logits read back into host memory.
fn read_logits(t: burn::prelude::Tensor<2>) -> Result<Vec<f32>, ModelError> {
    t.into_data().convert::<f32>().try_into_vec::<f32>().map_err(|e| ModelError::Compute(format!("{e:?}")))
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
    fn generate(&self, request: &GenerateRequest, reuse: Option<&PromptCache>, on_text: &mut dyn FnMut(&str)) -> Result<Generation, GenerateError> {
        let prompt = self.prompt_ids(&request.messages)?;
        Ok(self.generate_ids(&prompt, request, reuse, on_text)?.1)
    }

    fn score_choices(&self, messages: &[Message], choices: &[String], reuse: Option<&PromptCache>) -> Result<Vec<ChoiceScore>, GenerateError> {
        let prompt = self.prompt_ids(messages)?;
        let context = self.config.context;
        if prompt.is_empty() || prompt.len() >= context {
            return Err(GenerateError::PromptTooLong { tokens: prompt.len(), context });
        }
        let (cache, first) = self.prompt_pass(&prompt, reuse)?;
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
