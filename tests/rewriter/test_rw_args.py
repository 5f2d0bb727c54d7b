"""Fail closed on the AST: a rule given a node that carries an argument it does
not interpret refuses 0A000 naming the SQL construct — it never drops the meaning.

Each case parses a statement the rewriter accepts, finds one node of the given type,
sets an argument on it that no rule understands (a synthetic one, and every real sqlglot
argument of that type outside the allow-list), and checks the refusal."""

from __future__ import annotations

import pytest
from sqlglot import exp

import rewriter
from rewriter.args import ALLOWED, sql_name
from rewriter.errors import Refusal

# (accepted statement, node type to tamper with)
CASES = [
    ("SELECT COUNT(*) FROM pums WHERE hours IS NULL", exp.Is),
    ("SELECT COUNT(*) FROM pums WHERE name LIKE 'a%'", exp.Like),
    ("SELECT COUNT(*) FROM pums WHERE name ILIKE 'a%'", exp.ILike),
    ("SELECT COUNT(*) FROM pums WHERE age IN (1, 2)", exp.In),
    ("SELECT COUNT(*) FROM pums WHERE age BETWEEN 1 AND 2", exp.Between),
    ("SELECT COUNT(*) FROM pums WHERE NOT flag", exp.Not),
    ("SELECT COUNT(*) FROM pums WHERE flag AND age > 1", exp.And),
    ("SELECT COUNT(*) FROM pums WHERE flag OR age > 1", exp.Or),
    ("SELECT COUNT(*) FROM pums WHERE age = 1", exp.EQ),
    ("SELECT COUNT(*) FROM pums WHERE age <> 1", exp.NEQ),
    ("SELECT COUNT(*) FROM pums WHERE age > 1", exp.GT),
    ("SELECT COUNT(*) FROM pums WHERE age >= 1", exp.GTE),
    ("SELECT COUNT(*) FROM pums WHERE age < 1", exp.LT),
    ("SELECT COUNT(*) FROM pums WHERE age <= 1", exp.LTE),
    ("SELECT COUNT(*) FROM pums WHERE age IS NOT DISTINCT FROM 1", exp.NullSafeEQ),
    ("SELECT COUNT(*) FROM pums WHERE age IS DISTINCT FROM 1", exp.NullSafeNEQ),
    ("SELECT COUNT(*) FROM pums WHERE (age > 1)", exp.Paren),
    ("SELECT COUNT(*) FROM pums WHERE age + 1 > 1", exp.Add),
    ("SELECT COUNT(*) FROM pums WHERE age - 1 > 1", exp.Sub),
    ("SELECT COUNT(*) FROM pums WHERE age * 2 > 1", exp.Mul),
    ("SELECT COUNT(*) FROM pums WHERE age / 2 > 1", exp.Div),
    ("SELECT COUNT(*) FROM pums WHERE age % 2 = 1", exp.Mod),
    ("SELECT COUNT(*) FROM pums WHERE -age > 1", exp.Neg),
    ("SELECT COUNT(*) FROM pums WHERE abs(age) > 1", exp.Abs),
    ("SELECT COUNT(*) FROM pums WHERE floor(income) > 1", exp.Floor),
    ("SELECT COUNT(*) FROM pums WHERE ceil(income) > 1", exp.Ceil),
    ("SELECT COUNT(*) FROM pums WHERE round(income, 1) > 1", exp.Round),
    ("SELECT COUNT(*) FROM pums WHERE lower(name) = 'a'", exp.Lower),
    ("SELECT COUNT(*) FROM pums WHERE upper(name) = 'A'", exp.Upper),
    ("SELECT COUNT(*) FROM pums WHERE length(name) = 1", exp.Length),
    ("SELECT COUNT(*) FROM pums WHERE coalesce(age, 1) = 1", exp.Coalesce),
    ("SELECT COUNT(*) FROM pums WHERE least(age, 1) = 1", exp.Least),
    ("SELECT COUNT(*) FROM pums WHERE greatest(age, 1) = 1", exp.Greatest),
    ("SELECT COUNT(*) FROM pums WHERE CAST(age AS DOUBLE PRECISION) > 1", exp.Cast),
    ("SELECT COUNT(*) FROM pums WHERE CAST(age AS DOUBLE PRECISION) > 1", exp.DataType),
    ("SELECT COUNT(*) FROM pums WHERE age > 1", exp.Column),
    ("SELECT COUNT(*) FROM pums WHERE age > 1", exp.Literal),
    ("SELECT COUNT(*) FROM pums WHERE flag = true", exp.Boolean),
    ("SELECT COUNT(*) FROM pums WHERE age > $1", exp.Parameter),
    ("SELECT SUM(age) FROM pums", exp.Sum),
    ("SELECT AVG(age) FROM pums", exp.Avg),
    ("SELECT VAR_POP(age) FROM pums", exp.VariancePop),
    ("SELECT VAR_SAMP(age) FROM pums", exp.Variance),
    ("SELECT STDDEV(age) FROM pums", exp.Stddev),
    ("SELECT STDDEV_POP(age) FROM pums", exp.StddevPop),
    ("SELECT STDDEV_SAMP(age) FROM pums", exp.StddevSamp),
    ("SELECT COUNT(age) FROM pums", exp.Count),
    ("SELECT COUNT(*) AS n FROM pums", exp.Alias),
    ("SELECT sex, COUNT(*) FROM pums GROUP BY sex", exp.Group),
    ("SELECT sex, COUNT(*) FROM pums GROUP BY sex ORDER BY sex", exp.Order),
    ("SELECT sex, COUNT(*) FROM pums GROUP BY sex ORDER BY sex", exp.Ordered),
    ("SELECT COUNT(*) FROM pums", exp.Table),
    ("SELECT ROUND(AVG(age), 1) FROM pums", exp.Round),
    ("SELECT CAST(COUNT(*) AS DOUBLE PRECISION) FROM pums", exp.Cast),
    ("SELECT sex FROM pums GROUP BY sex HAVING COUNT(*) > 5", exp.GT),
    ("SELECT sex FROM pums GROUP BY sex HAVING COUNT(*) > CASE sex WHEN 1 THEN 3 ELSE 4 END", exp.Case),
    ("SELECT sex FROM pums GROUP BY sex HAVING COUNT(*) > CASE sex WHEN 1 THEN 3 ELSE 4 END", exp.If),
]


