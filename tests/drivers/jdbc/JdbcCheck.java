// Compiled and run by tests/test_jdbc.py against a live cqgate: DatabaseMetaData (with the
// table's privileges after a GRANT), a prepared
// statement executed six times (pgjdbc switches to a named server statement on the 5th),
// autocommit off with setFetchSize, and ResultSetMetaData. Prints facts; the test asserts them.
import java.sql.*;

public class JdbcCheck {
    public static void main(String[] args) throws Exception {
        String url = args[0];
        String table = args[1];
        try (Connection c = DriverManager.getConnection(url, "cq", "")) {
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE " + table + " (a INT PRIMARY KEY, b TEXT NOT NULL, "
                          + "c NUMERIC(10,2), d TIMESTAMP)");
                s.execute("INSERT INTO " + table + " SELECT g, 'x' || g, g / 4.0, "
                          + "TIMESTAMP '2024-01-01 00:00:00' + g * INTERVAL 1 HOUR "
                          + "FROM generate_series(1, 10) g");
                s.execute("GRANT SELECT ON " + table + " TO PUBLIC");
            }
            DatabaseMetaData md = c.getMetaData();
            System.out.println("product=" + md.getDatabaseProductName() + " "
                               + md.getDatabaseMajorVersion());
            try (ResultSet rs = md.getSchemas()) {
                StringBuilder sb = new StringBuilder();
                while (rs.next()) sb.append(rs.getString("TABLE_SCHEM")).append(',');
                System.out.println("schemas=" + sb);
            }
            try (ResultSet rs = md.getTables(null, "public", table, new String[] {"TABLE"})) {
                while (rs.next())
                    System.out.println("table=" + rs.getString("TABLE_NAME") + ":"
                                       + rs.getString("TABLE_TYPE"));
            }
            try (ResultSet rs = md.getColumns(null, "public", table, "%")) {
                while (rs.next())
                    System.out.println("column=" + rs.getString("COLUMN_NAME") + ":"
                                       + rs.getString("TYPE_NAME") + ":"
                                       + rs.getInt("DATA_TYPE") + ":"
                                       + rs.getString("IS_NULLABLE"));
            }
            try (ResultSet rs = md.getPrimaryKeys(null, "public", table)) {
                while (rs.next())
                    System.out.println("pk=" + rs.getString("COLUMN_NAME") + ":"
                                       + rs.getInt("KEY_SEQ") + ":" + rs.getString("PK_NAME"));
            }
            try (ResultSet rs = md.getTablePrivileges(null, "public", table)) {
                while (rs.next())
                    System.out.println("priv=" + rs.getString("GRANTOR") + ":"
                                       + rs.getString("GRANTEE") + ":"
                                       + rs.getString("PRIVILEGE"));
            }
            int types = 0;
            try (ResultSet rs = md.getTypeInfo()) {
                while (rs.next()) types++;
            }
            System.out.println("typeinfo=" + (types > 10));

            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT a, b FROM " + table + " WHERE a > ? ORDER BY a")) {
                for (int i = 0; i < 6; i++) {
                    ps.setInt(1, i + 4);
                    int n = 0;
                    try (ResultSet rs = ps.executeQuery()) {
                        while (rs.next()) n++;
                    }
                    System.out.println("prepared" + i + "=" + n);
                }
            }
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                s.setFetchSize(3);
                int n = 0;
                long sum = 0;
                try (ResultSet rs = s.executeQuery("SELECT * FROM " + table + " ORDER BY a")) {
                    ResultSetMetaData rm = rs.getMetaData();
                    System.out.println("rsmeta=" + rm.getColumnName(1) + ":"
                                       + rm.getColumnTypeName(3) + ":"
                                       + rm.getTableName(1) + ":"
                                       + rm.isNullable(2));
                    while (rs.next()) {
                        n++;
                        sum += rs.getInt(1);
                        if (n == 10)
                            System.out.println("last=" + rs.getBigDecimal(3) + "|"
                                               + rs.getTimestamp(4));
                    }
                }
                System.out.println("fetched=" + n + ":" + sum);
            }
            c.commit();
        }
    }
}
