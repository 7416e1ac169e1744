//! `evident serve`: the HTTP API and web page.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::Args;
use evident::config::Role;
use evident::server::AppState;

use super::Context;

/// Arguments of `evident serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on, HOST:PORT (port 0 picks a free one). Default: server.addr.
    #[arg(long)]
    addr: Option<String>,
    /// An admin token, besides those in server.tokens (repeatable).
    #[arg(long = "token", env = "EVIDENT_TOKEN")]
    tokens: Vec<String>,
    /// A read-only token: ask and read, no uploads or plugins (repeatable).
    #[arg(long = "read-token")]
    read_tokens: Vec<String>,
}

fn random_token() -> String {
    let bytes: [u8; 18] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Serves until SIGINT or SIGTERM.
pub fn run(ctx: &Context, args: ServeArgs) -> Result<ExitCode> {
    // Questions run on whichever blocking thread is free; glibc would give each of those threads
    // its own malloc arena, each keeping the freed page vectors of its last question, so the
    // server's memory would climb with the number of threads that ever ran one. Two arenas keep
    // it flat.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes the allocator; called before the server's threads start.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    let mut tokens: Vec<(String, Role)> = ctx.config.server.tokens.iter().map(|t| (t.token.clone(), t.role)).collect();
    tokens.extend(args.tokens.iter().map(|t| (t.clone(), Role::Admin)));
    tokens.extend(args.read_tokens.iter().map(|t| (t.clone(), Role::Read)));
    tokens.retain(|(t, _)| !t.trim().is_empty());
    let generated = tokens.is_empty().then(random_token);
    if let Some(t) = &generated {
        tokens.push((t.clone(), Role::Admin));
    }

    let store = Arc::new(ctx.store()?);
    let registry = Arc::new(ctx.registry(store.clone())?);
    eprintln!("evident: loading the models");
    let services = ctx.services(store.clone())?;
    // Compile the default profile's components now, so the first question does not wait for it.
    if let Err(e) = registry.resolve(&ctx.config.plugins.default_profile) {
        eprintln!("evident: warning: the default profile cannot run yet: {e}");
    }
    let addr = args.addr.clone().unwrap_or_else(|| ctx.config.server.addr.clone());
    let state = Arc::new(AppState::new(ctx.config.clone(), services, registry, tokens)?);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("evident-http").build().context("starting the async runtime")?;
    runtime.block_on(async move {
        let (listener, local) = evident::server::bind(&addr).await?;
        let docs = state.store.documents().map(|d| d.len()).unwrap_or(0);
        println!("evident: listening on http://{local} ({docs} documents); open it in a browser or see /openapi.json");
        if let Some(t) = &generated {
            println!("evident: no tokens are configured, so this run made an admin token: {t}");
        }
        let _ = std::io::stdout().flush();
        evident::server::serve(listener, state).await
    })?;
    eprintln!("evident: stopped");
    Ok(ExitCode::SUCCESS)
}
