//! A GGUF model's tokenizer (byte-level BPE, rebuilt from its vocabulary and merges) and its
//! chat template (the Jinja text it ships, rendered with minijinja).

use tokenizers::SplitDelimiterBehavior;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, Tokenizer};

use super::ModelError;
use super::gguf::{GgufError, GgufFile, GgufValue};

/// llama.cpp's split for `pre = qwen2` (the same as Qwen2's tokenizer.json).
const QWEN2_SPLIT: &str =
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Control tokens that end a turn or the text in the chat models Evident runs.
const END_TOKENS: [&str; 3] = ["<|im_end|>", "<|endoftext|>", "<|eot_id|>"];

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatTurn {
    pub role: String,
    pub content: String,
}

impl ChatTurn {
    /// A turn by `role` saying `content`.
    pub fn new(role: &str, content: impl Into<String>) -> ChatTurn {
        ChatTurn { role: role.to_string(), content: content.into() }
    }
}

/// Tokenizer, special tokens and chat template of a GGUF model.
pub struct ChatTokenizer {
    tokenizer: Tokenizer,
    template: Option<String>,
    /// Tokens that end a turn (the model's end-of-sequence and end-of-text tokens).
    pub eos: Vec<u32>,
    bos_text: String,
    eos_text: String,
}

fn strings(value: &GgufValue, key: &str) -> Result<Vec<String>, GgufError> {
    let items = value.as_array().ok_or_else(|| GgufError::Format(format!("{key} is not an array")))?;
    Ok(items.iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect())
}

impl ChatTokenizer {
    /// Rebuilds the tokenizer described by `tokenizer.ggml.*` metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<ChatTokenizer, ModelError> {
        let model = file.string("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(ModelError::Tokenizer(format!("the {model} tokenizer is not supported (byte-level BPE, \"gpt2\", is)")));
        }
        let tokens = strings(file.get("tokenizer.ggml.tokens")?, "tokenizer.ggml.tokens")?;
        let merges = strings(file.get("tokenizer.ggml.merges")?, "tokenizer.ggml.merges")?;
        let types: Vec<i64> = match file.metadata.get("tokenizer.ggml.token_type").and_then(GgufValue::as_array) {
            Some(items) => items.iter().map(|v| v.as_int().unwrap_or(1)).collect(),
            None => vec![1; tokens.len()],
        };
        let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let merges = merges.iter().filter_map(|m| m.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string()))).collect();
        let bpe = BPE::builder().vocab_and_merges(vocab, merges).build().map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        let mut tokenizer = Tokenizer::new(bpe);
        let byte_level = ByteLevel::new(false, true, true);
        // llama.cpp names the pre-tokenizer; "smollm" splits every digit before the GPT-2 regex.
        match file.string("tokenizer.ggml.pre").unwrap_or("default") {
            "smollm" | "starcoder" | "refact" => {
                tokenizer.with_pre_tokenizer(Some(Sequence::new(vec![Digits::new(true).into(), byte_level.into()])));
            }
            "default" | "gpt2" | "gpt-2" => {
                tokenizer.with_pre_tokenizer(Some(byte_level));
            }
            // Qwen2's own split (llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN2): digits one by one,
            // then byte-level mapping without the GPT-2 regex.
            "qwen2" => {
                let split = Split::new(SplitPattern::Regex(QWEN2_SPLIT.into()), SplitDelimiterBehavior::Isolated, false)
                    .map_err(|e| ModelError::Tokenizer(format!("the qwen2 split does not compile: {e}")))?;
                tokenizer.with_pre_tokenizer(Some(Sequence::new(vec![split.into(), ByteLevel::new(false, false, false).into()])));
            }
            other => return Err(ModelError::Tokenizer(format!("the {other} pre-tokenizer is not supported"))),
        }
        tokenizer.with_decoder(Some(ByteLevel::default()));
        let special: Vec<AddedToken> =
            tokens.iter().zip(&types).filter(|(_, t)| matches!(t, 3 | 4)).map(|(tok, t)| AddedToken::from(tok.clone(), *t == 3)).collect();
        tokenizer.add_special_tokens(&special);
        let id = |key: &str| file.int(key).ok().map(|v| v as u32);
        let text_of = |i: Option<u32>| i.and_then(|i| tokens.get(i as usize)).cloned().unwrap_or_default();
        let eos = id("tokenizer.ggml.eos_token_id");
        // A chat model ends its turn with its end-of-turn token, but may also end the text
        // (Qwen2: <|im_end|> and <|endoftext|>), so every such token stops generation.
        let mut stops: Vec<u32> = eos.into_iter().chain(id("tokenizer.ggml.eot_token_id")).collect();
        for (i, t) in tokens.iter().enumerate() {
            if END_TOKENS.contains(&t.as_str()) && types.get(i).is_some_and(|&k| k == 3) && !stops.contains(&(i as u32)) {
                stops.push(i as u32);
            }
        }
        Ok(ChatTokenizer {
            tokenizer,
            template: file.string("tokenizer.chat_template").ok().map(str::to_string),
            eos: stops,
            bos_text: text_of(id("tokenizer.ggml.bos_token_id")),
            eos_text: text_of(eos),
        })
    }

    /// Token ids of `text`; special-token text such as `<|im_start|>` maps to its single id.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        let enc = self.tokenizer.encode(text, false).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of token ids (special tokens included, so a transcript reads as the model saw it).
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        self.tokenizer.decode(ids, false).map_err(|e| ModelError::Tokenizer(e.to_string()))
    }

    /// The prompt text for a conversation, ending with the assistant's turn opened when
    /// `add_generation_prompt` is set.
    pub fn render(&self, turns: &[ChatTurn], add_generation_prompt: bool) -> Result<String, ModelError> {
        let Some(template) = &self.template else {
            // Without a template, plain turns separated by blank lines.
            let mut text: String = turns.iter().map(|t| format!("{}\n\n", t.content)).collect();
            if !add_generation_prompt {
                text.truncate(text.trim_end().len());
            }
            return Ok(text);
        };
        let mut env = minijinja::Environment::new();
        env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        let tmpl = env.template_from_str(template).map_err(|e| ModelError::Tokenizer(format!("the chat template does not parse: {e}")))?;
        tmpl.render(minijinja::context! {
            messages => turns,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_text,
            eos_token => self.eos_text,
        })
        .map_err(|e| ModelError::Tokenizer(format!("the chat template failed: {e}")))
    }

    /// Text of the end-of-turn token (so a stop string can name it).
    pub fn eos_text(&self) -> &str {
        &self.eos_text
    }
}
