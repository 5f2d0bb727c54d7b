"""Per-record DP (Chen et al. 2025) through the wire on DuckDB and Postgres: the demo's
``accounts`` table (E(r) = 1000 / balance in [1e-6, 1], U = 1e9).

Released values are checked against true values computed directly in the backend
(fixed seed) with the bounds the NOTICE states: the answer covers the rows with
ε(r) > ε_τ up to the stated noise, and the Thm 5.1 / 6.1 bound on the whole group
whenever its stated condition holds. Also: charges, repeats, refusals, the one-scan
SQL the backend receives, and the SQL level expression on both backends (the
DuckDB-only boundary check of E and the levels is tests/per_record/test_pr_levels_sql.py).
"""

from __future__ import annotations

import contextlib
import json
import re

import numpy as np
import psycopg
import pytest

from mechanisms.per_record import Levels
from proxy.demo import accounts as demo_accounts
from proxy.pipeline.per_record import policy_of
from proxy.pipeline.per_record_policy import compile_policy
from rewriter import parse
from rewriter.per_record import build_pr_plan, scan_sql, with_source


@pytest.fixture(scope="module")
def prs(service):
    """The service with the demo accounts table (idempotent if demo.py already loads it)."""
    gw = service.gw
    if gw.backend.dialect == "duckdb":
        demo_accounts.load_duckdb(gw.backend)
    else:
        service._call(demo_accounts.load_postgres(gw.backend))
    return service


def _run(svc, sql, role="analyst", params=None):
    notes = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        rows = c.execute(sql, params).fetchall()
    return rows, notes


def _truth(svc, sql):
    return svc._call(svc.gw.backend.fetch(sql))


@contextlib.contextmanager
def _backend_sql(svc):
    seen = []
    real = svc.gw.backend.fetch

    async def spy(sql, *a, **k):
        seen.append(sql)
        return await real(sql, *a, **k)

    svc.gw.backend.fetch = spy
    try:
        yield seen
    finally:
        del svc.gw.backend.fetch


def _spent(svc, role):
    return svc.gw.ledger.spent(role, "day")


def _answer(svc, role):
    """The role's latest stored release (per-cell ℓ, ε_τ, bounds and their conditions)."""
    led = svc.gw.ledger
    with led._rlock:
        (text,) = led._rdb.execute(
            "SELECT answer FROM releases WHERE role = ? ORDER BY id DESC LIMIT 1", (role,)
        ).fetchone()
    return json.loads(text)


def _check(svc, role, func, where="TRUE", group=None, domain=((),), part=None):
    """Check the role's latest release cell by cell against the backend's rows:

    * the answer is the aggregate over the kept rows (level >= ℓ, i.e. ε(r) > ε_τ) up to
      the stated noise (COUNT/SUM), or has at most the stated number of kept rows beyond
      it (MAX/MIN);
    * if the NOTICE's condition holds (every row has ε(r) > ε_τ/2), the whole group is
      within the stated Thm 5.1 / 6.1 bound.
    ``part``: the i-th of several aggregates of one statement (its own bounds, at ε / k).
    Returns [(value, true value over the whole group)] per cell."""
    ans = _answer(svc, role)
    pr = ans["per_record"]
    if part is not None:
        pr = ans["parts"][part]
        ans = dict(ans, values=[[v[part]] for v in ans["values"]])
    pol = policy_of(svc.gw, "accounts")
    rows = _truth(svc, f"SELECT {group or '0'}, balance FROM accounts WHERE {where}")
    cells = {c: [] for c in domain}
    for g, b in rows:
        cells[(g,) if group else ()].append(int(b))
    out = []
    for key, (value,), ell, noise, bound, cond in zip(
        ans["keys"], ans["values"], pr["ell"], pr["noise"], pr["bound"], pr["cond"]
    ):
        bal = np.array(cells[tuple(key)], dtype=np.int64)
        lvl = pol.levels.level(pol.pf(bal)) if bal.size else np.array([], dtype=int)
        kept = bal[lvl >= ell]
        whole_ok = cond is None or bal.size == 0 or float(pol.pf(bal.max())) * pr["weight"] > cond
        if func == "count":
            assert abs(value - kept.size) <= noise, (key, value, kept.size, noise)
            truth = bal.size
        elif func == "sum":
            assert abs(value - int(kept.sum())) <= noise, (key, value, int(kept.sum()), noise)
            truth = int(bal.sum())
        else:
            beyond = (
                (lambda x: int((x > value).sum())) if func == "max" else (lambda x: int((x < value).sum()))
            )
            assert beyond(kept) <= noise, (key, value, beyond(kept), noise)
            if whole_ok:
                assert beyond(bal) <= bound
            out.append((value, beyond(bal)))
            continue
        if whole_ok:
            assert abs(value - truth) <= bound, (key, value, truth, bound)
        out.append((value, truth))
    return out


