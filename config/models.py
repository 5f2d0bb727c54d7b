"""Pydantic models of a dpgate configuration file (one TOML file).

Every model forbids unknown keys, so a typo is an error that names the field.
Loading and error formatting live in :mod:`config.load`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from .base import StrictModel
from .service import TLS, Backend, LedgerStore, Limits, Server

if TYPE_CHECKING:
    import datetime as dt

__all__ = [
    "Backend",
    "AUTO",
    "AutoBounds",
    "Column",
    "Config",
    "LedgerStore",
    "Limits",
    "LocalCategory",
    "LocalColumn",
    "LocalPolicy",
    "PrivacyPolicy",
    "Role",
    "Server",
    "TLS",
    "Table",
    "Tier",
    "Unit",
]

# The ledger keeps ε as integers of nano-ε in 64-bit columns (SQLite INTEGER, Postgres bigint):
# a tier's ε and budget must be storable there, and a per-query ε must not round to zero.
LEDGER_NANO = 1_000_000_000
LEDGER_MAX_EPSILON = (2**63 - 1) // LEDGER_NANO  # 9,223,372,036 ε: one role's spend in a period
LEDGER_MIN_EPSILON = 1 / LEDGER_NANO

ColumnType = Literal["int", "float", "text", "bool", "date", "timestamp"]
TIME_TYPES = ("date", "timestamp")
Scalar = bool | int | float | str
AUTO = "auto"  # a contribution or clamping bound dpgate chooses (proxy.pipeline.auto_bounds)


class Column(StrictModel):
    """A declared column: its type, the clamping bounds for SUM/AVG, and the public
    domain that makes it groupable (a GROUP BY releases one noisy cell per value)."""

    type: ColumnType = "int"
    """int, float, text, bool, date or timestamp; must fit the backend column (check-config --backend)."""
    lower: float | str | None = None  # date / timestamp columns: ISO strings
    """clamping lower bound for SUM/AVG/VAR (numbers), or the earliest value as an ISO string
    (date/timestamp columns); public. `"auto"` (int/float columns of a table with a privacy unit):
    chosen by dpgate once per data version, ε-DP, from a noisy log-scale histogram of each unit's
    smallest value (the [auto_bounds] quantile from below), charged to the [auto_bounds] budget."""
    upper: float | str | None = None
    """clamping upper bound (numbers), or the latest value as an ISO string (date/timestamp); give both or
    neither. `"auto"`: chosen like lower, from each unit's largest value."""
    domain: list[Scalar] | None = None
    """the public list of values that makes the column groupable: a GROUP BY releases one noisy cell per
    value (and only these)."""
    domain_range: tuple[int, int] | None = None
    """[lo, hi]: an int column's public domain lo..hi (at most 100001 values); instead of domain."""
    nullable: bool = True
    """whether the column may hold NULL."""
    description: str = ""
    """free text shown to analysts (column comment in \\d and information_schema)."""
    avg_mechanism: Literal["hourglass", "laplace_transformed", "shifted_laplace"] = "hourglass"
    """AVG's mechanism: the hourglass add-remove optimal mean (Kulesza et al. 2024) or a baseline."""
    per_unit: bool = False
    """on a table with a privacy unit: each unit has ONE value of this column (a customer's home city).
    A GROUP BY over such columns only counts each unit in one group (L0 = 1 instead of
    max_groups_per_unit: less noise, a cheaper partition selection); the scan enforces it (a unit
    with several values keeps one, by the keyed hash)."""

    @field_validator("lower", "upper")
    @classmethod
    def _number_unless_time(cls, v: Any, info: ValidationInfo) -> Any:
        """Numbers for int/float columns (a numeric string is read as a number, as before);
        ISO strings only for date/timestamp columns."""
        if v == AUTO:  # chosen by dpgate (checked with the type in _check)
            return v
        if isinstance(v, str) and info.data.get("type") not in TIME_TYPES:
            try:
                return float(v)
            except ValueError:
                raise ValueError(
                    "Input should be a valid number, unable to parse string as a number"
                ) from None
        return v

    @model_validator(mode="after")
    def _check(self) -> Column:
        if (self.lower is None) != (self.upper is None):
            raise ValueError("give both lower and upper, or neither")
        if self.auto_bounds:
            if self.type not in ("int", "float"):
                raise ValueError('lower/upper = "auto" is only for int and float columns')
        elif self.lower is not None and self.type in TIME_TYPES:
            bounds = self.time_bounds  # ISO strings; a date/timestamp column groups by date parts
            if bounds is not None and bounds[0] > bounds[1]:
                raise ValueError(f"lower ({self.lower}) is later than upper ({self.upper})")
        elif self.lower is not None:
            lower, upper = self.lower, self.upper
            if isinstance(lower, str) or isinstance(upper, str):
                raise ValueError("lower and upper must be numbers for int and float columns")
            assert upper is not None  # both or neither (checked above)
            if self.type not in ("int", "float"):
                raise ValueError("lower/upper bounds are only for int and float columns")
            if not (math.isfinite(lower) and math.isfinite(upper)):
                raise ValueError("lower and upper must be finite numbers")
            if lower > upper:
                raise ValueError(f"lower ({self.lower}) is greater than upper ({self.upper})")
        if self.type in TIME_TYPES and (self.domain is not None or self.domain_range is not None):
            raise ValueError(
                "a date/timestamp column takes lower/upper (ISO strings), not a domain: "
                "it groups by date_trunc(...) or extract(...) over those bounds"
            )
        if self.domain is not None and self.domain_range is not None:
            raise ValueError("give domain or domain_range, not both")
        if self.domain_range is not None:
            lo, hi = self.domain_range
            if self.type != "int":
                raise ValueError("domain_range is only for int columns")
            if hi < lo or hi - lo > 100_000:
                raise ValueError("domain_range must be [lo, hi] with lo <= hi and at most 100001 values")
        if self.domain is not None:
            if len(set(map(repr, self.domain))) != len(self.domain):
                raise ValueError("domain values must be distinct")
            if not self.domain:
                raise ValueError("domain must not be empty")
        return self

    @property
    def auto_bounds(self) -> bool:
        """lower or upper is `"auto"`: chosen by dpgate (a config still to be resolved)."""
        return self.lower == AUTO or self.upper == AUTO

    @property
    def bounded(self) -> bool:
        """Numeric clamping bounds declared (what SUM/AVG need); `"auto"` ones not yet chosen
        are not bounds."""
        return self.lower is not None and self.type in ("int", "float") and not self.auto_bounds

    @property
    def time_bounds(self) -> tuple[dt.date, dt.date] | None:
        """A date/timestamp column's declared [lower, upper] as ``datetime.date`` /
        ``datetime.datetime`` values (None when not declared)."""
        if self.type not in TIME_TYPES or self.lower is None:
            return None
        import datetime as dt

        conv = dt.date.fromisoformat if self.type == "date" else dt.datetime.fromisoformat
        try:
            lo, hi = conv(str(self.lower)), conv(str(self.upper))
        except ValueError:
            raise ValueError(
                f"lower/upper of a {self.type} column must be ISO strings such as "
                "'2025-01-01'" + (" or '2025-01-01 00:00:00'" if self.type == "timestamp" else "")
            ) from None
        if (
            isinstance(lo, dt.datetime)
            and lo.tzinfo is not None
            or (isinstance(hi, dt.datetime) and hi.tzinfo is not None)
        ):
            raise ValueError("timestamp bounds take no time zone (timestamp without time zone)")
        return lo, hi

    @cached_property
    def public_domain(self) -> tuple[Scalar, ...] | None:
        """The declared domain as a tuple of Python values, or None if not groupable (made
        once: a plan reads it several times and a large range is costly to build)."""
        if self.domain_range is not None:
            return tuple(range(self.domain_range[0], self.domain_range[1] + 1))
        if self.domain is None:
            return None
        conv = {"int": int, "float": float, "text": str, "bool": bool}[self.type]
        return tuple(conv(v) for v in self.domain)


