"""The BI corpus: statements in the shapes that BI tools generate against the demo
tables, written from each tool's documented SQL generation (not copied from any tool):

* Metabase (query processor, Postgres driver): fully qualified quoted names
  ``"public"."t"."col"``, ``count(*) AS "count"``, ``date_trunc('month', …)`` repeated in
  GROUP BY / ORDER BY, relative filters as ``now() + INTERVAL '-12 month'``, nested questions as
  ``FROM (…) AS "source"``, row limit ``LIMIT 2000`` (1048575 for downloads), binning as
  ``floor((x - lo) / w) * w``.
* Superset (SQLAlchemy, Postgres engine spec): ``DATE_TRUNC('month', ts) AS __timestamp``, time
  ranges as ``TO_TIMESTAMP('… 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US')``,
  metrics aliased by their label ``AS "SUM(amount)"``, ``ORDER BY "SUM(amount)" DESC``,
  ``LIMIT 10000`` / ``50000``, virtual datasets as ``FROM (SELECT …) AS virtual_table``.
* Tableau (PostgreSQL connector): ``SUM(1) AS "Number of Records"``, ``CAST(… AS TEXT)``,
  ``"pums"."sex" AS "sex"``, aliases ``"sum:income:ok"``, ``GROUP BY 1``, ``CAST(DATE_TRUNC('MONTH',
  CAST(ts AS DATE)) AS DATE)``, custom SQL wrapped as ``FROM (…) "Custom SQL Query"``.
* Power BI (DirectQuery, Npgsql): an outer ``select "_"."c", "_"."a0" from (… count(1) as "a0"
  … group by …) "_" where not "_"."a0" is null limit 1000001``.
* Looker (LookML): ``pums.sex AS "pums.sex"``, ``COUNT(*) AS "pums.count"``, ``GROUP BY 1 ORDER BY
  2 DESC``, ``FETCH NEXT 500 ROWS ONLY``, ``COALESCE(SUM(x), 0)``, ``(DATE(… ))``, ``TO_CHAR`` dates.
* Grafana (PostgreSQL data source macros, expanded): ``$__timeGroupAlias(ts, 1d)`` →
  ``floor(extract(epoch from ts)/86400)*86400 AS "time"``, ``$__timeFilter(ts)`` →
  ``ts BETWEEN '…' AND '…'``, ``$__time(ts)``.
* SmartNoise SQL's PUMS validation queries (``sql/tests/query/queries/validate_pums``), with
  ``PUMS.PUMS`` → ``pums`` (the demo's table) and T-SQL's ``TOP 5`` → ``LIMIT 5``.

Each entry: (tool, tile name, SQL, expected): expected is ``"answered"`` or the SQLSTATE of a
refusal that must carry a hint saying what to write instead.
"""

from __future__ import annotations

ANSWERED = "answered"

