//! The `evident` command line.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Evident: answers questions over long private PDFs and cites the pages that prove them.
#[derive(Parser)]
#[command(name = "evident", version, about, long_about = None)]
struct Cli {
    /// Directory holding the store (overrides data_dir in the configuration).
    #[arg(long, global = true, env = "EVIDENT_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,

    /// Configuration file read over the built-in defaults.
    #[arg(long, global = true, env = "EVIDENT_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Read PDFs (files or folders, searched recursively) into the store.
    Ingest(cli::ingest::IngestArgs),
    /// List the documents in the store.
    Docs(cli::docs::DocsArgs),
    /// Show a document's details and outline, or one page's blocks with their boxes.
    Show(cli::docs::ShowArgs),
    /// Remove a document and everything stored for it.
    Rm(cli::docs::RmArgs),
    /// Bring the retrieval indexes (token vectors, BM25) and the profiles' enrich stages up to date.
    Index(cli::search::IndexArgs),
    /// Show what the enrich stages made of a document (their artifact sets), or search it.
    Artifacts(cli::enrich::ArtifactsArgs),
    /// Check that every document's pages, images, vectors and BM25 entries are whole.
    Check(cli::check::CheckArgs),
    /// Rank pages for a question.
    Search(cli::search::SearchArgs),
    /// Measure retrieval (Recall, NDCG, MRR at K) on a benchmark's questions.
    Eval(cli::eval::EvalArgs),
    /// Answer a question with a profile's pipeline, citing document, page and region.
    Ask(cli::ask::AskArgs),
    /// Stage plugins: list them, install a component, swap the one behind a stage.
    #[command(subcommand)]
    Plugins(cli::plugins::PluginsCommand),
    /// Serve the HTTP API and the web page until interrupted.
    Serve(cli::serve::ServeArgs),
    /// Run the generator on a prompt (streamed), or score candidate replies with --choice.
    Generate(cli::generate::GenerateArgs),
    /// Measure Evident's speed and print a table.
    #[command(subcommand)]
    Bench(cli::bench::BenchCommand),
    /// Read one PDF for the host over stdin and stdout (started by ingest and serve).
    #[command(name = "pdf-worker", hide = true)]
    PdfWorker {
        /// PDFium's shared library.
        #[arg(long)]
        library: PathBuf,
    },
}

fn main() -> ExitCode {
    cli::tune_allocator();
    cli::ensure_runtime_dir();
    cli::init_logging();
    let cli = Cli::parse();
    // Commands that talk to PDF workers must see a dead worker's pipe as an error, not die.
    if !matches!(cli.command, Command::Ingest(_) | Command::Serve(_)) {
        cli::restore_sigpipe();
    }
    if let Command::PdfWorker { library } = &cli.command {
        return match evident::ingest::serve_worker(library) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: the PDF worker stopped: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let result = cli::Context::new(cli.config.as_deref(), cli.data_dir).and_then(|ctx| match cli.command {
        Command::Ingest(args) => cli::ingest::run(&ctx, args),
        Command::Docs(args) => cli::docs::list(&ctx, args),
        Command::Show(args) => cli::docs::show(&ctx, args),
        Command::Rm(args) => cli::docs::remove(&ctx, args),
        Command::Index(args) => cli::search::index(&ctx, args),
        Command::Artifacts(args) => cli::enrich::artifacts(&ctx, args),
        Command::Check(args) => cli::check::run(&ctx, args),
        Command::Search(args) => cli::search::search(&ctx, args),
        Command::Eval(args) => cli::eval::run(&ctx, args),
        Command::Ask(args) => cli::ask::run(&ctx, args),
        Command::Plugins(cmd) => cli::plugins::run(&ctx, cmd),
        Command::Serve(args) => cli::serve::run(&ctx, args),
        Command::Generate(args) => cli::generate::run(&ctx, args),
        Command::Bench(cmd) => cli::bench::run(&ctx, cmd),
        Command::PdfWorker { .. } => unreachable!("handled before the configuration is read"),
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