class PrivacyPolicy(StrictModel):
    """Per-record DP (Chen et al. 2025): the budget of each record is ``function`` of its
    values — a named shortcut of the paper (``inverse``: α/v, ``sqrt``: α/√v,
    ``log``: α/ln(v)⁴, applied to ``column``) or a SQL expression over declared
    columns — clamped to [eps_min, eps_max]; values are bounded by ``value_bound``."""

    function: str
    """each record's ε: inverse (α/v), sqrt (α/√v), log (α/ln(v)⁴) of `column`, or a SQL expression over
    declared columns."""
    column: str | None = None
    """the column the named shortcut function reads."""
    alpha: float | None = None
    """α of the named shortcut function."""
    eps_min: float = Field(gt=0)
    """each record's ε is clamped to at least this."""
    eps_max: float = Field(gt=0)
    """each record's ε is clamped to at most this."""
    value_bound: float = Field(gt=0)
    """values are bounded by this (|v| <= value_bound) for SUM."""
    beta: float = Field(default=0.1, gt=0, lt=1)
    """failure probability of the per-record mechanisms' accuracy statements."""
    sum_method: Literal["auto", "extension", "framework"] = "auto"
    """per-record SUM: the extension, the framework of per-record DP (Chen et al. 2025), or auto (chosen per query)."""

    @model_validator(mode="after")
    def _check(self) -> PrivacyPolicy:
        if self.eps_min > self.eps_max:
            raise ValueError(f"eps_min ({self.eps_min}) is greater than eps_max ({self.eps_max})")
        if self.function in ("inverse", "sqrt", "log"):
            if self.column is None or self.alpha is None:
                raise ValueError(f"function = '{self.function}' needs column and alpha")
        return self


EdgePolicy = Literal["interpolate", "whole"]
QuantilePoint = Literal["auto", "midpoint", "upper"]


class LocalColumn(StrictModel):
    """A private ordinal column of a local (metric-LDP) table (Xiang et al. 2020): values in
    [lo, hi] cut into ``buckets`` buckets; ``epsilon`` is ε per bucket step; ``edges``
    overrides the table's edge-bucket policy for this column (spec §8)."""

    lo: float
    """lowest value of the private ordinal column."""
    hi: float
    """highest value of the private ordinal column."""
    buckets: int = Field(ge=2, le=4096)
    """number of buckets [lo, hi] is cut into (2..4096)."""
    epsilon: float = Field(gt=0)
    """metric-LDP ε per bucket step (Xiang et al. 2020)."""
    edges: EdgePolicy | None = None
    """this column's edge-bucket policy, overriding the table's `edges`."""

    @model_validator(mode="after")
    def _check(self) -> LocalColumn:
        if self.lo >= self.hi:
            raise ValueError("lo must be below hi")
        return self


MAX_CATEGORIES = 128  # d of a categorical Subset column (one bit column per level and category)