CORPUS: list[tuple[str, str, str, str]] = [
    # ---------------------------------------------------------------- Metabase
    ("metabase", "row count", 'SELECT count(*) AS "count" FROM "public"."pums"', ANSWERED),
    (
        "metabase",
        "count by sex",
        'SELECT "public"."pums"."sex" AS "sex", count(*) AS "count" FROM "public"."pums" '
        'GROUP BY "public"."pums"."sex" ORDER BY "public"."pums"."sex" ASC',
        ANSWERED,
    ),
    (
        "metabase",
        "monthly series",
        'SELECT date_trunc(\'month\', "public"."purchases"."ts") AS "ts", count(*) AS "count" '
        'FROM "public"."purchases" GROUP BY date_trunc(\'month\', "public"."purchases"."ts") '
        'ORDER BY date_trunc(\'month\', "public"."purchases"."ts") ASC',
        ANSWERED,
    ),
    (
        "metabase",
        "sum by store, filtered",
        'SELECT "public"."purchases"."store" AS "store", sum("public"."purchases"."amount") AS "sum" '
        'FROM "public"."purchases" WHERE "public"."purchases"."amount" > 10 GROUP BY "public"."purchases"."store" '
        'ORDER BY "sum" DESC, "public"."purchases"."store" ASC LIMIT 2000',
        ANSWERED,
    ),
    (
        "metabase",
        "binned income",
        'SELECT (floor((("public"."pums"."income" - 0.0) / 50000.0)) * 50000.0) AS "income", '
        'count(*) AS "count" FROM "public"."pums" GROUP BY (floor((("public"."pums"."income" - 0.0) / 50000.0)) * 50000.0) '
        'ORDER BY (floor((("public"."pums"."income" - 0.0) / 50000.0)) * 50000.0) ASC',
        ANSWERED,
    ),
    (
        "metabase",
        "nested question",
        'SELECT "source"."sex" AS "sex", "source"."count" AS "count" FROM (SELECT '
        '"public"."pums"."sex" AS "sex", count(*) AS "count" FROM "public"."pums" GROUP BY "public"."pums"."sex") AS "source" '
        'WHERE "source"."count" > 10 LIMIT 1048575',
        ANSWERED,
    ),
    (
        "metabase",
        "average, rounded",
        'SELECT avg("public"."pums"."age") AS "avg" FROM "public"."pums" '
        'WHERE ("public"."pums"."married" = 1 AND "public"."pums"."educ" >= 9)',
        ANSWERED,
    ),
    (
        "metabase",
        "distinct values of a public column",
        'SELECT DISTINCT "public"."people"."region" AS "region" '
        'FROM "public"."people" ORDER BY "public"."people"."region" ASC LIMIT 2000',
        ANSWERED,
    ),
    (
        "metabase",
        "last 12 months (relative)",
        'SELECT date_trunc(\'month\', "public"."purchases"."ts") AS "ts", '
        'count(*) AS "count" FROM "public"."purchases" WHERE "public"."purchases"."ts" >= '
        "date_trunc('month', (now() + INTERVAL '-12 month')) GROUP BY 1 ORDER BY 1 ASC",
        ANSWERED,
    ),
    (
        "metabase",
        "median income",
        'SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY "public"."pums"."income") AS "median" '
        'FROM "public"."pums"',
        ANSWERED,
    ),
    (
        "metabase",
        "day of week",
        'SELECT (CAST(extract(dow from "public"."purchases"."ts") AS integer) + 1) AS "ts", '
        'count(*) AS "count" FROM "public"."purchases" GROUP BY (CAST(extract(dow from "public"."purchases"."ts") '
        'AS integer) + 1) ORDER BY (CAST(extract(dow from "public"."purchases"."ts") AS integer) + 1) ASC',
        ANSWERED,
    ),
    (
        "metabase",
        "distinct count by store",
        'SELECT "public"."purchases"."store" AS "store", count(distinct '
        '"public"."purchases"."item") AS "count" FROM "public"."purchases" GROUP BY "public"."purchases"."store" '
        'ORDER BY "public"."purchases"."store" ASC',
        ANSWERED,
    ),
    (
        "metabase",
        "raw rows (table view)",
        'SELECT "public"."pums"."age" AS "age", "public"."pums"."income" AS "income" '
        'FROM "public"."pums" LIMIT 2000',
        "42501",
    ),
    # ---------------------------------------------------------------- Superset
    (
        "superset",
        "time series",
        "SELECT DATE_TRUNC('month', ts) AS __timestamp, SUM(amount) AS \"SUM(amount)\" "
        "FROM public.purchases GROUP BY DATE_TRUNC('month', ts) ORDER BY \"SUM(amount)\" DESC LIMIT 10000",
        ANSWERED,
    ),
    (
        "superset",
        "bar chart",
        "SELECT region AS region, COUNT(*) AS count FROM public.people GROUP BY region "
        "ORDER BY count DESC LIMIT 50000",
        ANSWERED,
    ),
    (
        "superset",
        "big number",
        "SELECT COUNT(*) AS count FROM public.purchases WHERE ts >= '2025-01-01 00:00:00' "
        "AND ts < '2025-07-01 00:00:00'",
        ANSWERED,
    ),
    (
        "superset",
        "virtual dataset",
        'SELECT sex AS sex, AVG(income) AS "AVG(income)" FROM (SELECT * FROM pums '
        'WHERE age >= 18) AS virtual_table GROUP BY sex ORDER BY "AVG(income)" DESC LIMIT 10000',
        ANSWERED,
    ),
    (
        "superset",
        "pie with CASE dimension",
        "SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'middle' ELSE "
        "'senior' END AS age_band, COUNT(*) AS count FROM public.people GROUP BY CASE WHEN age < 30 THEN 'young' WHEN "
        "age < 60 THEN 'middle' ELSE 'senior' END ORDER BY count DESC LIMIT 100",
        ANSWERED,
    ),
    (
        "superset",
        "KPI ratio",
        'SELECT SUM(amount) / COUNT(*) AS "avg_ticket" FROM public.purchases',
        ANSWERED,
    ),
    (
        "superset",
        "stddev metric",
        'SELECT store AS store, STDDEV(amount) AS "STDDEV(amount)" FROM public.purchases '
        'GROUP BY store ORDER BY "STDDEV(amount)" DESC LIMIT 10000',
        ANSWERED,
    ),
    (
        "superset",
        "time range filter",
        "SELECT DATE_TRUNC('week', ts) AS __timestamp, COUNT(*) AS count FROM "
        "public.purchases WHERE ts >= TO_TIMESTAMP('2025-01-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') AND ts < "
        "TO_TIMESTAMP('2025-03-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') GROUP BY DATE_TRUNC('week', ts) "
        "LIMIT 10000",
        ANSWERED,
    ),
    ("superset", "samples (raw rows)", "SELECT * FROM public.purchases LIMIT 10000", "42501"),
    # ---------------------------------------------------------------- Tableau
    (
        "tableau",
        "number of records",
        'SELECT SUM(1) AS "Number of Records" FROM "public"."pums" "pums" HAVING (COUNT(1) > 0)',
        ANSWERED,
    ),
    (
        "tableau",
        "measure by dimension",
        'SELECT CAST("pums"."sex" AS TEXT) AS "sex", SUM("pums"."income") AS '
        '"sum:income:ok" FROM "public"."pums" "pums" GROUP BY 1',
        ANSWERED,
    ),
    (
        "tableau",
        "month of date",
        'SELECT CAST(DATE_TRUNC(\'MONTH\', CAST("purchases"."ts" AS DATE)) AS DATE) AS '
        '"tmn:ts:ok", SUM("purchases"."amount") AS "sum:amount:ok" FROM "public"."purchases" "purchases" '
        "GROUP BY 1",
        ANSWERED,
    ),
    (
        "tableau",
        "year of date",
        'SELECT CAST(EXTRACT(YEAR FROM "purchases"."ts") AS INTEGER) AS "yr:ts:ok", '
        'SUM("purchases"."amount") AS "sum:amount:ok" FROM "public"."purchases" "purchases" GROUP BY 1',
        ANSWERED,
    ),
    (
        "tableau",
        "custom SQL",
        'SELECT COUNT(*) AS "a0" FROM (SELECT "age", "sex" FROM "pums") "Custom SQL Query" '
        'WHERE ("Custom SQL Query"."age" >= 30) HAVING (COUNT(1) > 0)',
        ANSWERED,
    ),
    (
        "tableau",
        "average with calculated field",
        'SELECT "pums"."married" AS "married", AVG(CAST("pums"."age" AS '
        'DOUBLE PRECISION)) AS "avg:age:ok" FROM "public"."pums" "pums" GROUP BY 1',
        ANSWERED,
    ),
    (
        "tableau",
        "sum of calculated field",
        'SELECT SUM(("pums"."age" + 1)) AS "sum:Calculation_1:ok" FROM '
        '"public"."pums" "pums" HAVING (COUNT(1) > 0)',
        ANSWERED,
    ),
    # ---------------------------------------------------------------- Power BI
    (
        "powerbi",
        "table visual",
        'select "_"."region", "_"."a0" from (select "rows"."region" as "region", count(1) as "a0" '
        'from (select "_"."region" from "public"."people" "_") "rows" group by "region") "_" where not "_"."a0" is null '
        "limit 1000001",
        ANSWERED,
    ),
    (
        "powerbi",
        "card",
        'select sum("rows"."amount") as "a0" from (select "_"."amount" from "public"."purchases" "_") "rows"',
        ANSWERED,
    ),
    (
        "powerbi",
        "distinct count of a public column",
        'select count(distinct("rows"."store")) as "a0" from '
        '(select "_"."store" from "public"."purchases" "_") "rows"',
        ANSWERED,
    ),
    # ---------------------------------------------------------------- Looker
    (
        "looker",
        "dimension and count",
        'SELECT pums.sex AS "pums.sex", COUNT(*) AS "pums.count" FROM public.pums AS pums '
        "GROUP BY 1 ORDER BY 2 DESC FETCH NEXT 500 ROWS ONLY",
        ANSWERED,
    ),
    (
        "looker",
        "coalesced sum",
        'SELECT people.region AS "people.region", COALESCE(SUM(people.income), 0) AS '
        '"people.total_income" FROM public.people AS people GROUP BY 1 ORDER BY 2 DESC FETCH NEXT 500 ROWS ONLY',
        ANSWERED,
    ),
    (
        "looker",
        "month dimension",
        "SELECT DATE_TRUNC('month', purchases.ts) AS \"purchases.ts_month\", COUNT(*) AS "
        '"purchases.count" FROM public.purchases AS purchases GROUP BY 1 ORDER BY 1 DESC FETCH NEXT 500 ROWS ONLY',
        ANSWERED,
    ),
    (
        "looker",
        "month as text",
        "SELECT TO_CHAR(DATE_TRUNC('month', purchases.ts ), 'YYYY-MM') AS "
        '"purchases.ts_month", COUNT(*) AS "purchases.count" FROM public.purchases AS purchases GROUP BY 1 '
        "ORDER BY 1 DESC FETCH NEXT 500 ROWS ONLY",
        ANSWERED,
    ),
    (
        "looker",
        "date dimension",
        'SELECT (DATE(purchases.ts )) AS "purchases.ts_date", COUNT(*) AS '
        "\"purchases.count\" FROM public.purchases AS purchases WHERE ((( purchases.ts ) >= (TIMESTAMP '2025-06-01') "
        "AND ( purchases.ts ) < (TIMESTAMP '2025-07-01'))) GROUP BY 1 ORDER BY 1 FETCH NEXT 500 ROWS ONLY",
        ANSWERED,
    ),
    (
        "looker",
        "top 10 items",
        'SELECT purchases.item AS "purchases.item", COUNT(*) AS "purchases.count" FROM '
        "public.purchases AS purchases GROUP BY 1 ORDER BY 2 DESC FETCH NEXT 10 ROWS ONLY",
        ANSWERED,
    ),
    (
        "looker",
        "average with filter",
        'SELECT AVG(people.hours) AS "people.average_hours" FROM public.people AS people '
        "WHERE (people.region ) = 'north'",
        ANSWERED,
    ),
    # ---------------------------------------------------------------- Grafana
    (
        "grafana",
        "time series (daily)",
        'SELECT floor(extract(epoch from ts)/86400)*86400 AS "time", count(*) AS '
        "\"purchases\" FROM purchases WHERE ts BETWEEN '2025-03-01T00:00:00Z' AND '2025-03-31T23:59:59Z' GROUP BY 1 "
        "ORDER BY 1",
        ANSWERED,
    ),
    (
        "grafana",
        "stat panel",
        'SELECT sum(amount) AS "revenue" FROM purchases WHERE ts BETWEEN '
        "'2025-01-01T00:00:00Z' AND '2025-12-31T23:59:59Z'",
        ANSWERED,
    ),
    (
        "grafana",
        "bar gauge by store",
        "SELECT store::text AS metric, count(*) AS value FROM purchases GROUP BY 1 ORDER BY 1",
        ANSWERED,
    ),
    (
        "grafana",
        "raw time column",
        'SELECT ts AS "time", amount FROM purchases WHERE ts BETWEEN '
        "'2025-03-01T00:00:00Z' AND '2025-03-02T00:00:00Z' ORDER BY 1",
        "42501",
    ),
]

