"""The words of a MAX/MIN/percentile release: why its mechanism was chosen, the rank it aims
at, its rank statement and from which group size its answers are useful (EXPLAIN and the
NOTICE of :mod:`.extreme`). Text only, from the mechanism's public parameters."""

from __future__ import annotations

from mechanisms.extreme import USEFUL, CappedRankExtreme, RankTargetExtreme, candidates, choose_extreme
from mechanisms.quantile import ExpMechQuantile, ProtectedQuantile, choose_quantile, quantile_candidates

__all__ = ["aim_text", "choice_text", "rank_mechanism_text", "tie_words", "useful_text"]


def choice_text(m: RankTargetExtreme | ExpMechQuantile) -> str:
    """Why this mechanism (EXPLAIN): each candidate's regret and the chosen one's useful
    group size."""
    if isinstance(m, ExpMechQuantile):
        labels = [_label(c) for c in quantile_candidates(m.epsilon, m.grid, m.q, m.beta)]
        _, regrets = choose_quantile(m.epsilon, m.grid, m.q, m.beta)
    else:
        labels = [_label(c) for c in candidates(m.epsilon, m.grid, m.func, m.beta)]
        _, regrets = choose_extreme(m.epsilon, m.grid, m.func, m.beta)
    listed = ", ".join(f"{label} {r:.2f}" for label, r in zip(labels, regrets))
    return (
        f"chosen by the error laws (expected relative rank error — the share of the group's rows between "
        f"the answer and the true one, 1 outside the data's range — on n rows spread over the middle half, "
        f"and the middle tenth, of the range; "
        f"largest excess over the best across n = 2..100,000: {listed}); {useful_text(m)}"
    )


def tie_words(m: RankTargetExtreme) -> str:
    """How ties enter the rank statement (EXPLAIN): the capped rank counts a tie block holding
    its aim as exact; the shifted rank's statement adds the rows tied at one value."""
    return "(ties included)" if isinstance(m, CappedRankExtreme) else "(plus rows tied at one value)"


def aim_text(m: RankTargetExtreme) -> str:
    """The rank the mechanism aims at (EXPLAIN)."""
    if isinstance(m, CappedRankExtreme):
        return (
            f"aims at min(k0, {m.share}·n) rows beyond the answer (k0 = {m.k0}; the capped rank: the "
            f"shifted rank on groups of ≥ {float(m.k0 / m.share):g} rows, a rank inside the data below)"
        )
    return f"aims at k0 = {m.k0} rows beyond the answer (Chen et al. 2025 §6.4)"


def _label(m: RankTargetExtreme | ExpMechQuantile) -> str:
    if isinstance(m, CappedRankExtreme):
        return f"capped rank s = {m.share}"
    if isinstance(m, ProtectedQuantile):
        return f"protected s = {m.share}"
    return "plain exponential mechanism" if isinstance(m, ExpMechQuantile) else "shifted rank"


def useful_text(m: RankTargetExtreme | ExpMechQuantile | dict) -> str:
    """From which group size the answer is useful (expected relative rank error ≤ USEFUL)."""
    n = m.get("useful_from") if isinstance(m, dict) else m.useful_from()
    if n is None:
        return f"no group of up to 10^6 rows gets an expected relative rank error ≤ {USEFUL:.0%} at this ε"
    return (
        f"useful (expected relative rank error ≤ {USEFUL:.0%}) from about {n} rows per group; "
        "on smaller groups the answer is mostly noise"
    )


def rank_mechanism_text(func: str, e: dict, groups: str) -> str:
    """The rank statement of a MAX/MIN release (NOTICE), for the mechanism that drew it."""
    side = "above" if func == "max" else "below"
    if "share" in e:
        how = (
            f"by the capped-rank exponential mechanism (aiming at min(k0, {e['share']}·n) rows {side} the "
            f"answer, n the group's rows; k0 = {e['k0']})"
        )
    else:
        how = f"by the shifted-rank exponential mechanism (aiming at k0 = {e['k0']} rows {side} the answer)"
    tail = f"; {useful_text(e)}" if "useful_from" in e else ""
    ties = (
        " (ties included: a value whose tied rows contain the aim counts as exact)"
        if "share" in e
        else ", plus the rows sharing one value when many do,"
    )
    return (
        f"{how}: with probability {1 - e['beta']:.0%} at most {2 * e['k0']} rows{groups}{ties} lie {side} the "
        f"answer (a rank error, not value units){tail}"
    )
