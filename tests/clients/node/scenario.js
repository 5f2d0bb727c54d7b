// The shared client scenario through node-postgres (npm "pg"): connect (SCRAM),
// introspect, aggregate, refused query, parameterised query, undeclared table.
// Prints one JSON report on stdout (parsed by tests/clients/test_node.py).
//
// usage: NODE_PATH=<dir with node_modules> node scenario.js '<json config for pg.Client>' '<json {name: sql}>'
// The statements of the second argument are run as written; their rows are reported as the
// text the server sent (no type parsers), as arrays.
"use strict";
const { Client } = require("pg");

async function error(client, sql) {
  try {
    await client.query(sql);
    return null;
  } catch (e) {
    return { sqlstate: e.code, message: e.message };
  }
}

async function main() {
  const config = JSON.parse(process.argv[2]);
  const more = JSON.parse(process.argv[3] || "{}");
  const client = new Client(config);
  const out = { notices: [], pg_version: require("pg/package.json").version, more: {} };
  client.on("notice", (msg) => out.notices.push(msg.message));
  await client.connect();
  try {
    out.ssl = Boolean(client.connection.stream.encrypted);
    out.tables = (await client.query(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name"
    )).rows.map((r) => r.table_name);
    out.pg_class = (await client.query(
      "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace " +
      "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v', 'm', 'p', 'f') ORDER BY 1"
    )).rows.map((r) => r.relname);
    out.columns = (await client.query(
      "SELECT column_name, data_type FROM information_schema.columns " +
      "WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position", ["public", "pums"]
    )).rows.map((r) => [r.column_name, r.data_type]);
    out.secret_columns = (await client.query(
      "SELECT column_name FROM information_schema.columns WHERE table_name = $1", ["secret_salaries"]
    )).rows.map((r) => r.column_name);

    const res = await client.query(
      "SELECT sex, COUNT(*), SUM(income), AVG(age) FROM pums WHERE age BETWEEN 30 AND 60 GROUP BY sex ORDER BY sex"
    );
    out.column_type_oids = res.fields.map((f) => f.dataTypeID);
    out.raw_rows = res.rows.map((r) => [r.sex, r.count, r.sum, r.avg]);
    out.value_types = res.rows.length ? [res.rows[0].sex, res.rows[0].count, res.rows[0].sum, res.rows[0].avg].map((v) => typeof v) : [];
    // node-postgres returns int8 as a string (as it does from Postgres); parse for the report
    out.rows = res.rows.map((r) => [Number(r.sex), Number(r.count), r.sum, r.avg]);
    out.refused = await error(client, "SELECT * FROM pums");
    out.secret_error = await error(client, "SELECT COUNT(*) FROM secret_salaries");
    const p = await client.query("SELECT COUNT(*) FROM pums WHERE age > $1", [40]);
    const named = await client.query({ name: "count_over", text: "SELECT COUNT(*) FROM pums WHERE age > $1", values: [40] });
    const again = await client.query({ name: "count_over", text: "SELECT COUNT(*) FROM pums WHERE age > $1", values: [40] });
    out.param_count = Number(p.rows[0].count);
    out.param_count_named = [Number(named.rows[0].count), Number(again.rows[0].count)];
    const text = { getTypeParser: () => (v) => v };
    for (const [name, sql] of Object.entries(more)) {
      out.more[name] = (await client.query({ text: sql, rowMode: "array", types: text })).rows;
    }
  } finally {
    await client.end();
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