class LocalCategory(StrictModel):
    """A private categorical column (declared ``domain``: d values), perturbed ONCE per row by the
    multi-tier Subset mechanism (multi-tier privacy, §5) for the tiers of ``ladder``; a tier reads its level."""

    ladder: str
    """the tier ladder whose levels the Subset reports serve (tiers with ladder = this name)."""
    variant: Literal[1, 2] = 2  # template generator: Alg. 3 (1) or Alg. 5 (2)
    """template generator: Alg. 3 (1) or Alg. 5 (2) of the multi-tier privacy paper (docs/references.md)."""


class LocalPolicy(StrictModel):
    """A local table: rows are perturbed on the way in; only reports are stored."""

    columns: dict[str, LocalColumn] = Field(default_factory=dict)
    """private ordinal columns (metric LDP), by name."""
    categories: dict[str, LocalCategory] = Field(default_factory=dict)  # Subset columns (multi-tier privacy)
    """private categorical columns perturbed by multi-tier Subset (multi-tier privacy), by name."""
    joint: list[list[str]] = Field(default_factory=list)  # groups for multi-dim ranges
    """groups of columns collected jointly for multi-dimensional ranges."""
    estimator: Literal["paper", "known_n"] = "paper"
    """paper: the metric-LDP estimator of Xiang et al. 2020; known_n: with the public row count."""
    null_policy: Literal["refuse", "lo"] = "refuse"
    """a NULL private value at ingestion: refuse the row, or take it as lo."""
    weight: str | None = None  # optional weight column (public)
    """optional public weight column."""
    reports: str | None = None  # backend table holding the reports (default <name>_reports)
    """backend table holding the reports (default <table>_reports)."""
    # query-time post-processing (spec §8, §3.12; no privacy cost): edge buckets of a cut range,
    # the value percentile_disc returns for its bucket, a monotone (PAVA) CDF, clipping to [0, n]
    edges: EdgePolicy = "interpolate"
    """query time: a range cutting a bucket interpolates it or takes it whole (spec §8)."""
    quantile_point: QuantilePoint = "auto"
    """the value percentile_disc returns within its bucket."""
    isotonic_cdf: bool = Field(default=False, strict=True)
    """make the estimated CDF monotone (PAVA); post-processing, free."""
    clip: bool = Field(default=False, strict=True)
    """clip estimated counts to [0, n]; post-processing, free."""


MAX_GROUPS = 1000  # max_groups_per_unit's largest value (also the top of an "auto" choice's grid)
MAX_ROWS = 100_000  # max_rows_per_unit's largest value


class AutoBounds(StrictModel):
    """The owner's budget for the bounds dpgate chooses (`"auto"`): each choice is one ε-DP
    release over the private data, made once per data version and kept in the ledger."""

    epsilon: float = Field(default=0.1, gt=0, le=10)
    """ε of one choice (a table's max_rows_per_unit, its max_groups_per_unit, a column's lower,
    its upper), per privacy unit. Every analyst's answers then hold at (this × the choices of
    the tables they read) + their own ε: the chosen bounds are public and shared by all."""
    budget: float = Field(default=2.0, gt=0)
    """ε the choices of one data version may spend together (the owner's budget, charged to no
    role); a choice that does not fit is not made, and statements that need it are refused (55000)
    until the config gives the bound or raises this."""
    quantile: float = Field(default=0.95, gt=0.5, lt=1)
    """the share of units a chosen bound covers: a contribution bound at least this quantile of the
    units' contributions, an upper (lower) clamping bound at least (at most) this quantile of the
    units' largest (smallest) values — up to the grid step and the noise, among the units in bins
    the noisy histogram supports (a thin tail of bins holding fewer than ⌈ln(bins·k/β)/ε⌉ units each
    is not seen)."""
    beta: float = Field(default=0.05, gt=0, lt=1)
    """the chance that any choice of a data version takes a histogram bin holding no unit for one
    (each of the k choices uses β/k: the support threshold is ⌈ln(bins·k/β)/ε⌉ units)."""