#: SmartNoise SQL's PUMS validation queries (sql/tests/query/queries/validate_pums/validate_pums.sql),
#: Postgres spelling, on the demo table.
SMARTNOISE = [
    "SELECT SUM(age) FROM pums",
    "SELECT COUNT(*), VAR(age) AS var_age FROM pums",
    "SELECT married, educ, income, AVG(age) FROM pums GROUP BY married, educ, income",
    "SELECT p.married, AVG(age) AS aa FROM pums AS p GROUP BY married",
    "SELECT educ, AVG(income) FROM pums GROUP BY educ LIMIT 5",
    "SELECT COUNT(married), AVG(age) FROM pums",
    "SELECT 3 AS three, p.married, educ, AVG(income) FROM pums AS p GROUP BY educ, married",
    "SELECT educ FROM pums GROUP BY educ",
    "SELECT SUM(age) AS age FROM pums",
    "SELECT (SUM(age)) AS age FROM pums",
    "SELECT SUM(age) * 1 AS age FROM pums",
    "SELECT SUM(age), COUNT(*) FROM pums",
    "SELECT PI(), RAND(), POWER(AVG(age), 2) FROM pums",
    "SELECT SUM(age) FROM pums GROUP BY married, CASE WHEN age > 90 THEN 1 ELSE 0 END",
]
#: none refused: GROUP BY married, educ, income (income has no public domain) is answered by
#: partition selection over the (married, educ, income) tuples, with the tier's δ
SMARTNOISE_REFUSED: dict = {}