# arguments with a dedicated refusal of their own (any SQLSTATE: the point is fail closed)
DEDICATED = {(exp.Table, k) for k in ("joins", "laterals", "pivots", "sample")} | {
    (exp.In, k) for k in ("query", "unnest", "field")
}


def _ids():
    return [f"{t.__name__}:{sql[22:60]}" for sql, t in CASES]


def _tampered(sql: str, kind: type, key: str, value=True) -> exp.Expression:
    tree = rewriter.parse(sql)
    node = next(n for n in tree.walk() if type(n) is kind)
    node.set(key, value)
    return tree


@pytest.mark.parametrize("sql,kind", CASES, ids=_ids())
def test_accepted_as_written(config, sql, kind):
    rewriter.build_plan(rewriter.parse(sql), config, [1] if "$1" in sql else None)


@pytest.mark.parametrize("sql,kind", CASES, ids=_ids())
def test_unknown_argument_refused(config, sql, kind):
    params = [1] if "$1" in sql else None
    unknown = ["dpgate_unknown_arg"] + sorted(set(kind.arg_types) - ALLOWED[kind])
    for key in unknown:
        tree = _tampered(sql, kind, key)
        with pytest.raises(Refusal) as err:
            rewriter.build_plan(tree, config, params)
        if (kind, key) in DEDICATED:
            continue
        assert err.value.sqlstate == "0A000", (key, err.value.message)
        node = next(n for n in tree.walk() if type(n) is kind)
        assert sql_name(node) in err.value.message, (key, err.value.message)


def test_every_allow_listed_type_is_exercised():
    """Central rules: every node type with an allow-list that a central statement can
    contain is tampered with above (local-only types and the extreme/quantile path's
    excepted: tests/rewriter/test_rw_quantile.py tampers with those)."""
    local_only = {
        exp.WithinGroup,
        exp.PercentileDisc,
        exp.PercentileCont,
        exp.Max,
        exp.Min,
        exp.Median,
        exp.Escape,
        exp.Star,
        exp.Null,
        exp.Identifier,
        exp.Where,
        exp.Having,
        exp.From,
        exp.Limit,
        exp.Offset,
        exp.TableAlias,
        exp.TryCast,
    }
    assert set(ALLOWED) - local_only <= {t for _, t in CASES}


@pytest.mark.parametrize(
    "sql,name",
    [
        ("SELECT COUNT(*) FROM pums WHERE age || 'x' = 'ax'", "||"),
        ("SELECT COUNT(*) FROM pums WHERE name SIMILAR TO 'a%'", "SIMILAR TO"),
        ("SELECT COUNT(*) FROM pums WHERE name ~ 'a'", "~"),
        ("SELECT COUNT(*) FROM pums WHERE name ~* 'a'", "~*"),
        ("SELECT COUNT(*) FROM pums WHERE name LIKE 'a!%' ESCAPE '!'", "ESCAPE"),
        ("SELECT COUNT(*) FROM pums WHERE age & 1 = 1", "&"),
        ("TRUNCATE pums", "TRUNCATE"),
    ],
)
def test_refusals_speak_sql(config, sql, name):
    with pytest.raises(Refusal) as err:
        rewriter.build_plan(rewriter.parse(sql), config)
    msg = err.value.message
    assert name in msg
    for cls in ("DPIPE", "SIMILARTO", "REGEXPLIKE", "REGEXPILIKE", "BITWISEAND", "TRUNCATETABLE"):
        assert cls not in msg.upper()


def _class_names() -> set[str]:
    """sqlglot class names as a refusal would spell them (``DPIPE``, ``SIMILARTO``): the
    multi-word ones (which no SQL keyword equals) and a few single words SQL never uses."""
    import re

    names = set()

    def walk(cls):
        for sub in cls.__subclasses__():
            if len(re.findall(r"[A-Z]", sub.__name__)) >= 2:
                names.add(sub.__name__.upper())
            walk(sub)

    walk(exp.Expression)
    sql_words = {"ILIKE", "TABLESAMPLE"}  # class names that are SQL too
    return (names - sql_words) | {"COMMAND", "ANONYMOUS", "PAREN", "NEG", "DPIPE"}


def test_corpus_refusals_never_name_sqlglot_classes(config):
    """Every refusal in the rewriter's corpus and the hostile corpus speaks SQL."""
    import re
    from pathlib import Path

    names = _class_names()
    here = Path(__file__).parent
    bad = []
    for path in (here / "refusals.txt", here.parent / "hardening" / "hostile.txt"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            sql = line.split("|", 1)[1].strip()
            try:
                rewriter.build_plan(rewriter.parse(sql), config)
            except Refusal as r:
                words = set(re.findall(r"[A-Z_]+", (r.message + " " + (r.hint or "")).upper()))
                if words & names:
                    bad.append((sql, r.message, sorted(words & names)))
            except Exception:
                pass
    assert not bad, "\n".join(map(repr, bad))
