//! `evident ask`: answer a question with a profile's pipeline, citing pages; with several
//! profiles, the same question through each, side by side.

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
    /// The pipeline to run (a profile in appliance-config/profiles). Default:
    /// plugins.default_profile. Repeat it to put the same question through each profile and
    /// compare answers, citations, time and tokens side by side.
    #[arg(long = "profile")]
    profiles: Vec<String>,
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
    let names = if args.profiles.is_empty() { vec![ctx.config.plugins.default_profile.clone()] } else { args.profiles.clone() };
    // Every profile is resolved before any runs, so a misspelt second name costs no answer.
    let profiles = names.iter().map(|n| registry.resolve(n)).collect::<Result<Vec<_>, _>>()?;
    let services = ctx.services(store.clone())?;
    let mut outcomes: Vec<Outcome> = Vec::with_capacity(profiles.len());
    for (name, profile) in names.iter().zip(&profiles) {
        if profiles.len() > 1 && !args.json {
            eprintln!("asking with {name} ...");
        }
        let host = Arc::new(RequestHost::new(services.clone(), docs.clone(), args.seed));
        let outcome =
            evident::pipeline::run(registry.runtime(), profile, host, &args.question).with_context(|| format!("answering the question with {name}"))?;
        outcomes.push(outcome);
    }
    match outcomes.as_slice() {
        [one] => print_outcome(one, args.trace, args.json)?,
        many => print_side_by_side(&args.question, many, args.trace, args.json)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Several profiles' answers to one question: each in full, then a row each of what they cost
/// and what they cite.
fn print_side_by_side(question: &str, outcomes: &[Outcome], trace: bool, json: bool) -> Result<()> {
    if json {
        let mut answers = Vec::with_capacity(outcomes.len());
        for o in outcomes {
            let mut v = serde_json::to_value(o)?;
            if !trace {
                v.as_object_mut().map(|m| m.remove("trace"));
            }
            answers.push(v);
        }
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "question": question, "answers": answers }))?);
        return Ok(());
    }
    for o in outcomes {
        println!("== {} ==", o.profile);
        print_outcome(o, trace, false)?;
        println!();
    }
    println!("{:<14} {:>10} {:>8} {:>7} {:>8} {:>9}  pages cited", "profile", "answerable", "s", "calls", "tokens", "reused");
    for o in outcomes {
        let pages: Vec<String> = o.evidence.iter().map(|e| format!("{}:{}", &e.document[..e.document.len().min(8)], e.page)).collect();
        println!(
            "{:<14} {:>10} {:>8.1} {:>7} {:>8} {:>9}  {}",
            o.profile,
            if o.answerable { "yes" } else { "no" },
            o.ms / 1000.0,
            o.llm_calls,
            o.tokens,
            o.reused_tokens,
            if pages.is_empty() { "none".to_string() } else { pages.join(" ") }
        );
    }
    let cited = |o: &Outcome| o.evidence.iter().map(|e| (e.document.clone(), e.page)).collect::<std::collections::BTreeSet<_>>();
    if let [a, b] = outcomes {
        let (ca, cb) = (cited(a), cited(b));
        println!(
            "pages both cite: {}; only {}: {}; only {}: {}",
            ca.intersection(&cb).count(),
            a.profile,
            ca.difference(&cb).count(),
            b.profile,
            cb.difference(&ca).count()
        );
    }
    Ok(())
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
