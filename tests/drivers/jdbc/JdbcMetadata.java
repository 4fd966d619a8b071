// DatabaseMetaData as DBeaver, DataGrip and Metabase call it, and ResultSetMetaData of a
// continuous query, through pgjdbc: one line per call, "name|rows|first row" (or
// "name|ERROR|sqlstate|message"). Arguments: url, table, other table, stream, window.
import java.sql.*;
import java.util.*;

public class JdbcMetadata {
    interface Call { ResultSet run() throws SQLException; }

    static String row(ResultSet rs, String... cols) throws SQLException {
        StringJoiner j = new StringJoiner(",");
        for (String c : cols) j.add(String.valueOf(rs.getString(c)));
        return j.toString();
    }

    static void show(String name, Call call, String... cols) {
        try (ResultSet rs = call.run()) {
            List<String> rows = new ArrayList<>();
            while (rs.next()) rows.add(cols.length == 0 ? "" : row(rs, cols));
            System.out.println(name + "|" + rows.size() + "|" + String.join(";", rows));
        } catch (SQLException e) {
            System.out.println(name + "|ERROR|" + e.getSQLState() + "|" + e.getMessage());
        }
    }

    public static void main(String[] a) throws Exception {
        String t = a[1], u = a[2], s = a[3], w = a[4];
        try (Connection c = DriverManager.getConnection(a[0], "cq", "")) {
            DatabaseMetaData md = c.getMetaData();
            System.out.println("keywords|" + (md.getSQLKeywords().length() > 100));
            System.out.println("max_index_columns|" + md.getMaxColumnsInIndex());
            show("schemas", () -> md.getSchemas(null, "public"), "TABLE_SCHEM");
            show("tables", () -> md.getTables(null, "public", "%", new String[] {"TABLE"}),
                 "TABLE_NAME", "TABLE_TYPE");
            show("views", () -> md.getTables(null, "public", "%", new String[] {"VIEW"}),
                 "TABLE_NAME", "TABLE_TYPE");
            show("columns", () -> md.getColumns(null, "public", s, "%"),
                 "COLUMN_NAME", "TYPE_NAME", "DATA_TYPE");
            show("window_columns", () -> md.getColumns(null, "public", w, "%"),
                 "COLUMN_NAME", "TYPE_NAME");
            show("primary_keys", () -> md.getPrimaryKeys(null, "public", t),
                 "COLUMN_NAME", "PK_NAME");
            show("imported_keys", () -> md.getImportedKeys(null, "public", u),
                 "PKTABLE_NAME", "PKCOLUMN_NAME", "FKCOLUMN_NAME", "FK_NAME", "PK_NAME");
            show("exported_keys", () -> md.getExportedKeys(null, "public", t),
                 "FKTABLE_NAME", "FKCOLUMN_NAME", "FK_NAME");
            show("index_info", () -> md.getIndexInfo(null, "public", t, false, false),
                 "INDEX_NAME", "COLUMN_NAME", "NON_UNIQUE");
            show("type_info", () -> md.getTypeInfo());
            show("functions", () -> md.getFunctions(null, "public", "%"));
            show("procedures", () -> md.getProcedures(null, "public", "%"));
            show("function_columns", () -> md.getFunctionColumns(null, "public", "%", "%"));
            show("table_privileges", () -> md.getTablePrivileges(null, "public", t),
                 "GRANTEE", "PRIVILEGE");
            show("client_info", () -> md.getClientInfoProperties(), "NAME");
            c.setAutoCommit(false);
            try (Statement st = c.createStatement()) {
                st.setFetchSize(1);
                try (ResultSet rs = st.executeQuery("SELECT * FROM " + s + " LIMIT 1")) {
                    ResultSetMetaData m = rs.getMetaData();
                    StringJoiner j = new StringJoiner(";");
                    for (int i = 1; i <= m.getColumnCount(); i++)
                        j.add(m.getColumnName(i) + "," + m.getColumnTypeName(i) + ","
                              + m.getColumnType(i));
                    System.out.println("continuous_metadata|" + j);
                }
            }
        }
    }
}