class Table(StrictModel):
    """A declared (public-schema) table; `source` is the relation in the backend."""

    source: str | None = None
    """the relation in the backend: a table or view (default: the table's name), on Postgres schema-
    qualified (`sales.orders`), on DuckDB also a table function (`read_parquet('/data/*.parquet')`,
    `read_csv('/data/x.csv')`)."""
    description: str = ""
    """free text shown to analysts (table comment)."""
    columns: dict[str, Column]
    """the declared columns, by lower-case name; only these exist for clients."""
    mode: Literal["central", "local"] = "central"
    """central (the proxy adds noise to answers) or local (rows are perturbed on the way in: metric LDP, Xiang et al. 2020)."""
    privacy: PrivacyPolicy | None = None
    """per-record DP policy (Chen et al. 2025): each record's budget is a function of its values."""
    local: LocalPolicy | None = None
    """the local table's policy (mode = 'local')."""
    privacy_unit: str | None = None
    """how this table's rows belong to people (the privacy unit). Usually left out: a private table
    reaches a declared `[units.X]` through its `references` (a chain: lineitem → orders → customer)
    and that is its unit. Written, it is a unit's name (`"customer"`: required to reach that unit),
    a declared column of this table that identifies the person (`"customer_id"`), or a referenced
    table's column (`"orders.customer_id"`, with `references.<column> = "orders"`). With a unit
    every answer is ε-DP per unit: adding or removing one unit and ALL its rows changes any
    answer's distribution by at most e^ε (contribution bounded by the two fields below). Without
    one the guarantee is per row."""
    max_groups_per_unit: Annotated[int, Field(ge=1, le=MAX_GROUPS)] | Literal["auto"] = 1
    """L0 bound: the number of GROUP BY cells one unit may contribute to in a statement; a unit in
    more cells keeps this many, chosen by a keyed hash of (unit, cell). ε is divided by
    min(this, number of cells) × max_rows_per_unit (group privacy). `"auto"`: chosen by dpgate
    once per data version, ε-DP, as the [auto_bounds] quantile of each unit's number of distinct
    combinations of the table's columns with a public domain (the cells it reaches in a GROUP BY
    of all of them, so at most that many in a GROUP BY of any of them), from a noisy log-scale
    histogram; charged to the [auto_bounds] budget."""
    max_rows_per_unit: Annotated[int, Field(ge=1, le=MAX_ROWS)] | Literal["auto"] = 1
    """L∞ bound: the rows one unit contributes to one cell; a unit with more rows keeps this many,
    chosen by a keyed hash of the row. Larger values bias less and noise more (noise ∝ this).
    `"auto"`: chosen by dpgate once per data version, ε-DP, as the [auto_bounds] quantile of each
    unit's number of rows in this table, from a noisy log-scale histogram; charged to the
    [auto_bounds] budget."""
    max_rows_scope: Literal["cell", "total"] = "cell"
    """`cell`: max_rows_per_unit bounds a unit's rows in each cell (L∞, with max_groups_per_unit cells:
    ε / (min(G, cells) × R)). `total`: it bounds a unit's rows in the whole statement (L1, like
    SmartNoise's max_ids): a unit with more rows keeps that many in proportion across its cells,
    ε / R — less bias than per cell at the same noise when people spread over several cells."""

    min_units_per_group: Annotated[int, Field(ge=1)] | None = None
    """a GROUP BY cell over public keys is released only if its noisy number of distinct units (rows,
    without a privacy unit) is at least this (pre-thresholding, as Google's DP SQL): the count is one
    more release of the statement, sharing its ε; the NOTICE and EXPLAIN say how many groups passed.
    Over keys without a public domain, partition selection reads the units beyond this − 1 (no key
    with fewer is released; no extra ε). Unset: every cell of the public domain is released."""

    consistent: bool = True
    """released values are made consistent by post-processing (free): a COUNT is never below 0, a SUM
    of a column with lower bound ≥ 0 never below 0, an AVG within its column's bounds (the NOTICE says
    so). This biases cells near the bound (a mean of clamped noise is not 0); `false` returns the raw
    noisy values, unbiased, for analysts who add many cells up."""

    public: bool = False
    """a public table (a lookup table: stores, regions): readable as-is by every role with no noise and
    no charge, and joinable to a private table on its `key`. Never put personal data here."""
    key: str | list[str] | None = None
    """the column (or, on a public table, the list of columns) whose values are unique in the table:
    joins look rows up by it (required for a public table, e.g. `key = ["ps_partkey",
    "ps_suppkey"]`; on a private table it allows joins into it on the privacy unit or a declared
    reference; a unit's table takes the unit's `key`)."""
    references: dict[str, str] = Field(default_factory=dict)
    """foreign keys: `column = "table"` says this column holds that table's `key` (e.g. `o_custkey =
    "customer"`, `l_orderkey = "orders"`); a table reaches its privacy unit through them."""

    _unit_entity: str | None = PrivateAttr(default=None)

    @property
    def auto_fields(self) -> list[str]:
        """The bounds this table writes `"auto"` (checked to have a unit by the Config)."""
        return [f for f in ("max_rows_per_unit", "max_groups_per_unit") if getattr(self, f) == AUTO] + [
            f"columns.{n}" for n, c in self.columns.items() if c.auto_bounds
        ]

    @property
    def unit(self) -> str | None:
        """The privacy unit this table's rows belong to, as resolved by the Config: a `[units]` name,
        or `column <name>` for a unit given as a column with no declared unit (two such tables
        hold the same people when the column names agree). None: per-row (or a public table)."""
        if self._unit_entity is None and self.privacy_unit is not None:  # not resolved by a Config
            return f"column {self.privacy_unit.rsplit('.', 1)[-1]}"
        return self._unit_entity

    @property
    def unit_name(self) -> str | None:
        """The unit as analysts read it: a declared unit's name (`customer`), else the column as
        written (`customer_id`, `orders.customer_id`)."""
        u = self.unit
        return self.privacy_unit if u is None or u.startswith("column ") else u

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The key's columns (one, or a public table's composite key); () without a key."""
        if self.key is None:
            return ()
        return (self.key,) if isinstance(self.key, str) else tuple(self.key)

    @field_validator("key")
    @classmethod
    def _one_key(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list):
            if not v:
                raise ValueError("a key lists at least one column")
            if len(set(v)) != len(v):
                raise ValueError("a key lists each column once")
            if len(v) == 1:
                return v[0]
        return v

    @model_validator(mode="after")
    def _unit(self) -> Table:
        for k in self.key_columns:
            if k not in self.columns:
                raise ValueError(f"key {k!r} is not a declared column")
        if isinstance(self.key, list) and not self.public:
            raise ValueError(
                "a composite key (a list of columns) is for public tables; a private table's key is one column"
            )
        for ref in self.references:
            if ref not in self.columns:
                raise ValueError(f"references.{ref}: {ref!r} is not a declared column")
        if self.public and (
            self.privacy_unit is not None or self.mode != "central" or self.privacy is not None
        ):
            raise ValueError("a public table has no privacy unit, no local or per-record policy")
        if self.public and self.key is None:
            raise ValueError("a public table needs a key (a unique column joins look rows up by)")
        auto = self.auto_fields
        if auto and (self.public or self.mode != "central" or self.privacy is not None):
            raise ValueError(f'{auto[0]} = "auto" is for central tables with a privacy unit')
        u = self.privacy_unit
        if u is None:
            return self
        if self.mode == "local" or self.privacy is not None:
            raise ValueError(
                "privacy_unit applies to central tables; a local or per-record table "
                "protects each row by its own mechanism"
            )
        col = self.columns.get(u)
        if col is None:  # a unit's name, a referenced table's column, or neither: checked by the Config
            return self
        if col.type not in ("int", "text"):
            raise ValueError(f"privacy_unit {u!r} must be an int or text column, not {col.type}")
        return self

    @model_validator(mode="after")
    def _policies(self) -> Table:
        if self.mode == "local" and self.local is None:
            raise ValueError("mode = 'local' needs a [local] policy")
        if self.mode != "local" and self.local is not None:
            raise ValueError("a [local] policy needs mode = 'local'")
        if (
            self.privacy is not None
            and self.privacy.column is not None
            and self.privacy.column not in self.columns
        ):
            raise ValueError(f"privacy.column {self.privacy.column!r} is not a declared column")
        if self.local is not None:
            for name in self.local.columns:
                if name not in self.columns:
                    raise ValueError(f"local.columns.{name} is not a declared column")
            for name in self.local.categories:
                self._check_category(name, self.local)
            if not self.local.columns and not self.local.categories:
                raise ValueError("local needs a private column (local.columns or local.categories)")
        return self

    def _check_category(self, name: str, local: LocalPolicy) -> None:
        col = self.columns.get(name)
        dom = col.public_domain if col is not None else None
        problem = None
        if col is None:
            problem = "is not a declared column"
        elif name in local.columns or name == local.weight:
            problem = "is also a metric column or the weight (a column is collected once)"
        elif dom is None:
            problem = f"needs columns.{name}.domain = [...] (its categories give d)"
        elif not 2 <= len(dom) <= MAX_CATEGORIES:
            problem = f"has {len(dom)} domain values; a Subset column takes 2 to {MAX_CATEGORIES}"
        if problem:
            raise ValueError(f"local.categories.{name} {problem}")

    @field_validator("columns")
    @classmethod
    def _nonempty(cls, v: dict[str, Column]) -> dict[str, Column]:
        if not v:
            raise ValueError("a table needs at least one column")
        for name in v:
            if not name.isidentifier() or name.lower() != name:
                raise ValueError(f"column name {name!r} must be a lower-case identifier")
        return v


class Unit(StrictModel):
    """A privacy unit (`[units.<name>]`): the entity whose data each answer protects — a customer,
    a patient. Each private table reaches it through its `references`; tables that reach the same
    unit hold the same people and join as one person's data."""

    table: str
    """the declared private table with one row per unit (e.g. `customer`)."""
    key: str
    """that table's unique column that identifies the unit (e.g. `c_custkey`); it is also the
    table's `key`."""
    description: str = ""
    """free text shown to analysts."""