#: the dashboard of docs/clients.md (Superset/Metabase style), every tile answered
DASHBOARD = [
    (
        "bar chart by a derived bin",
        "SELECT width_bucket(age, 0, 100, 10) AS age_bin, COUNT(*) AS people "
        "FROM people GROUP BY 1 ORDER BY 1",
    ),
    (
        "monthly time series",
        "SELECT date_trunc('month', ts) AS month, COUNT(*) AS orders, SUM(amount) AS revenue "
        "FROM purchases GROUP BY 1 ORDER BY 1",
    ),
    (
        "KPI with a ratio",
        "SELECT SUM(amount) / COUNT(*) AS avg_ticket, COUNT(*) FILTER (WHERE amount > 100) * 100.0 "
        "/ COUNT(*) AS pct_big FROM purchases",
    ),
    (
        "top-10 table",
        "SELECT item, COUNT(*) AS sold FROM purchases GROUP BY item ORDER BY sold DESC LIMIT 10",
    ),
]

#: window functions over the released cells (post-processing, no ε): the analyst's running
#: total, month-over-month change, rank of groups, moving average and share of the total
ANALYST_WINDOWS = [
    (
        "running total and monthly change",
        "SELECT date_trunc('month', ts) AS month, COUNT(*), SUM(COUNT(*)) OVER (ORDER BY date_trunc('month', ts)), "
        "COUNT(*) - LAG(COUNT(*)) OVER (ORDER BY date_trunc('month', ts)) FROM purchases GROUP BY 1 ORDER BY 1",
    ),
    (
        "rank of stores",
        "SELECT store, COUNT(*), RANK() OVER (ORDER BY COUNT(*) DESC), "
        "ROW_NUMBER() OVER (ORDER BY COUNT(*) DESC), DENSE_RANK() OVER (ORDER BY COUNT(*) DESC) "
        "FROM purchases GROUP BY store",
    ),
    (
        "moving average",
        "SELECT store, SUM(amount), AVG(SUM(amount)) OVER (ORDER BY store ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) "
        "FROM purchases GROUP BY store ORDER BY store",
    ),
    (
        "share of the total",
        "SELECT region, COUNT(*) * 1.0 / SUM(COUNT(*)) OVER () AS share FROM people GROUP BY region",
    ),
    (
        "share within a partition",
        "SELECT region, sex, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER (PARTITION BY region) AS pct "
        "FROM people GROUP BY region, sex",
    ),
]

