//! `evident generate`: run the configured generator on one prompt, streaming to the terminal.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use evident::generate::{GenerateRequest, Message, SamplingParams};

use super::Context;

/// Arguments of `evident generate`.
#[derive(Args)]
pub struct GenerateArgs {
    /// The prompt, sent as the user's message through the model's chat template.
    prompt: String,
    /// A system message before it (default: the template's own, if any).
    #[arg(long)]
    system: Option<String>,
    /// Most new tokens.
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass.
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Seed of the sampler, so a sampled run can be repeated.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Stop before this string (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Instead of generating, print the log-probability of each of these replies (repeatable).
    #[arg(long = "choice")]
    choices: Vec<String>,
}

/// Streams the generator's reply to stdout, then its cost to stderr.
pub fn run(ctx: &Context, args: GenerateArgs) -> Result<ExitCode> {
    let generator = ctx.generator()?;
    let mut messages = Vec::new();
    if let Some(system) = args.system {
        messages.push(Message::text("system", system));
    }
    messages.push(Message::text("user", args.prompt));
    if !args.choices.is_empty() {
        let scores = generator.score_choices(&messages, &args.choices, None)?;
        for s in scores {
            println!("{:>10.4}  {}", s.logprob, s.choice);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let request = GenerateRequest {
        messages,
        max_tokens: args.max_tokens,
        sampling: SamplingParams { temperature: args.temperature, top_p: args.top_p, seed: args.seed },
        stop: args.stop,
    };
    let started = Instant::now();
    let mut out = std::io::stdout().lock();
    let generation = generator.generate(&request, None, &mut |piece| {
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
    })?;
    let _ = writeln!(out);
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "{}: {} prompt + {} new tokens in {secs:.2} s ({:?})",
        generator.describe(),
        generation.prompt_tokens,
        generation.completion_tokens,
        generation.finish
    );
    Ok(ExitCode::SUCCESS)
}