class Tier(StrictModel):
    """A privacy tier: what each released query is charged and the budget per period, in the
    tier's accounting: pure ε-DP (``epsilon``, ``budget`` in ε) or ρ-zCDP (``rho``, ``budget``
    in ρ; Bun & Steinke 2016)."""

    accounting: Literal["pure", "zcdp"] = "pure"
    """`pure`: ε-differential privacy, ε adds up; `zcdp`: ρ-zero-concentrated DP, ρ adds up, read as
    (ε, δ) at `conversion_delta` (Canonne, Kamath & Steinke 2020, Cor 13). COUNT and SUM on a zcdp tier
    use the discrete Gaussian at the L2 sensitivity of a unit's contribution."""
    rho: float = Field(default=0.0, ge=0, le=100, validate_default=True)
    """ρ charged per released query (zcdp tiers; required there, in place of `epsilon`)."""
    epsilon: float = Field(default=0.0, ge=0, le=100, validate_default=True)
    """ε charged per released query (pure tiers; required there). On a zcdp tier it is derived, not
    written: √(2ρ), the ε at which a pure ε-DP mechanism is ρ-zCDP (Bun & Steinke 2016, Prop 1.4)."""
    budget: float = Field(gt=0)
    """what a role of this tier may spend per period: ε on a pure tier, ρ on a zcdp tier."""
    conversion_delta: float = Field(default=1e-6, gt=0, le=1e-3)
    """zcdp tiers: the δ at which ρ is read as (ε, δ)-DP wherever ε is shown (NOTICE, EXPLAIN, views,
    `dpgate budget`, the owner page)."""
    period: Literal["day", "week", "month", "never"] = "day"
    """the budget renews every day, week, month, or never."""
    description: str = ""
    """free text (dpgate.* views, owner page)."""
    ladder: str | None = None  # tiers naming the same ladder are answered from one chain (multi-tier privacy)
    """tiers naming the same ladder are answered from one noise chain (multi-tier privacy): a coalition pays max ε,
    not Σε."""
    # a tier whose ε is not yet a level of a stored chain (added later): "nearest" serves the nearest
    # lower level (App. H); "bridge" inserts its exact level between the two neighbours (spec 9b)
    ladder_insert: Literal["nearest", "bridge"] = "nearest"
    """a tier added to a stored chain later: nearest (serve the nearest lower level) or bridge (insert its
    exact level)."""
    consistent: bool = True
    """`false`: roles of this tier get the raw noisy values (a COUNT may be negative), unbiased, whatever
    the table's `consistent` says (central and per-record tables alike); `true`: the table decides."""
    delta: float = Field(default=0.0, ge=0, le=1e-3)
    """δ charged per query that needs one (partition selection: GROUP BY a column without a public
    domain); 0 (the default) refuses such queries. Typical: 1e-6 to 1e-9, well below 1/rows."""
    delta_budget: float = Field(default=0.0, ge=0, le=1e-2)
    """δ a role of this tier may spend per period (composes additively, like ε)."""

    @field_validator("budget")
    @classmethod
    def _storable_budget(cls, v: float) -> float:
        if not v <= LEDGER_MAX_EPSILON:
            raise ValueError(
                f"{v:g} is more than the ledger can store (nano-units in a 64-bit integer: "
                f"at most {LEDGER_MAX_EPSILON:,})"
            )
        return v

    @field_validator("rho")
    @classmethod
    def _rho(cls, v: float, info: ValidationInfo) -> float:
        zcdp = info.data.get("accounting") == "zcdp"
        if zcdp and v <= 0:
            raise ValueError("a tier with accounting = 'zcdp' charges ρ per query: write rho = … (> 0)")
        if not zcdp and v:
            raise ValueError("only a tier with accounting = 'zcdp' charges ρ; write epsilon = …")
        return _storable(v)

    @field_validator("epsilon")
    @classmethod
    def _epsilon(cls, v: float, info: ValidationInfo) -> float:
        if info.data.get("accounting") != "zcdp":
            if v <= 0:
                raise ValueError("required: ε charged per query (> 0)")
            return _storable(v)
        rho = info.data.get("rho")
        if not rho:
            return v  # (rho's own error is said)
        derived = zcdp_run_epsilon(rho)
        if v not in (0.0, derived):
            raise ValueError(
                "a tier with accounting = 'zcdp' charges rho, not epsilon (its ε is derived: "
                f"√(2ρ) = {derived:g}); remove epsilon"
            )
        return derived

    @property
    def amount(self) -> float:
        """What one released query is charged, in the tier's accounting: ε, or ρ."""
        return self.rho if self.accounting == "zcdp" else self.epsilon

    @model_validator(mode="after")
    def _check(self) -> Tier:
        if self.accounting == "zcdp" and self.ladder is not None:
            raise ValueError(
                "ladder: a ladder's guarantee (multi-tier privacy) is stated in pure ε; "
                "a tier with accounting = 'zcdp' cannot be on a ladder"
            )
        if self.amount > self.budget:
            what = "rho" if self.accounting == "zcdp" else "epsilon"
            raise ValueError(f"{what} ({self.amount}) exceeds the budget ({self.budget})")
        if self.delta > self.delta_budget:
            raise ValueError(f"delta ({self.delta}) exceeds delta_budget ({self.delta_budget})")
        if self.ladder_insert != "nearest" and self.ladder is None:
            raise ValueError("ladder_insert needs ladder = '<name>'")
        return self


