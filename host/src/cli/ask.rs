//! `evident ask`: answer a question with a profile's pipeline, citing pages.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use clap::Args;
use evident::pipeline::{Outcome, RequestHost};

use super::Context;

/// Arguments of `evident ask`.
#[derive(Args)]
pub struct AskArgs {
    /// The question.
    question: String,
    /// Ask only about this document (repeatable; id, file name or title). Default: all.
    #[arg(long = "doc")]
    docs: Vec<String>,
    /// The pipeline to run (a profile in appliance-config/profiles). Default: plugins.default_profile.
    #[arg(long)]
    profile: Option<String>,
    /// Print each stage's inputs, outputs, time and model use.
    #[arg(long)]
    trace: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Seed of the stages' random source.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Answers one question.
pub fn run(ctx: &Context, args: AskArgs) -> Result<ExitCode> {
    let store = Arc::new(ctx.store()?);
    let docs = if args.docs.is_empty() { store.documents()? } else { args.docs.iter().map(|d| store.resolve(d)).collect::<Result<_, _>>()? };
    if docs.is_empty() {
        bail!("the store holds no documents; add some with `evident ingest <PDF or folder>`");
    }
    let registry = ctx.registry(store.clone())?;
    let profile_name = args.profile.clone().unwrap_or_else(|| ctx.config.plugins.default_profile.clone());
    let profile = registry.resolve(&profile_name)?;
    let services = ctx.services(store.clone())?;
    let host = Arc::new(RequestHost::new(services, docs, args.seed));
    let outcome: Outcome = evident::pipeline::run(registry.runtime(), &profile, host, &args.question).context("answering the question")?;
    print_outcome(&outcome, args.trace, args.json)?;
    Ok(ExitCode::SUCCESS)
}

fn print_outcome(o: &Outcome, trace: bool, json: bool) -> Result<()> {
    if json {
        let mut v = serde_json::to_value(o)?;
        if !trace {
            v.as_object_mut().map(|m| m.remove("trace"));
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if o.answerable {
        println!("{}", o.answer);
    } else {
        println!("Not answerable from the documents.");
    }
    for (i, e) in o.evidence.iter().enumerate() {
        let title: String = e.title.chars().take(50).collect();
        println!("  [{}] {title} ({}), page {}: {}", i + 1, e.document, e.page, e.snippet);
    }
    if let Some(notice) = &o.notice {
        println!("  note: {notice}");
    }
    if trace {
        for line in &o.log {
            println!("  log: {line}");
        }
        println!();
        for s in &o.trace {
            println!(
                "{:<10} {:<18} {:>9.0} ms  {:>3} calls {:>7} tokens ({} read from the prompt cache)",
                s.stage, s.plugin, s.ms, s.llm_calls, s.tokens, s.reused_tokens
            );
            println!("    in:  {}", s.input);
            println!("    out: {}", s.output);
        }
    }
    eprintln!(
        "profile {}: {:.1} s, {} model calls, {} tokens ({} of the prompt tokens read from the prompt cache)",
        o.profile,
        o.ms / 1000.0,
        o.llm_calls,
        o.tokens,
        o.reused_tokens
    );
    Ok(())
}
