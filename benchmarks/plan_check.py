"""Did `persalign plan --choose-design` predict the study it chose? (issue #75)

The plan scales one stored run's noise components and seconds to another design. This reads the run the plan
was made from (--from-run) and the run of the design it chose (--check-run), and sets the reliabilities the plan
predicts for the checked run's real design (its users, harmonic queries per user and seeds) beside the ones that
run measures (the true share of its observed spread, ≤ 0 where its noise explains it all), both with a seed's
shift of a method counted as noise (planner/noise_components.py), and beside the report's own (which counts that
shift as true spread). With --hours it also sets the plan's hours beside a
measured wall time.

    python benchmarks/plan_check.py --from-run RUN_PLANNED_FROM --check-run RUN_CHOSEN [--hours 1.99 --wall-s 6900]
"""

from __future__ import annotations

import argparse

from common import emit, non_negative, run_folder


def compare(planned_from: str, checked: str) -> dict:
    from persalign.planner.noise_components import run_components

    old, new = run_components(planned_from), run_components(checked)
    design = (new.users, new.queries, new.seeds)
    rows = {}
    for metric, measured in new.metrics.items():
        predicted = old.metrics[metric].reliability(*design)
        spread = measured.observed_spread
        # measured as the share of the observed spread that is true (no fallback where it is ≤ 0)
        rows[metric] = {"predicted": round(predicted, 3),
                        "measured": round(measured.true_spread / spread, 3) if spread > 0 else None,
                        "report": round((spread - measured.user_noise) / spread, 3) if spread > 0 else None}
    return {"design": {"users": new.users, "queries": round(new.queries, 2), "seeds": new.seeds},
            "reliability": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from-run", type=run_folder, required=True, help="the run the plan was made from")
    parser.add_argument("--check-run", type=run_folder, required=True, help="the run of the design it chose")
    parser.add_argument("--hours", type=non_negative, help="the plan's hours for the chosen design")
    parser.add_argument("--wall-s", type=non_negative, help="the chosen design's measured wall seconds")
    args = parser.parse_args()
    result = compare(args.from_run, args.check_run)
    print(f"design checked: {result['design']}")
    print("| metric | predicted reliability | measured (seed shifts as noise) | the report's |")
    print("|---|---|---|---|")
    for metric, row in result["reliability"].items():
        print(f"| {metric} | {row['predicted']:.2f} | {row['measured']:.2f} | {row['report']} |")
    if args.hours and args.wall_s:
        result["hours"] = {"planned": args.hours, "measured": round(args.wall_s / 3600, 2)}
        print(f"hours: planned {args.hours:.2f}, measured {args.wall_s / 3600:.2f}")
    emit(result)


if __name__ == "__main__":
    main()
