"""Parsing speed and peak memory of the document pipeline's PDF steps (issue 12).

* **Text parsing speed**: :func:`hearth.documents.pdf_text.parse_pdf` on a generated ``--pages``-page
  report (~3,000 characters of prose a page, every 25th page image-only), ``--runs`` times, this process
  pinned to one CPU; the median pages/s is the figure (target >= 50).
* **Peak memory**: a child process reads a generated ``--memory-pages``-page report from a file and
  parses it (twice: a text report, and one where every 10th page is a 1000x750 scanned image); its peak
  RSS (``VmHWM``; see :func:`_memory_child` for why not ``ru_maxrss``) is the figure (target <= 300 MB).
  A second child only imports
  the same modules and reads the file, so the parser's own share is the difference.
* For scale: tables (:func:`extract_tables`) pages/s on the same report, and 100 quotes x 20 pages of
  :func:`check_quote` (the evidence step's worst case when quotes are searched on every page).

The PDFs are generated with reportlab (``tests/documents/pdf_factory.py``); nothing is downloaded.

Usage: ``python bench/document_bench.py [--pages 200] [--runs 7] [--memory-pages 500]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.documents.pdf_factory (imported by the parent only)

from hearth.documents.pdf_text import parse_pdf  # noqa: E402


def _pin_to_one_cpu() -> int:
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def _timed(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def _memory_child(path: str, mode: str) -> None:
    data = Path(path).read_bytes()
    pages = 0
    if mode == "parse":
        parsed = parse_pdf(data, max_pages=10_000)
        pages = parsed.page_count
    # VmHWM, not ru_maxrss: Linux carries the forked copy's peak (the parent's whole RSS, with its
    # generated PDFs) across exec into ru_maxrss; VmHWM belongs to this process image alone.
    status = Path("/proc/self/status").read_text()
    hwm_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"maxrss_mb": hwm_kb / 1024, "ru_maxrss_mb": usage.ru_maxrss / 1024, "pages": pages,
                      "bytes": len(data)}))


def _memory(pages: int, *, scan_every: int, scan_px: tuple[int, int] | None) -> dict[str, float]:
    from tests.documents import pdf_factory

    data = pdf_factory.long_report(pages, scan_every=scan_every, scan_px=scan_px)
    with tempfile.NamedTemporaryFile(suffix=".pdf") as file:
        file.write(data)
        file.flush()
        out = {}
        for mode in ("baseline", "parse"):
            answer = subprocess.run([sys.executable, __file__, "--memory-child", file.name, "--mode", mode],
                                    check=True, capture_output=True, text=True)
            out[mode] = json.loads(answer.stdout)
    return {"pdf_mb": len(data) / 1e6, "baseline_mb": out["baseline"]["maxrss_mb"],
            "parse_mb": out["parse"]["maxrss_mb"], "pages": out["parse"]["pages"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--memory-pages", type=int, default=500)
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="parse", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        _memory_child(args.memory_child, args.mode)
        return

    from tests.documents import pdf_factory

    from hearth.documents.evidence import check_quote
    from hearth.documents.pdf_tables import extract_tables

    cpu = _pin_to_one_cpu()
    data = pdf_factory.long_report(args.pages, scan_every=25)
    parsed = parse_pdf(data, max_pages=10_000)
    chars = sum(p.chars for p in parsed.pages)
    parse_times = _timed(lambda: parse_pdf(data, max_pages=10_000), args.runs)
    table_times = _timed(lambda: extract_tables(data), max(3, args.runs // 2))
    report_pages = parse_pdf(pdf_factory.financial_report(), max_pages=50).text_by_page()
    quotes = [f.quote.replace("million", "millions") for f in pdf_factory.FINANCIAL_FACTS] * 17
    quote_times = _timed(lambda: [check_quote(q, t) for q in quotes[:100] for t in report_pages.values()],
                         max(3, args.runs // 2))
    memory = [_memory(args.memory_pages, scan_every=25, scan_px=None),
              _memory(args.memory_pages, scan_every=10, scan_px=(1000, 750))]

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    print(f"machine: nproc={os.cpu_count()} cpu={model!r} python={platform.python_version()} pinned to cpu {cpu}")
    print(f"parse_pdf: {args.pages} pages ({len(data) / 1e6:.2f} MB, {chars / args.pages:.0f} chars/page, "
          f"{len(parsed.pages_needing_ocr)} image-only), {args.runs} runs: "
          f"median {statistics.median(parse_times) * 1000:.0f} ms = "
          f"{args.pages / statistics.median(parse_times):.0f} pages/s "
          f"(best {args.pages / min(parse_times):.0f}, worst {args.pages / max(parse_times):.0f})")
    print(f"extract_tables: median {args.pages / statistics.median(table_times):.0f} pages/s")
    print(f"check_quote: 100 quotes x 20 pages: median {statistics.median(quote_times) * 1000:.0f} ms")
    for m, what in zip(memory, ("text, every 25th page image-only", "every 10th page a 1000x750 scan"), strict=True):
        print(f"peak RSS parsing {m['pages']:.0f} pages ({what}, {m['pdf_mb']:.1f} MB file): "
              f"{m['parse_mb']:.1f} MB (imports + file read only: {m['baseline_mb']:.1f} MB)")


if __name__ == "__main__":
    main()