def test_data_is_identical_on_both_backends(prs):
    bal, branch, kind = demo_accounts.accounts_numpy()
    got = _truth(
        prs,
        "SELECT COUNT(*), SUM(balance), SUM(balance * branch), MAX(balance), "
        "SUM(CASE WHEN kind = 'savings' THEN balance ELSE 0 END) FROM accounts",
    )[0]
    want = (
        bal.size,
        int(bal.sum()),
        int((bal * branch).sum()),
        int(bal.max()),
        int(bal[kind == "savings"].sum()),
    )
    assert tuple(int(x) for x in got) == want


def test_count_with_where(prs):
    before = _spent(prs, "analyst")
    where = "kind = 'savings' AND balance >= 1000"
    rows, notes = _run(prs, f"SELECT COUNT(*) FROM accounts WHERE {where}")
    assert len(rows) == 1 and isinstance(rows[0][0], int)
    ((value, true),) = _check(prs, "analyst", "count", where)
    assert value == rows[0][0] and abs(value - true) <= 0.05 * true  # sensible
    note = notes[0]
    assert "ε charged 1;" in note and "ε_τ " in note and "mechanism: prdp_count" in note
    assert "the count covers the rows with ε(r) > ε_τ (balance < " in note
    assert re.search(r"of noise \((90|99|99\.9)%\)", note)
    assert "Thm 5.1: error at most ±" in note
    assert _spent(prs, "analyst") - before == pytest.approx(1.0)


def test_sum_group_by_in_one_scan(prs):
    sql = "SELECT branch, SUM(balance) AS total FROM accounts WHERE kind = 'checking' GROUP BY branch ORDER BY branch"
    with _backend_sql(prs) as seen:
        rows, notes = _run(prs, sql)
    assert len(seen) == 1  # ONE backend scan
    assert re.search(r"GROUP BY k1, lvl\s*$", seen[0]) and "UNION" not in seen[0].upper()
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5]
    cells = _check(prs, "analyst", "sum", "kind = 'checking'", "branch", [(b,) for b in range(1, 6)])
    assert [r[1] for r in rows] == [v for v, _ in cells]
    for value, true in cells:
        assert abs(value - true) <= 0.2 * true  # sensible, not just bounded
    assert "prdp_sum_extension" in notes[0]
    assert "over 5 groups" in notes[0] or "in all 5 groups" in notes[0]


def test_max_in_two_round_trips(prs):
    sql = "SELECT kind, MAX(balance) FROM accounts WHERE branch <= 3 GROUP BY kind"
    with _backend_sql(prs) as seen:
        rows, notes = _run(prs, sql, role="other")
    assert len(seen) == 2  # level scan + values of levels >= ℓ
    assert re.search(r"GROUP BY k1, lvl\s*$", seen[0])
    assert "u.lvl >= l.ell" in seen[1] and "pr_ell" in seen[1]  # one query for all groups
    assert "are above the max" in notes[0] and "prdp_max_framework" in notes[0]
    cells = _check(prs, "other", "max", "branch <= 3", "kind", [("checking",), ("savings",)])
    assert sorted(rows) == [("checking", cells[0][0]), ("savings", cells[1][0])]
    ((nc,),) = _truth(prs, "SELECT COUNT(*) FROM accounts WHERE branch <= 3")
    assert all(above <= 0.25 * nc for _, above in cells)  # sensible: a top-quartile value