#: the analyst's questions that were refused (one statement each, as a new user wrote them):
#: windows over released rows, several quantiles or extremes at once, shares of a total
ANALYST_QUESTIONS = [
    (
        "running total / month-over-month change",
        "SELECT date_trunc('month', ts) AS month, COUNT(*), SUM(COUNT(*)) OVER (ORDER BY date_trunc('month', ts)), "
        "COUNT(*) - LAG(COUNT(*)) OVER (ORDER BY date_trunc('month', ts)) FROM purchases GROUP BY 1",
    ),
    (
        "p25 and p75 together; a box plot",
        "SELECT percentile_cont(0.25) WITHIN GROUP (ORDER BY income), percentile_cont(0.5) WITHIN GROUP "
        "(ORDER BY income), percentile_cont(0.75) WITHIN GROUP (ORDER BY income) FROM people",
    ),
    ("MAX and MIN together", "SELECT MAX(income), MIN(age) FROM pums"),
    (
        "share of total",
        "SELECT region, COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people) FROM people GROUP BY region",
    ),
    ("purchases per customer", "SELECT COUNT(*)::float / COUNT(DISTINCT customer_id) FROM purchases"),
    ("per-record table, one dashboard tile", "SELECT COUNT(*), SUM(balance), MAX(balance) FROM accounts"),
    (
        "rank of groups",
        "SELECT store, COUNT(*), RANK() OVER (ORDER BY COUNT(*) DESC) FROM purchases GROUP BY store",
    ),
]

