//! PP-OCRv5's weights for the generated networks: the ONNX files set-up unpacked, converted
//! once into burnpack files beside them by the same burn-onnx importer that wrote the networks.

use std::path::{Path, PathBuf};

use burn_onnx::{LoadStrategy, ModelGen};

use super::OcrError;

/// The burnpack file holding the weights of `onnx`, converting it first when it is missing or
/// older than the ONNX file.
pub fn burnpack_for(onnx: &Path) -> Result<PathBuf, OcrError> {
    let target = onnx.with_extension("bpk");
    if is_current(&target, onnx) {
        return Ok(target);
    }
    let dir = onnx.parent().unwrap_or(Path::new("."));
    let scratch = tempfile::Builder::new().prefix(".ocr-convert").tempdir_in(dir).map_err(|source| OcrError::Convert {
        path: onnx.to_path_buf(),
        reason: format!("cannot write beside it ({source}); make {} writable", dir.display()),
    })?;
    generate(onnx, scratch.path())?;
    let stem = onnx.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let written = scratch.path().join(format!("{stem}.bpk"));
    std::fs::rename(&written, &target).map_err(|e| OcrError::Convert { path: onnx.to_path_buf(), reason: e.to_string() })?;
    Ok(target)
}

/// Runs burn-onnx's importer on `onnx`, writing the network's source and its burnpack into
/// `out_dir`. The importer reports failures by panicking; they come back as an error.
pub fn generate(onnx: &Path, out_dir: &Path) -> Result<(), OcrError> {
    if !onnx.is_file() {
        return Err(OcrError::Missing(onnx.to_path_buf()));
    }
    let (input, out) = (onnx.to_string_lossy().into_owned(), out_dir.to_string_lossy().into_owned());
    // The importer installs a DEBUG-level global subscriber unless one is set; a process that
    // set none (a library caller, a test) keeps its silence instead.
    let _ = tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default());
    std::panic::catch_unwind(|| ModelGen::new().input(&input).out_dir(&out).development(false).load_strategy(LoadStrategy::None).run_from_cli()).map_err(
        |panic| {
            let reason = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
            OcrError::Convert { path: onnx.to_path_buf(), reason: reason.unwrap_or_else(|| "the ONNX importer failed".into()) }
        },
    )
}

fn is_current(target: &Path, source: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(target), modified(source)), (Some(t), Some(s)) if t >= s)
}