def test_min_by_symmetry(prs):
    rows, notes = _run(prs, "SELECT MIN(balance) AS lowest FROM accounts WHERE branch = 4", role="other")
    ((value, below),) = _check(prs, "other", "min", "branch = 4")
    ((mn, n),) = _truth(prs, "SELECT MIN(balance), COUNT(*) FROM accounts WHERE branch = 4")
    assert rows == [(value,)] and value >= mn and below <= 0.25 * n
    assert "are below the lowest" in notes[0] and "prdp_min_framework" in notes[0]


def test_empty_groups_are_answered(prs):
    rows, notes = _run(
        prs, "SELECT branch, COUNT(*) FROM accounts WHERE balance < 0 GROUP BY branch", role="other"
    )
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5]  # the public domain, not the data


def test_a_predicate_on_the_group_key_restricts_the_cells(prs):
    rows, notes = _run(
        prs, "SELECT branch, COUNT(*) FROM accounts WHERE branch = 2 GROUP BY branch", role="other"
    )
    assert [r[0] for r in rows] == [2]  # the rows the SQL asks for
    ((value, true),) = _check(prs, "other", "count", "branch = 2", "branch", [(2,)])
    assert abs(value - true) <= 0.05 * true


def test_charged_once_repeat_free(prs):
    sql = "SELECT COUNT(*) AS n FROM accounts WHERE balance BETWEEN 5000 AND 100000"
    before = _spent(prs, "other")
    first, _ = _run(prs, sql, role="other")
    mid = _spent(prs, "other")
    again, n2 = _run(
        prs, "select count(*) as n from ACCOUNTS where balance between 5000 and 100000 limit 5", role="other"
    )
    assert mid - before == pytest.approx(1.0) and _spent(prs, "other") == mid
    assert again == first and "repeat of an earlier release" in n2[0]
    b2 = _spent(prs, "analyst")  # another role gets its own release and pays for it
    _run(prs, sql, role="analyst")
    assert _spent(prs, "analyst") - b2 == pytest.approx(1.0)


def test_tier_epsilon_scales_the_policy(prs):
    before = _spent(prs, "half")
    rows, notes = _run(prs, "SELECT COUNT(*) FROM accounts", role="half")  # tier ε 0.5, no ladder
    assert _spent(prs, "half") - before == pytest.approx(0.5)
    assert "ε charged 0.5;" in notes[0] and "0.5 × 1000 / balance in [5e-07, 0.5]" in notes[0]
    ((value, true),) = _check(prs, "half", "count")
    assert abs(value - true) <= 0.05 * true
    pr = _answer(prs, "half")["per_record"]
    assert pr["weight"] == 0.5 and pr["eps_tau"][0] == 0.5 * Levels(1e-6, 1.0).lo[pr["ell"][0] - 1]


def test_extended_protocol_with_parameters(prs):
    rows, notes = _run(
        prs,
        "SELECT MAX(balance) FROM accounts WHERE branch = %s AND kind = %s",
        role="other",
        params=(5, "savings"),
    )
    assert len(rows) == 1 and isinstance(rows[0][0], int) and notes
    _check(prs, "other", "max", "branch = 5 AND kind = 'savings'")