def _storable(v: float) -> float:
    if 0 < v < LEDGER_MIN_EPSILON:
        raise ValueError(
            f"{v:g} is below the ledger's resolution of 1e-9 (nano-unit integers): it would be charged as 0"
        )
    return v


def zcdp_run_epsilon(rho: float) -> float:
    """The largest float ε with ε²/2 ≤ ρ exactly: a pure ε-DP statement at this ε is ρ-zCDP
    (Bun & Steinke 2016, Prop 1.4). (``config`` imports nothing of ours: the same rule as
    ``mechanisms.accounting.pure_epsilon``, which a test holds equal.)"""
    r = Fraction(rho)
    e = math.sqrt(2 * rho)
    while Fraction(e) ** 2 / 2 > r:
        e = math.nextafter(e, 0.0)
    return e


class Role(StrictModel):
    """A connection role. `scram` is a PostgreSQL SCRAM-SHA-256 verifier
    (make one with `dpgate hash-password`); plain passwords are never stored."""

    tier: str
    """the role's tier (ε per query, budget)."""
    scram: str | None = None
    """PostgreSQL SCRAM-SHA-256 verifier of the role's password (`dpgate hash-password`); required with
    auth = 'scram'."""
    admin: bool = False
    """the data owner: sees every role's budget and releases (dpgate.* views, the owner page)."""
    insert: list[str] = Field(
        default_factory=list,
        description=(
            "local tables this role may INSERT into through the proxy (rows are perturbed on the way "
            "in); every other role gets 42501. Checked at load: each must be a declared local table"
        ),
    )
    insert_rows_per_minute: int = Field(
        default=1000,
        ge=1,
        description=(
            "rows this role may INSERT per minute, all local tables together (a token bucket of this "
            "size refilled continuously, per proxy process); beyond it an INSERT is refused with 53400"
        ),
    )

    @field_validator("scram")
    @classmethod
    def _verifier(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("SCRAM-SHA-256$"):
            raise ValueError("must be a SCRAM-SHA-256 verifier (run `dpgate hash-password`)")
        return v


class Config(StrictModel):
    server: Server = Server()
    """listening, authentication, limits, TLS."""
    backend: Backend = Backend()
    """where the data is."""
    ledger: LedgerStore = LedgerStore()
    """where budgets, releases and ladders are stored."""
    tiers: dict[str, Tier]
    """privacy tiers, by name."""
    roles: dict[str, Role]
    """connection roles, by name."""
    tables: dict[str, Table]
    """declared tables, by lower-case name."""
    units: dict[str, Unit] = Field(default_factory=dict)
    """privacy units, by name: the entities protected; each private table's unit is derived from its
    references (see Unit)."""
    demo: bool = False  # load the demo data set into the backend on start
    """load the demo data set into the backend on start."""
    auto_bounds: AutoBounds = AutoBounds()
    """the owner's budget and quantile for bounds written `"auto"`."""

    @model_validator(mode="after")
    def _refs(self) -> Config:
        for name, role in self.roles.items():
            if role.tier not in self.tiers:
                raise ValueError(
                    f"roles.{name}.tier: unknown tier {role.tier!r} (tiers: {', '.join(self.tiers)})"
                )
            if self.server.auth == "scram" and role.scram is None:
                raise ValueError(
                    f"roles.{name}.scram: a SCRAM verifier is required when server.auth = 'scram'"
                )
        for name in self.tables:
            if not name.isidentifier() or name.lower() != name:
                raise ValueError(f"tables.{name}: table names must be lower-case identifiers")
        ladders = sorted({t.ladder for t in self.tiers.values() if t.ladder is not None})
        for name, table in self.tables.items():
            for col, cat in table.local.categories.items() if table.local else ():
                if cat.ladder not in ladders:  # the Subset program is built from these tiers' ε
                    raise ValueError(
                        f"tables.{name}.local.categories.{col}.ladder: no tier has ladder = "
                        f"{cat.ladder!r} (ladders: {', '.join(ladders) or 'none'})"
                    )
            if self.demo and self.backend.kind == "spark":
                raise ValueError(
                    "demo = true loads the demo tables into DuckDB or Postgres; on Spark, "
                    "register your tables (CREATE TABLE … USING parquet) and declare them"
                )
            if table.privacy is not None and table.privacy.function == "log" and self.backend.kind == "spark":
                raise ValueError(
                    f"tables.{name}.privacy: function = 'log' needs a correctly rounded LN, and "
                    "Spark's (Java's) differs from Python's by an ulp on some values, which can "
                    "move a record across a level bound; use 'inverse' or 'sqrt' (exact on Spark)"
                )
        return self

    def _check_references(self, name: str, table: Table) -> None:
        for col, ref in table.references.items():
            other = self.tables.get(ref)
            if other is None or other.key is None:
                raise ValueError(
                    f"tables.{name}.references.{col}: {ref!r} is not a declared table with a key"
                )
            if isinstance(other.key, list):
                raise ValueError(
                    f"tables.{name}.references.{col}: {ref!r} has a composite key; a reference "
                    "names one column that holds a one-column key"
                )
        u = table.privacy_unit
        if u is not None and "." in u:
            ref, col = u.split(".", 1)
            via = [c for c, t in table.references.items() if t == ref]
            other = self.tables.get(ref)
            if not via or other is None or col not in other.columns or other.public:
                raise ValueError(
                    f"tables.{name}.privacy_unit: {u!r} needs references.<column> = {ref!r} and "
                    f"{col!r} a declared column of the private table {ref!r}"
                )

    @model_validator(mode="after")
    def _units(self) -> Config:
        """Each private table's privacy unit, resolved once (:class:`UnitResolver`): its
        ``privacy_unit`` becomes the column spelling the planner reads (its own column, or
        ``"<referenced table>.<that table's spelling>"`` along a chain of references) and
        :attr:`Table.unit` the entity; a unit's table gets the unit's key."""
        for uname, unit in self.units.items():
            if not uname.isidentifier() or uname.lower() != uname:
                raise ValueError(f"units.{uname}: unit names must be lower-case identifiers")
            t = self.tables.get(unit.table)
            if t is None:
                raise ValueError(
                    f"units.{uname}.table: {unit.table!r} is not a declared table "
                    f"(tables: {', '.join(sorted(self.tables))})"
                )
            if t.public or t.mode != "central" or t.privacy is not None:
                raise ValueError(
                    f"units.{uname}.table: {unit.table!r} must be a private central table "
                    "(not public, local or per-record)"
                )
            col = t.columns.get(unit.key)
            if col is None or col.type not in ("int", "text"):
                raise ValueError(
                    f"units.{uname}.key: {unit.key!r} must be a declared int or text column of {unit.table!r}"
                )
            if t.key is not None and t.key != unit.key:
                raise ValueError(
                    f"units.{uname}.key: {unit.key!r} differs from tables.{unit.table}.key = {t.key!r}"
                )
            if other := next(
                (n for n, u in self.units.items() if u.table == unit.table and n != uname), None
            ):
                raise ValueError(
                    f"units.{uname}.table: {unit.table!r} is already the table of unit {other!r}"
                )
            if t.key is None:
                self.tables[unit.table] = t.model_copy(update={"key": unit.key})
        for name, table in self.tables.items():
            self._check_references(name, table)
        resolved = UnitResolver(self.tables, self.units).resolve_all()
        for name, (entity, spelling) in resolved.items():
            t = self.tables[name]
            if t.privacy_unit != spelling:
                t = t.model_copy(update={"privacy_unit": spelling})
            t._unit_entity = entity
            self.tables[name] = t
        return self

    @model_validator(mode="after")
    def _auto_needs_unit(self) -> Config:
        """Bounds written "auto" are chosen per privacy unit: their table must have one."""
        for name, t in self.tables.items():
            if (auto := t.auto_fields) and t.unit is None:
                raise ValueError(
                    f'tables.{name}.{auto[0]} = "auto" needs a privacy unit (a [units] table, '
                    "references that reach one, or privacy_unit): the bounds are chosen per unit"
                )
        return self

    def unit_chain(self, table: str) -> list[tuple[str, str, str, str]]:
        """How ``table`` reaches its unit: [(table, its column, the next table, its key), …] along
        the references; [] when the unit is a column of the table itself."""
        return unit_chain(self.tables, table)

    def source_of(self, table: str) -> str:
        return self.tables[table].source or table


def unit_chain(tables: Mapping[str, Table], name: str) -> list[tuple[str, str, str, str]]:
    """(table, column, referenced table, its key) for each reference on ``name``'s resolved path to its
    unit (``privacy_unit = "orders.o_custkey"``: [(lineitem, l_orderkey, orders, o_orderkey)])."""
    out: list[tuple[str, str, str, str]] = []
    spelling = tables[name].privacy_unit
    while spelling is not None and "." in spelling:
        ref, spelling = spelling.split(".", 1)
        t = tables[name]
        fk = next((c for c, r in t.references.items() if r == ref), None)
        key = tables[ref].key if ref in tables else None
        if fk is None or not isinstance(key, str):
            break
        out.append((name, fk, ref, key))
        name = ref
    return out


class UnitResolver:
    """Derives each private table's privacy unit from the config (the entity, and the spelling the
    planner reads). A table reaches a unit

    * by being the unit's table (its unit column is the unit's key);
    * by a column it names (`privacy_unit = "col"`): that unit if the column references the unit's
      table, else the column's own unit `column <col>`;
    * through a reference (`privacy_unit = "orders.customer_id"`, or none written): the unit of the
      referenced table, spelled `"<that table>.<its spelling>"` — a chain of references.

    A table that names a unit (`privacy_unit = "customer"`) must reach it; a table that writes
    nothing takes the one unit its references reach (several: an error asking to name one; when
    units are declared, none: an error asking for a reference, a unit or `public = true`)."""

    def __init__(self, tables: Mapping[str, Table], units: Mapping[str, Unit]) -> None:
        self.tables, self.units = tables, units
        self.by_table = {u.table: n for n, u in units.items()}
        self.done: dict[str, tuple[str, str] | None] = {}
        self.active: list[str] = []

    def resolve_all(self) -> dict[str, tuple[str, str]]:
        out = {}
        for name in self.tables:
            r = self.reach(name)
            if r is not None:
                out[name] = r
        return out

    def reach(self, name: str) -> tuple[str, str] | None:
        """(entity, spelling) of ``name``'s unit; None for a per-row, public, local or per-record table."""
        if name in self.done:
            return self.done[name]
        if name in self.active:  # a cycle of references: no unit through it
            return None
        self.active.append(name)
        try:
            r = self._reach(name)
        finally:
            self.active.pop()
        self.done[name] = r
        return r

    def _reach(self, name: str) -> tuple[str, str] | None:
        t = self.tables[name]
        if t.public or t.mode != "central" or t.privacy is not None:
            return None
        u = t.privacy_unit
        where = f"tables.{name}.privacy_unit"
        if name in self.by_table:
            uname = self.by_table[name]
            key = self.units[uname].key
            if u not in (None, uname, key):
                raise ValueError(
                    f"{where}: {name!r} is the table of unit {uname!r}; its unit is its key {key!r} "
                    f"(write privacy_unit = {uname!r} or leave it out)"
                )
            return uname, key
        if u is None or u in self.units:
            found = self._through_references(name)
            if u is not None:
                found = [f for f in found if f[0] == u]
            entities = sorted({e for e, _ in found})
            if len(entities) > 1:
                raise ValueError(
                    f"tables.{name}: its references reach the units {', '.join(map(repr, entities))}; "
                    "say which protects its rows: privacy_unit = '<unit>'"
                )
            if not found:
                if u is not None:
                    unit = self.units[u]
                    raise ValueError(
                        f"{where}: {name!r} does not reach unit {u!r}: declare references.<column> = "
                        f"{unit.table!r} (a column holding {unit.table}.{unit.key}), or a reference to "
                        "a table that reaches it"
                    )
                if self.units:
                    raise ValueError(
                        f"tables.{name}: a private table that reaches no privacy unit (units: "
                        f"{', '.join(self.units)}); declare references.<column> = '<table>' along the "
                        "path to one, privacy_unit = '<column>', or public = true if it holds no "
                        "personal data"
                    )
                return None
            shortest = min(s.count(".") for _, s in found)
            best = sorted({s for _, s in found if s.count(".") == shortest})
            if len(best) > 1:
                raise ValueError(
                    f"tables.{name}: several paths reach unit {found[0][0]!r} "
                    f"({', '.join(best)}); say which: privacy_unit = '<column>' or '<table>.<column>'"
                )
            return found[0][0], best[0]
        if "." in u:
            ref, col = u.split(".", 1)
            via = self.reach(ref)
            if via is not None and via[1] == col:
                return via[0], u
            return f"column {col}", u
        if u not in t.columns:
            units = ", ".join(self.units) or "none declared"
            raise ValueError(
                f"{where}: {u!r} is neither a declared unit (units: {units}) nor a declared column of {name!r}"
            )
        target = t.references.get(u)
        if target is not None and target in self.tables:  # the column holds the key of a table of people
            r = self.reach(target)
            if r is not None and r[1] == self.tables[target].key:
                return r[0], u
        return f"column {u}", u

    def _through_references(self, name: str) -> list[tuple[str, str]]:
        """(entity, spelling) of each unit ``name``'s references reach, shortest paths first."""
        out = []
        for col, ref in self.tables[name].references.items():
            if ref in self.by_table:
                out.append((self.by_table[ref], col))
                continue
            if ref not in self.tables:
                continue
            r = self.reach(ref)
            if r is not None:
                out.append((r[0], f"{ref}.{r[1]}"))
        return out
