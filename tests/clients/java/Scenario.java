// The shared client scenario through pgjdbc: connect (SCRAM), introspect with
// DatabaseMetaData, aggregate, refused query, parameterised query, undeclared table.
// Prints one JSON report on stdout (parsed by tests/clients/test_jdbc.py).
//
// usage: java -cp postgresql.jar:. Scenario JDBC_URL USER PASSWORD COPY_SQL [NAME SQL]...
// COPY_SQL is fetched with pgjdbc's CopyManager as COPY (COPY_SQL) TO STDOUT WITH CSV ("copy");
// each NAME SQL pair after it is run as written; its rows are reported as getString's text
// under "more".
import java.sql.*;
import java.util.*;

public class Scenario {
    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static String value(Object o) {
        if (o == null) return "null";
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        return q(o.toString());
    }

    static String list(List<String> items) {
        return "[" + String.join(", ", items) + "]";
    }

    static List<String> names(ResultSet rs, String column) throws SQLException {
        List<String> out = new ArrayList<>();
        while (rs.next()) out.add(q(rs.getString(column)));
        rs.close();
        return out;
    }

    static String error(Statement st, String sql) {
        try {
            st.executeQuery(sql).close();
            return "null";
        } catch (SQLException e) {
            return "{\"sqlstate\": " + q(e.getSQLState()) + ", \"message\": " + q(e.getMessage()) + "}";
        }
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        Map<String, String> out = new LinkedHashMap<>();
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            DatabaseMetaData md = conn.getMetaData();
            out.put("product", q(md.getDatabaseProductName() + " " + md.getDatabaseProductVersion()));
            out.put("tables", list(names(md.getTables(null, "public", "%", new String[] {"TABLE"}), "TABLE_NAME")));
            out.put("all_tables", list(names(md.getTables(null, null, "%", null), "TABLE_NAME")));
            out.put("schemas", list(names(md.getSchemas(), "TABLE_SCHEM")));
            out.put("catalogs", list(names(md.getCatalogs(), "TABLE_CAT")));
            List<String> cols = new ArrayList<>();
            ResultSet rs = md.getColumns(null, "public", "pums", "%");
            while (rs.next()) cols.add("[" + q(rs.getString("COLUMN_NAME")) + ", " + q(rs.getString("TYPE_NAME")) + "]");
            rs.close();
            out.put("columns", list(cols));
            out.put("secret_columns", list(names(md.getColumns(null, null, "secret_salaries", "%"), "COLUMN_NAME")));
            out.put("primary_keys", list(names(md.getPrimaryKeys(null, "public", "pums"), "COLUMN_NAME")));
            out.put("indexes", list(names(md.getIndexInfo(null, "public", "pums", false, true), "INDEX_NAME")));

            try (Statement st = conn.createStatement()) {
                List<String> rows = new ArrayList<>();
                List<String> types = new ArrayList<>();
                ResultSet r = st.executeQuery("SELECT sex, COUNT(*), SUM(income), AVG(age) FROM pums "
                        + "WHERE age BETWEEN 30 AND 60 GROUP BY sex ORDER BY sex");
                ResultSetMetaData rmd = r.getMetaData();
                for (int i = 1; i <= rmd.getColumnCount(); i++) types.add(q(rmd.getColumnTypeName(i)));
                while (r.next()) {
                    List<String> row = new ArrayList<>();
                    List<String> classes = new ArrayList<>();
                    for (int i = 1; i <= rmd.getColumnCount(); i++) {
                        Object o = r.getObject(i);
                        row.add(value(o));
                        classes.add(q(o == null ? "null" : o.getClass().getSimpleName()));
                    }
                    rows.add(list(row));
                    out.put("value_types", list(classes));
                }
                r.close();
                out.put("rows", list(rows));
                out.put("column_types", list(types));
                out.put("refused", error(st, "SELECT * FROM pums"));
                out.put("secret_error", error(st, "SELECT COUNT(*) FROM secret_salaries"));
                List<String> listed = new ArrayList<>();
                ResultSet it = st.executeQuery("SELECT table_name FROM information_schema.tables ORDER BY 1");
                while (it.next()) listed.add(q(it.getString(1)));
                it.close();
                out.put("information_schema_tables", list(listed));
            }
            try (PreparedStatement ps = conn.prepareStatement("SELECT COUNT(*) FROM pums WHERE age > ?")) {
                ps.setInt(1, 40);
                long n = -1;
                // run it more than prepareThreshold (5) times: pgjdbc switches to a named server-side statement
                for (int i = 0; i < 6; i++) {
                    try (ResultSet r = ps.executeQuery()) {
                        r.next();
                        long v = r.getLong(1);
                        if (n != -1 && v != n) throw new IllegalStateException("repeat gave a different answer");
                        n = v;
                    }
                }
                out.put("param_count", Long.toString(n));
            }
            List<String> more = new ArrayList<>();
            try (Statement st = conn.createStatement()) {
                for (int a = 4; a + 1 < args.length; a += 2) {
                    List<String> rows = new ArrayList<>();
                    try (ResultSet r = st.executeQuery(args[a + 1])) {
                        int n = r.getMetaData().getColumnCount();
                        while (r.next()) {
                            List<String> row = new ArrayList<>();
                            for (int i = 1; i <= n; i++) row.add(q(r.getString(i)));
                            rows.add(list(row));
                        }
                    }
                    more.add(q(args[a]) + ": " + list(rows));
                }
            }
            out.put("more", "{" + String.join(", ", more) + "}");
            java.io.StringWriter csv = new java.io.StringWriter();
            long copied = conn.unwrap(org.postgresql.PGConnection.class).getCopyAPI()
                    .copyOut("COPY (" + args[3] + ") TO STDOUT WITH CSV", csv);
            out.put("copy", q(csv.toString()));
            out.put("copied", Long.toString(copied));
        }
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, String> e : out.entrySet()) {
            if (b.length() > 1) b.append(", ");
            b.append(q(e.getKey())).append(": ").append(e.getValue());
        }
        System.out.println(b.append("}"));
    }
}
