"""A copy of a finished run with chosen cells made unfinished, to rerun exactly those cells at a study's own shapes
(issue #73: the memory of the tasks that made a full run's peak, in minutes instead of hours).

Each chosen cell keeps its λ choice (lambda.json); its rows, timings and metrics go, so a rerun evaluates it again
(an ARGS cell reads the shared pass's stored batches: its scoring runs, not its decoding); a cell given with
--whole loses its folder. Trained models and the run's caches stay, and so do the shared ARGS pass's stored
batches and λ-choice validation groups (RUN_DIR/args_pass), which a rerun reads instead of decoding: give
--drop-pass to decode them again (the λ choice's and the batches' own memory and time). Rerun the copy with
bench_pool.py (it writes into DEST/workers-N/NAME) and compare its numbers with the original's: they must be equal.

    python benchmarks/unfinish_cells.py /work/full-73/workers-2/study_news_full /work/combo/workers-2 \\
        --cells 'Global_RM/seed-0' 'LoRE/seed-0' --whole 'ICL_8-shot/seed-*' 'P-DPO/seed-*'
    PERSALIGN_CACHE=/work/full-73/cache python benchmarks/bench_pool.py --workers 2 --warm-cache \\
        --keep /work/combo -- study configs/study_news_full.yaml
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import run_folder  # noqa: E402

CELL_FILES = ("metrics.json", "rows.jsonl", "timings.jsonl")


def unfinish(run_dir: Path, destination: Path, cells: list[str], whole: list[str],
             drop_pass: bool = False) -> list[str]:
    """Copy `run_dir` into `destination` (a folder of the same name) and unfinish the cells matched (and, with
    `drop_pass`, drop the shared ARGS pass's stored rows); their names."""
    copy = destination / run_dir.name
    if copy.exists():
        sys.exit(f"{copy}: exists already; give a destination without it")
    shutil.copytree(run_dir, copy)
    if drop_pass:
        shutil.rmtree(copy / "args_pass", ignore_errors=True)
    done = []
    for pattern, keep_choice in [(p, True) for p in cells] + [(p, False) for p in whole]:
        for cell in sorted(copy.glob(f"cells/*/{pattern}")):
            if keep_choice:
                for name in CELL_FILES:
                    (cell / name).unlink(missing_ok=True)
            else:
                shutil.rmtree(cell)
            done.append(str(cell.relative_to(copy)))
    (copy / "results.json").unlink(missing_ok=True)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=lambda t: Path(run_folder(t)))
    parser.add_argument("destination", type=Path)
    parser.add_argument("--cells", nargs="*", default=[], help="DECODER_FOLDER/seed-N globs: rows go, λ stays")
    parser.add_argument("--whole", nargs="*", default=[], help="DECODER_FOLDER/seed-N globs: the folder goes")
    parser.add_argument("--drop-pass", action="store_true", help="drop the shared ARGS pass's stored batches and "
                        "validation groups, so that the rerun decodes them")
    args = parser.parse_args()
    done = unfinish(args.run_dir, args.destination, args.cells, args.whole, args.drop_pass)
    print(f"{len(done)} cells unfinished in {args.destination / args.run_dir.name}: " + ", ".join(done))


if __name__ == "__main__":
    main()