def test_several_aggregates_split_the_epsilon_charged_once(prs):
    """COUNT(*) and SUM(balance) in one statement: each released at ε/2 (E_q = 0.5 × E),
    each within its own stated bounds, the statement charged the tier's ε once; the NOTICE
    says how ε was split; a repeat is free."""
    before = _spent(prs, "other")
    sql = "SELECT branch, COUNT(*) AS n, SUM(balance) AS total FROM accounts GROUP BY branch ORDER BY branch"
    rows, notes = _run(prs, sql, role="other")
    assert _spent(prs, "other") == pytest.approx(before + 1.0)
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5]
    ans = _answer(prs, "other")
    assert ans["epsilon"] == [0.5, 0.5] and [p["weight"] for p in ans["parts"]] == [0.5, 0.5]
    dom = [(b,) for b in range(1, 6)]
    counts = _check(prs, "other", "count", group="branch", domain=dom, part=0)
    sums = _check(prs, "other", "sum", group="branch", domain=dom, part=1)
    assert [r[1] for r in rows] == [c[0] for c in counts] and [r[2] for r in rows] == [s[0] for s in sums]
    assert "2 aggregates share the statement's ε, split equally" in notes[0]
    assert "1) ε_τ" in notes[0] and "2) ε_τ" in notes[0] and "prdp_count, prdp_sum_extension" in notes[0]
    again, notes2 = _run(prs, sql, role="other")
    assert again == rows and "repeat" in notes2[0] and _spent(prs, "other") == pytest.approx(before + 1.0)
    text = "\n".join(r[0] for r in _run(prs, "EXPLAIN " + sql, role="other")[0])
    assert "split equally" in text and "1) count(*) via prdp_count" in text and "2) sum(balance)" in text


REFUSED = [
    ("SELECT COUNT(*), MAX(balance) + 1 FROM accounts", "0A000"),
    ("SELECT COUNT(*), AVG(balance) FROM accounts", "0A000"),
    ("SELECT MAX(balance), MIN(balance) FROM accounts ORDER BY SUM(balance)", "0A000"),
    ("SELECT AVG(balance) FROM accounts", "0A000"),
    ("SELECT branch, COUNT(*) FROM accounts GROUP BY branch HAVING COUNT(*) > 10", "0A000"),
    ("SELECT MAX(kind) FROM accounts", "42804"),
    ("SELECT MAX(balance + 1) FROM accounts", "0A000"),
    ("SELECT MAX(balance, branch) FROM accounts", "0A000"),
    ("SELECT MIN(DISTINCT balance) FROM accounts", "0A000"),
    ("SELECT balance FROM accounts", "42501"),
    ("SELECT * FROM accounts", "42501"),
    ("SELECT balance, COUNT(*) FROM accounts GROUP BY balance", "42501"),
    ("SELECT COUNT(*) FROM accounts WHERE secret = 1", "42703"),
    ("SELECT COUNT(*) FROM accounts a JOIN pums p ON a.branch = p.sex", "42501"),
    ("SELECT COUNT(*) FROM accounts WHERE balance / branch > 1", "42501"),
    ("SELECT COUNT(DISTINCT branch) FROM accounts", "0A000"),
]


def test_refused_shapes_charge_nothing_and_never_reach_the_backend(prs):
    before = _spent(prs, "other")
    with _backend_sql(prs) as seen:
        with psycopg.connect(prs.dsn("other"), autocommit=True) as c:
            for sql, state in REFUSED:
                with pytest.raises(psycopg.Error) as e:
                    c.execute(sql)
                assert e.value.sqlstate == state, (sql, e.value.sqlstate, str(e.value))
                assert e.value.diag.message_hint or "declared" in str(e.value), sql  # what is allowed
    assert seen == [] and _spent(prs, "other") == before


def test_explain_is_free(prs):
    before = _spent(prs, "other")
    with _backend_sql(prs) as seen:
        rows, _ = _run(prs, "EXPLAIN SELECT branch, SUM(balance) FROM accounts GROUP BY branch", role="other")
    text = "\n".join(r[0] for r in rows)
    assert "prdp_sum_extension" in text and "GROUP BY" in text and "lvl" in text
    assert seen == [] and _spent(prs, "other") == before


