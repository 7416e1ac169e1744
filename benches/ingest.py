"""Ingest throughput: `evident bench ingest` beside pypdfium2 on the same PDFs and the same
libpdfium, plus the peak memory of `evident ingest` on the largest benchmark PDF.

Run through scripts/bench-ingest.sh, which builds the release binary first:

    bash scripts/bench-ingest.sh [PDF or folder ...]   (default: ../shared/bench/docs)

The pypdfium2 reference does the same work PDFium-wise: per page, the text page, every
character's loose box, font size and weight; with images, a render at the same bound and a
PNG encoded with zlib level 1 (evident uses the png crate's fast setting).
"""
import json, os, resource, struct, subprocess, sys, tempfile, time, zlib
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as raw

ROOT = Path(__file__).resolve().parent.parent
EVIDENT = os.environ.get("EVIDENT_BIN", str(ROOT / "target" / "release" / "evident"))
MAX_PX = 1024


def pdfs(paths):
    out = []
    for p in map(Path, paths):
        out.extend(sorted(p.rglob("*.pdf")) if p.is_dir() else [p])
    return out


def png(width, height, rgb_rows):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw_rows = b"".join(b"\x00" + row for row in rgb_rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw_rows, 1)) + chunk(b"IEND", b""))


def pypdfium_pass(files, images):
    pages = 0
    started = time.perf_counter()
    for f in files:
        doc = pdfium.PdfDocument(str(f))
        for i in range(len(doc)):
            page = doc[i]
            tp = page.get_textpage()
            n = tp.count_chars()
            text = tp.get_text_range()
            for c in range(n):
                tp.get_charbox(c, loose=True)
                raw.FPDFText_GetFontSize(tp, c)
                raw.FPDFText_GetFontWeight(tp, c)
            if images:
                w, h = page.get_size()
                scale = MAX_PX / max(w, h)
                bitmap = page.render(scale=scale, rev_byteorder=True)
                buf = bytes(bitmap.buffer)
                stride, bw, bh = bitmap.stride, bitmap.width, bitmap.height
                rows = [bytes(b for j, b in enumerate(buf[r * stride:r * stride + bw * bitmap.n_channels]) if bitmap.n_channels == 3 or j % 4 != 3)
                        for r in range(bh)] if bitmap.n_channels == 4 else [buf[r * stride:r * stride + bw * 3] for r in range(bh)]
                png(bw, bh, rows)
            pages += 1
            tp.close()
            page.close()
        doc.close()
    return pages, time.perf_counter() - started


def main():
    paths = sys.argv[1:] or [str(ROOT.parent / "shared" / "bench" / "docs")]
    files = pdfs(paths)
    out = subprocess.run([EVIDENT, "bench", "ingest", "--json", *map(str, files)], check=True, capture_output=True, text=True, cwd=ROOT)
    ours = {r["mode"]: r for r in json.loads(out.stdout)}
    rows = []
    for mode, images in [("text + boxes", False), ("text + boxes + images", True)]:
        pages, secs = pypdfium_pass(files, images)
        e = ours[mode]
        rows.append((mode, e["pages"], e["pages_per_s"], pages / secs))
    print(f"{len(files)} PDFs, same libpdfium ({pdfium.PDFIUM_INFO.build if hasattr(pdfium, 'PDFIUM_INFO') else 'pypdfium2 ' + pdfium.V_PYPDFIUM2})")
    print(f"{'mode':<24} {'pages':>6} {'evident p/s':>12} {'pypdfium2 p/s':>14} {'ratio':>6}")
    for mode, pages, ev, py in rows:
        print(f"{mode:<24} {pages:>6} {ev:>12.1f} {py:>14.1f} {ev / py:>5.2f}x")

    largest = max(files, key=lambda f: len(pdfium.PdfDocument(str(f))))
    n_pages = len(pdfium.PdfDocument(str(largest)))
    with tempfile.TemporaryDirectory() as store:
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        started = time.perf_counter()
        subprocess.run([EVIDENT, "--data-dir", store, "ingest", str(largest)], check=True, capture_output=True, cwd=ROOT)
        secs = time.perf_counter() - started
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    note = "" if peak_kib > before else " (at most; an earlier child peaked higher)"
    print(f"\nevident ingest {largest.name} ({n_pages} pages, with images, into a new store): "
          f"{secs:.1f} s, {n_pages / secs:.1f} pages/s, peak memory {peak_kib / 1024:.0f} MiB{note}")


if __name__ == "__main__":
    main()
