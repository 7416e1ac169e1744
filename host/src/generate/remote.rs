//! A client for an OpenAI-compatible `/v1/chat/completions` server on the local network
//! (vLLM, SGLang, llama.cpp's server, Ollama).

use std::io::{BufRead, BufReader};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use super::{ChoiceScore, FinishReason, GenerateError, GenerateRequest, Generation, Generator, Message, PromptCache};

pub use crate::config::RemoteConfig;

/// The remote generator.
pub struct RemoteGenerator {
    config: RemoteConfig,
    agent: ureq::Agent,
}

impl RemoteGenerator {
    /// A client for `config` (no request is made until one is needed).
    pub fn new(config: RemoteConfig) -> RemoteGenerator {
        let agent = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(config.timeout_s.max(1)))).http_status_as_error(false).build().into();
        RemoteGenerator { config, agent }
    }

    fn url(&self) -> String {
        format!("{}/chat/completions", self.config.base_url.trim_end_matches('/'))
    }

    fn messages(&self, messages: &[Message]) -> Vec<Value> {
        messages
            .iter()
            .map(|m| {
                if m.images.is_empty() || !self.config.images {
                    return json!({"role": m.turn.role, "content": m.turn.content});
                }
                let mut parts = vec![json!({"type": "text", "text": m.turn.content})];
                for image in &m.images {
                    let url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(&image.png));
                    parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                }
                json!({"role": m.turn.role, "content": parts})
            })
            .collect()
    }

    /// Posts `body`, retrying with backoff what may pass (no connection, timeout, 429, 5xx).
    fn post(&self, body: &Value) -> Result<ureq::http::Response<ureq::Body>, GenerateError> {
        let url = self.url();
        let text = body.to_string();
        let mut attempt = 0;
        loop {
            let mut req = self.agent.post(&url).header("Content-Type", "application/json");
            if !self.config.api_key.is_empty() {
                req = req.header("Authorization", &format!("Bearer {}", self.config.api_key));
            }
            let err: GenerateError = match req.send(&text) {
                Ok(resp) if resp.status().is_success() => return Ok(resp),
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    let body = resp.body_mut().read_to_string().unwrap_or_default();
                    let body = body.chars().take(300).collect::<String>().trim().to_string();
                    GenerateError::Server { status, body }
                }
                Err(ureq::Error::Timeout(_)) => GenerateError::Timeout { url: url.clone(), seconds: self.config.timeout_s },
                Err(e) => GenerateError::Unreachable { url: url.clone(), detail: e.to_string() },
            };
            let passing = match &err {
                GenerateError::Server { status, .. } => *status == 429 || *status >= 500,
                GenerateError::Unreachable { .. } | GenerateError::Timeout { .. } => true,
                _ => false,
            };
            if !passing || attempt >= self.config.retries {
                return Err(err);
            }
            let wait = Duration::from_millis(250 * (1 << attempt.min(6)));
            tracing::warn!("generation request failed ({err}); retrying in {wait:?}");
            std::thread::sleep(wait);
            attempt += 1;
        }
    }
}

/// The reply without a thinking model's reasoning: servers that run no reasoning parser send
/// it in the content as `<think>...</think>` before the answer, and a reply cut off inside it
/// has no answer yet.
fn without_reasoning(text: &str) -> String {
    let trimmed = text.trim_start();
    let Some(inside) = trimmed.strip_prefix("<think>") else {
        return text.to_string();
    };
    match inside.find("</think>") {
        Some(end) => inside[end + "</think>".len()..].trim_start().to_string(),
        None => String::new(),
    }
}

/// Holds back a streamed reply's leading `<think>...</think>` so that a listener sees only the
/// answer, as [`without_reasoning`] leaves it in the final text.
#[derive(Default)]
struct ReasoningFilter {
    held: String,
    /// Whether the reply is past any reasoning (or has none), so pieces pass straight on.
    open: bool,
}

impl ReasoningFilter {
    /// What of `piece` a listener may see now.
    fn push(&mut self, piece: &str) -> String {
        if self.open {
            return piece.to_string();
        }
        self.held.push_str(piece);
        let start = self.held.trim_start();
        if "<think>".starts_with(start) {
            return String::new(); // still possibly the start of the tag
        }
        if !start.starts_with("<think>") {
            self.open = true;
            return std::mem::take(&mut self.held);
        }
        if start.contains("</think>") {
            self.open = true;
            return without_reasoning(&std::mem::take(&mut self.held));
        }
        String::new()
    }

    /// What is still held when the stream ends: a reply that never left its reasoning has no
    /// answer, and one that was only the start of the tag ("<th") is shown as it is.
    fn finish(&mut self) -> String {
        if self.open { String::new() } else { without_reasoning(&std::mem::take(&mut self.held)) }
    }
}

