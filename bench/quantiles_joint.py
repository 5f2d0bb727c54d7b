"""Several quantiles of one column at EQUAL TOTAL ε, on PUMS age [0, 100] (grid step 1) and
income [0, 500000] (grid step 5), n = 1000:

* ``separate``: k releases of the exponential mechanism (:class:`mechanisms.quantile.ExpMechQuantile`)
  at ε/k each — what k statements at ε/k give, and what one statement with the budget split
  gives before its answers are sorted;
* ``split+sorted``: the same draws put in ascending order of q (:func:`mechanisms.quantile.ascending`,
  post-processing);
* ``recursive``: :class:`mechanisms.quantile.RecursiveQuantiles` (Kaplan, Schnapp and Stemmer
  2022) at ε: ⌈log2(k + 1)⌉ rounds at ε/⌈log2(k + 1)⌉, each on disjoint rows.

Error: the rank error |#{x ≤ y} − q·n| in rows, averaged over the k quantiles and the trials
(and its 95th percentile over trials of the largest of the k), and how often the k answers of
``separate`` are not ascending. Fixed seeds.

Run: python -m bench.quantiles_joint [--quick]
"""

from __future__ import annotations

import argparse
from fractions import Fraction

import numpy as np

from mechanisms.extreme import ExtremeGrid
from mechanisms.quantile import ExpMechQuantile, RecursiveQuantiles, ascending
from mechanisms.rng import SeededSource
from proxy.demo import pums_rows

COLUMNS = {"age": (0, "int", 0, 100), "income": (4, "float", 0, 500_000)}
LEVELS = {
    2: ("0.25", "0.75"),
    3: ("0.25", "0.5", "0.75"),
    5: ("0.1", "0.25", "0.5", "0.75", "0.9"),
    9: tuple(f"0.{i}" for i in range(1, 10)),
    15: tuple(str(i / 16) for i in range(1, 16)),
}
EPSILONS = (0.5, 1.0)


def _hist(values: np.ndarray, grid: ExtremeGrid) -> list[tuple[int, int]]:
    idx = np.clip(np.floor((values - grid.lower) / grid.step), 0, grid.U).astype(np.int64)
    u, c = np.unique(idx, return_counts=True)
    return list(zip(u.tolist(), c.tolist()))


def _rank_errors(values: np.ndarray, ys, qs) -> list[float]:
    n = values.size
    return [abs(float((values <= y).sum()) - float(q) * n) for y, q in zip(ys, qs)]


def run(trials: int) -> list[dict]:
    rows = pums_rows()
    out = []
    for col, (i, type_, lo, hi) in COLUMNS.items():
        values = np.array([r[i] for r in rows], dtype=float)
        grid = ExtremeGrid.for_column(type_, lo, hi)
        hist = _hist(values, grid)
        for eps in EPSILONS:
            for k, levels in LEVELS.items():
                qs = tuple(Fraction(q) for q in levels)
                src = SeededSource(1000 * k + int(eps * 10))
                sep, srt, rec, worst = [], [], [], {"separate": [], "split+sorted": [], "recursive": []}
                disorder = 0
                for _ in range(trials):
                    ys = [ExpMechQuantile(eps / k, grid, q).release(hist, src) for q in qs]
                    disorder += ys != sorted(ys)
                    rq = RecursiveQuantiles(eps, grid, qs).release_all(hist, src)
                    for name, got, acc in (
                        ("separate", ys, sep),
                        ("split+sorted", ascending(ys, qs), srt),
                        ("recursive", [rq[q] for q in qs], rec),
                    ):
                        errs = _rank_errors(values, got, qs)
                        acc.extend(errs)
                        worst[name].append(max(errs))
                out.append(
                    {
                        "column": col,
                        "epsilon": eps,
                        "k": k,
                        "mean_rank_error": {
                            "separate": float(np.mean(sep)),
                            "split+sorted": float(np.mean(srt)),
                            "recursive": float(np.mean(rec)),
                        },
                        "p95_max_rank_error": {n: float(np.percentile(w, 95)) for n, w in worst.items()},
                        "separate_not_ascending": disorder / trials,
                        "trials": trials,
                    }
                )
    return out


def table(results: list[dict]) -> str:
    head = (
        "column  ε    k | mean rank error (rows): separate  split+sorted  recursive | "
        "p95 of max over k: separate  split+sorted  recursive | separate not ascending"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        m, p = r["mean_rank_error"], r["p95_max_rank_error"]
        lines.append(
            f"{r['column']:<7} {r['epsilon']:<4g} {r['k']:>2} | {m['separate']:>31.1f} {m['split+sorted']:>13.1f} "
            f"{m['recursive']:>10.1f} | {p['separate']:>27.1f} {p['split+sorted']:>13.1f} {p['recursive']:>10.1f} | "
            f"{r['separate_not_ascending']:>22.0%}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="40 trials instead of 200")
    args = ap.parse_args()
    results = run(40 if args.quick else 200)
    print(table(results))
    print(headline(results))


def headline(results: list[dict]) -> str:
    """The goal: from k = 3, the joint release's largest rank error (95th percentile over the
    trials) is below that of k separate releases at the same total ε."""
    cases = [r for r in results if r["k"] >= 3]
    won = [r for r in cases if r["p95_max_rank_error"]["recursive"] < r["p95_max_rank_error"]["separate"]]
    return (
        f"HEADLINE: k ≥ 3 quantiles of one column at equal total ε: the joint release's largest rank "
        f"error (p95) is below k separate releases' in {len(won)}/{len(cases)} cases (goal: all)"
    )


if __name__ == "__main__":
    main()