#: scalar subqueries (each a release of its own, bound as a constant) and windows over
#: released rows in the shapes analysts and TPC-H write them
SCALAR_SHAPES = [
    (
        "filter against a released average (TPC-H Q22's comparison)",
        "SELECT COUNT(*) FROM people WHERE income > (SELECT AVG(income) FROM people WHERE age > 30)",
    ),
    (
        "ratio to the overall average",
        "SELECT region, AVG(income) / (SELECT AVG(income) FROM people) AS rel FROM people GROUP BY region "
        "ORDER BY rel DESC",
    ),
    (
        "share of a table of the same people",
        "SELECT COUNT(*) * 1.0 / (SELECT COUNT(*) FROM customers) AS orders_per_customer FROM orders",
    ),
    (
        "above the maximum minus ten",
        "SELECT COUNT(*) FROM people WHERE age > (SELECT MAX(age) FROM people) - 10",
    ),
    (
        "the largest of a WITH query's released sums (TPC-H Q15's subquery)",
        "WITH r (store_no, revenue) AS (SELECT store, SUM(amount) FROM purchases GROUP BY store) "
        "SELECT store_no, revenue FROM r WHERE revenue = (SELECT MAX(revenue) FROM r)",
    ),
    (
        "a public table looked up by released keys (TPC-H Q15)",
        "WITH r (store_no, revenue) AS (SELECT store, SUM(amount) FROM purchases GROUP BY store) "
        "SELECT s.store_id, s.area, r.revenue FROM stores s, r WHERE s.store_id = r.store_no "
        "AND r.revenue = (SELECT MAX(revenue) FROM r) ORDER BY s.store_id",
    ),
    (
        "purchases per customer without FROM",
        "SELECT (SELECT COUNT(*) FROM purchases)::float / (SELECT COUNT(DISTINCT customer_id) FROM purchases)",
    ),
    (
        "windows over an aggregating derived table",
        "SELECT store, c, SUM(c) OVER (ORDER BY store) AS running, c * 1.0 / SUM(c) OVER () AS share "
        "FROM (SELECT store, COUNT(*) AS c FROM purchases GROUP BY store) t ORDER BY store",
    ),
    (
        "the WINDOW clause",
        "SELECT region, sex, COUNT(*), SUM(COUNT(*)) OVER w, RANK() OVER (w ORDER BY COUNT(*) DESC) "
        "FROM people GROUP BY region, sex WINDOW w AS (PARTITION BY region)",
    ),
    (
        "NTH_VALUE",
        "SELECT store, COUNT(*), NTH_VALUE(COUNT(*), 2) OVER (ORDER BY COUNT(*) DESC "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS runner_up FROM purchases GROUP BY store",
    ),
    (
        "RANGE offset",
        "SELECT store, SUM(amount), AVG(SUM(amount)) OVER (ORDER BY store RANGE BETWEEN 1 PRECEDING AND 1 FOLLOWING) "
        "FROM purchases GROUP BY store ORDER BY store",
    ),
]
