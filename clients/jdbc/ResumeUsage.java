import java.sql.*;

/**
 * Exactly once across a dropped connection, from Java with pgjdbc: a cursor declared
 * WITH (progress = true) gives a first column cq_progress, NULL on data rows (wasNull), set on
 * progress rows. The program keeps the total it has made durable and the instant of the last
 * progress row; after its connection goes, it declares the cursor again WITH (resume_from =
 * that instant). (Here "durable" is a field; a real client writes it with its results.)
 *
 *   javac ResumeUsage.java
 *   java -cp .:/usr/share/java/postgresql.jar ResumeUsage jdbc:postgresql://127.0.0.1:55433/cq
 */
public class ResumeUsage {
    static final String QUERY =
        "SELECT node, kw, valid_from FROM jusage [RANGE '1 minute'] WHERE kw > 1";
    static double total = 0;           // durable state: the total and where it stands
    static Timestamp progress = null;

    public static void main(String[] args) throws Exception {
        String url = args.length > 0 ? args[0] : "jdbc:postgresql://127.0.0.1:55433/cq";
        try (Connection admin = DriverManager.getConnection(url, "cq", "")) {
            try (Statement st = admin.createStatement()) {
                st.execute("DROP STREAM IF EXISTS jusage CASCADE");
                st.execute("CREATE STREAM jusage (node INT, kw DOUBLE PRECISION, "
                           + "t TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED");
            }
            Connection reader = DriverManager.getConnection(url, "cq", "");
            declare(reader);
            insert(admin, "(1, 2.5, '2026-10-01 08:00:01'), (2, 0.5, '2026-10-01 08:00:02'), "
                   + "(1, 3.0, '2026-10-01 08:00:03')", "2026-10-01 08:00:04");
            follow(reader, Timestamp.valueOf("2026-10-01 08:00:04"));
            reader.close();                    // the connection goes; its cursor with it
            System.out.println("-- dropped; resuming from " + progress);
            insert(admin, "(2, 4.0, '2026-10-01 08:00:05'), (1, 1.5, '2026-10-01 08:00:06')",
                   "2026-10-01 08:00:07");
            try (Connection again = DriverManager.getConnection(url, "cq", "")) {
                declare(again);
                follow(again, Timestamp.valueOf("2026-10-01 08:00:07"));
            }
            System.out.println("total: " + total);
        }
    }

    static void declare(Connection conn) throws SQLException {
        conn.setAutoCommit(false);             // a cursor lives in a transaction
        String resume = progress == null ? "" : ", resume_from = '" + progress + "'";
        try (Statement st = conn.createStatement()) {
            st.execute("DECLARE u CURSOR FOR " + QUERY + " WITH (progress = true" + resume + ")");
        }
    }

    /** Read until the progress instant reaches {@code until}; commit at each progress row. */
    static void follow(Connection conn, Timestamp until) throws SQLException {
        double pending = 0;
        try (Statement st = conn.createStatement()) {
            while (progress == null || progress.before(until)) {
                try (ResultSet rs = st.executeQuery("FETCH ALL FROM u WITH (timeout = '5s')")) {
                    while (rs.next()) {
                        Timestamp p = rs.getTimestamp(1);
                        if (rs.wasNull()) {    // a data row: work not yet durable
                            pending += rs.getDouble(3);
                            System.out.printf("%tT node %d: %s%n", rs.getTimestamp(4),
                                              rs.getInt(2), rs.getDouble(3));
                        } else {               // every row before it has come
                            total += pending;
                            pending = 0;
                            progress = p;
                        }
                    }
                }
            }
        }
    }

    static void insert(Connection admin, String values, String upto) throws SQLException {
        try (Statement st = admin.createStatement()) {
            st.execute("INSERT INTO jusage VALUES " + values);
            st.execute("ALTER STREAM jusage ADVANCE TO '" + upto + "'");
        }
    }
}
