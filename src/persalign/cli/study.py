"""`persalign study`: the paper's whole analysis as one resumable sweep.

A study is one run per data-set config (datasets × methods × policy models ×
seeds × decoders, the cells of `persalign run`) in STUDY_DIR/NAME, then the
Markdown and HTML reports of each run (Tables 2/4/5/6/9, Finding 3,
Figures 1-3, findings sentences; all from stored results) and an index.md
linking them. Shared work is done once: frozen backbone features are cached
on disk, a method × seed is trained once and reused by every policy model,
zero-shot generations are reused by the win rate, and policy log-probs are
memoised across methods. Interrupt it and run the same command to resume.

`--quick` applies QUICK_OVERRIDES first (one seed, few query items, capped
training and a short λ grid): a CI-sized run of the same config.

    persalign study configs/study_news.yaml
    persalign study configs/study_news.yaml --quick
"""

from __future__ import annotations

import time
from pathlib import Path

from persalign.core.config import load_config
from persalign.report.html import build_html_report
from persalign.runner.resolve import resolve_run
from persalign.runner.run import run

QUICK_OVERRIDES = [
    "seeds=[0]", "split.max_query_per_user=3", "reward.epochs=10",
    "reward.max_steps=20", "args.lambdas=[0,1,10]", "args.validation_size=8",
    "generation.max_new_tokens=16",
]


def run_study(configs: list[str], overrides: list[str], out_dir: str | None = None, quick: bool = False,
              log=print, backend=None) -> list[Path]:
    """Run every config of the study, then write each run's report.md / report.html and an index."""
    loaded = [load_config(c, (QUICK_OVERRIDES if quick else []) + list(overrides)) for c in configs]
    root = Path(out_dir or f"runs/study-{loaded[0].name}{'-quick' if quick else ''}")
    started = time.perf_counter()
    run_dirs = []
    for number, config in enumerate(loaded, 1):
        log(f"study {number}/{len(loaded)}: {config.name} ({len(config.policies)} policy models, "
            f"{len(config.methods)} methods, {len(config.decoders)} decoders, {len(config.seeds)} seeds)")
        store = run(resolve_run(config, values_checked=True), root / config.name, log=log, backend=backend)
        build_html_report(store.root)  # writes report.md too, from one analysis of the run
        run_dirs.append(store.root)
    index = ["# persalign study", "", f"Wall time of this invocation: {(time.perf_counter() - started) / 60:.1f} min"
             + (" (--quick: " + ", ".join(QUICK_OVERRIDES) + ")" if quick else ""), ""]
    for run_dir in run_dirs:
        verdict, findings = headline_lines(run_dir / "report.md")
        index += [f"## {run_dir.name}", "", f"[report.md]({run_dir.name}/report.md) · "
                  f"[report.html]({run_dir.name}/report.html)", ""] + verdict + [""] + findings + [""]
    (root / "index.md").write_text("\n".join(index))
    log(f"study written to {root / 'index.md'}")
    return run_dirs


def headline_lines(report_md: Path) -> tuple[list[str], list[str]]:
    """(the verdict sentences, the findings bullets) of a stored report, as a terminal shows them."""
    lines = report_md.read_text().splitlines()
    return [line for line in lines if line.startswith("For these users")], [line for line in lines
                                                                                if line.startswith("- ")]