def test_sql_levels_match_python_on_boundaries(prs):
    """The generated scan assigns every boundary balance the level Python's
    Levels.level(E(v)) gives it, on the served backend (DuckDB or Postgres)."""
    gw = prs.gw
    pol = compile_policy("accounts", gw.config.tables["accounts"])
    pf, lv = pol.pf, pol.levels
    assert (pf.alpha, pf.U, pf.eps_min, pf.eps_max, lv.L) == (1000.0, 10**9, 1e-6, 1.0, 20)
    vals = {0, 1, 999, 1000, 1001, 10**9 - 1, 10**9, 10**9 + 1, 3 * 10**9}
    for x in list(lv.hi) + list(lv.lo):
        V = pf.max_value(x)
        vals |= {V - 1, V, V + 1}
    vals = sorted(v for v in vals if v >= 0)
    table = f"pr_boundary_{gw.backend.dialect}"
    setup = (
        f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (balance BIGINT, branch INTEGER, kind TEXT); "
        f"INSERT INTO {table} (balance) VALUES {', '.join(f'({v})' for v in vals)}, (NULL)"
    )
    if gw.backend.dialect == "duckdb":
        gw.backend.execute_script(setup)
    else:
        prs._call(gw.backend.execute_script(setup))
    prp = with_source(build_pr_plan(parse("SELECT COUNT(*) FROM accounts"), gw.config), table)
    got = {int(k): int(v) for k, v in _truth(prs, scan_sql(prp, pol.sql, gw.config, gw.backend.dialect))}
    want = np.bincount(lv.level(pf(np.array(vals + [np.nan], dtype=float))), minlength=lv.L + 1)
    assert got == {i: int(c) for i, c in enumerate(want) if c}
    assert lv.level(pf(np.nan)) == 1  # NULL balance: eps_min, level 1


def test_max_beside_count_and_sum_in_one_statement(prs):
    """The dashboard tile: COUNT(*), SUM(balance), MAX(balance) in one statement. MAX's
    two-round release (level ℓ, then the values of levels ≥ ℓ) runs beside the one-round
    COUNT and SUM; each at ε/3 (E_q = ⅓ × E) within its own stated bounds; charged once."""
    before = _spent(prs, "other")
    sql = "SELECT COUNT(*), SUM(balance), MAX(balance) AS top FROM accounts"
    with _backend_sql(prs) as seen:
        rows, notes = _run(prs, sql, role="other")
    assert _spent(prs, "other") == pytest.approx(before + 1.0)
    assert len(seen) == 2  # the three level scans in one statement, then MAX's values round
    ans = _answer(prs, "other")
    assert ans["epsilon"] == [pytest.approx(1 / 3)] * 3
    ((n, _),) = _check(prs, "other", "count", part=0)
    ((s, _),) = _check(prs, "other", "sum", part=1)
    ((m, _),) = _check(prs, "other", "max", part=2)
    assert rows == [(n, s, m)]
    assert "3 aggregates share the statement's ε, split equally" in notes[0]
    assert "at most" in notes[0] and "are above the top" in notes[0]
    assert "prdp_count, prdp_sum_extension, prdp_max_framework" in notes[0]
    again, notes2 = _run(prs, sql, role="other")
    assert again == rows and "repeat" in notes2[0] and _spent(prs, "other") == pytest.approx(before + 1.0)
    text = "\n".join(r[0] for r in _run(prs, "EXPLAIN " + sql, role="other")[0])
    assert (
        "3 aggregates share ε 1, split equally" in text and "3) max(balance) via prdp_max_framework" in text
    )
    assert "round 2 after ℓ is known" in text and _spent(prs, "other") == pytest.approx(before + 1.0)


def test_max_and_min_together_per_group(prs):
    """MAX and MIN of one column per branch: two releases at ε/2 (the SUM they are both
    planned as is not shared), each within its rank bound; ORDER BY and LIMIT over the
    released cells as Postgres would."""
    sql = (
        "SELECT branch, MAX(balance) AS hi, MIN(balance) AS lo FROM accounts GROUP BY branch "
        "ORDER BY hi DESC LIMIT 3"
    )
    rows, notes = _run(prs, sql, role="other")
    dom = [(b,) for b in range(1, 6)]
    his = _check(prs, "other", "max", group="branch", domain=dom, part=0)
    los = _check(prs, "other", "min", group="branch", domain=dom, part=1)
    cells = [(b, hi[0], lo[0]) for b, hi, lo in zip(range(1, 6), his, los)]
    assert rows == sorted(cells, key=lambda r: -r[1])[:3]
    assert "2 aggregates share the statement's ε" in notes[0] and "below the lo" in notes[0]
    assert "prdp_max_framework, prdp_min_framework" in notes[0]