fn read_json(resp: ureq::http::Response<ureq::Body>) -> Result<Value, GenerateError> {
    let text = resp.into_body().read_to_string().map_err(|e| GenerateError::BadResponse(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| GenerateError::BadResponse(format!("not JSON ({e})")))
}

fn finish_of(value: &Value) -> Option<FinishReason> {
    match value.as_str()? {
        "length" => Some(FinishReason::Length),
        _ => Some(FinishReason::Stop),
    }
}

impl Generator for RemoteGenerator {
    fn generate(&self, request: &GenerateRequest, _reuse: Option<&PromptCache>, on_text: &mut dyn FnMut(&str)) -> Result<Generation, GenerateError> {
        let mut body = json!({
            "model": self.config.model,
            "messages": self.messages(&request.messages),
            "max_tokens": request.max_tokens,
            "temperature": request.sampling.temperature,
            "top_p": request.sampling.top_p,
            "seed": request.sampling.seed,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !request.stop.is_empty() {
            body["stop"] = json!(request.stop);
        }
        let resp = self.post(&body)?;
        let streamed = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("text/event-stream"));
        if !streamed {
            // Some servers ignore `stream`; take the whole answer.
            let v = read_json(resp)?;
            let text = without_reasoning(v["choices"][0]["message"]["content"].as_str().unwrap_or_default());
            on_text(&text);
            return Ok(Generation {
                completion_tokens: v["usage"]["completion_tokens"].as_u64().unwrap_or(0) as usize,
                prompt_tokens: v["usage"]["prompt_tokens"].as_u64().unwrap_or(0) as usize,
                finish: finish_of(&v["choices"][0]["finish_reason"]).unwrap_or(FinishReason::Stop),
                text,
            });
        }
        let reader = BufReader::new(resp.into_body().into_reader());
        let mut generation = Generation { text: String::new(), prompt_tokens: 0, completion_tokens: 0, finish: FinishReason::Stop };
        let mut chunks = 0;
        let mut shown = ReasoningFilter::default();
        for line in reader.lines() {
            let line = line.map_err(|e| GenerateError::BadResponse(format!("the stream broke off: {e}")))?;
            let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
            if data == "[DONE]" {
                break;
            }
            let v: Value = serde_json::from_str(data).map_err(|e| GenerateError::BadResponse(format!("a stream event is not JSON ({e})")))?;
            if let Some(piece) = v["choices"][0]["delta"]["content"].as_str().filter(|p| !p.is_empty()) {
                let visible = shown.push(piece);
                if !visible.is_empty() {
                    on_text(&visible);
                    generation.text.push_str(&visible);
                }
                chunks += 1;
            }
            if let Some(finish) = finish_of(&v["choices"][0]["finish_reason"]) {
                generation.finish = finish;
            }
            if let Some(usage) = v.get("usage").filter(|u| u.is_object()) {
                generation.prompt_tokens = usage["prompt_tokens"].as_u64().unwrap_or(0) as usize;
                generation.completion_tokens = usage["completion_tokens"].as_u64().unwrap_or(0) as usize;
            }
        }
        if generation.completion_tokens == 0 {
            generation.completion_tokens = chunks;
        }
        let rest = shown.finish();
        if !rest.is_empty() {
            on_text(&rest);
            generation.text.push_str(&rest);
        }
        Ok(generation)
    }

    fn score_choices(&self, messages: &[Message], choices: &[String], _reuse: Option<&PromptCache>) -> Result<Vec<ChoiceScore>, GenerateError> {
        let body = json!({
            "model": self.config.model,
            "messages": self.messages(messages),
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": true,
            "top_logprobs": 20,
        });
        let v = read_json(self.post(&body)?)?;
        let top = v["choices"][0]["logprobs"]["content"][0]["top_logprobs"].as_array().filter(|t| !t.is_empty()).ok_or(GenerateError::NoLogprobs)?;
        let listed: Vec<(String, f32)> = top.iter().filter_map(|t| Some((t["token"].as_str()?.trim().to_lowercase(), t["logprob"].as_f64()? as f32))).collect();
        // A choice the server did not list is less likely than everything it listed.
        let floor = listed.iter().map(|t| t.1).fold(0.0f32, f32::min) - 1.0;
        Ok(choices
            .iter()
            .map(|choice| {
                let want = choice.trim().to_lowercase();
                let logprob = listed
                    .iter()
                    .filter(|(tok, _)| !tok.is_empty() && (want == *tok || want.starts_with(tok.as_str())))
                    .map(|t| t.1)
                    .fold(f32::NEG_INFINITY, f32::max);
                ChoiceScore { choice: choice.clone(), logprob: if logprob.is_finite() { logprob } else { floor } }
            })
            .collect())
    }

    fn count_tokens(&self, text: &str) -> usize {
        // The server's tokenizer is out of reach; four characters a token is the usual rate.
        text.len().div_ceil(4)
    }

    fn describe(&self) -> String {
        format!("{} at {} (OpenAI-compatible)", self.config.model, self.config.base_url)
    }
}

#[cfg(test)]
mod tests {
    use super::{ReasoningFilter, without_reasoning};

    #[test]
    fn a_thinking_models_reasoning_is_not_its_answer() {
        assert_eq!(without_reasoning("<think>\n8.8 is on page 4.\n</think>\n\n$8.8 billion"), "$8.8 billion");
        assert_eq!(without_reasoning("  <think>still reasoning when the budget ran out"), "", "no answer yet");
        assert_eq!(without_reasoning("$8.8 billion, see <think> below"), "$8.8 billion, see <think> below");
    }

    #[test]
    fn a_streamed_reply_shows_only_what_follows_the_reasoning() {
        let stream = |pieces: &[&str]| {
            let mut filter = ReasoningFilter::default();
            let shown: String = pieces.iter().map(|p| filter.push(p)).collect();
            shown + &filter.finish()
        };
        assert_eq!(stream(&["<th", "ink>8.8 is on", " page 4.</th", "ink>\n\n$8.8", " billion"]), "$8.8 billion");
        assert_eq!(stream(&["$8.8", " billion"]), "$8.8 billion");
        assert_eq!(stream(&["<", "b>bold</b>"]), "<b>bold</b>", "another tag is shown whole");
        assert_eq!(stream(&["<think>cut off while reasoning"]), "");
        assert_eq!(stream(&["<th"]), "<th", "the start of a tag that never came is shown at the end");
        let whole = "<think>8.8 is on page 4.</think>\n\n$8.8 billion";
        assert_eq!(stream(&[whole]), without_reasoning(whole), "the stream shows what the final text keeps");
    }
}
