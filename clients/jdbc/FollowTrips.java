import java.sql.*;

/**
 * Follow a stream from Java with pgjdbc: with autocommit off and a fetch size, the driver
 * reads a continuous query through a portal, a few rows at a time, as they come.
 *
 *   javac FollowTrips.java
 *   java -cp .:/usr/share/java/postgresql.jar FollowTrips jdbc:postgresql://127.0.0.1:55433/cq
 */
public class FollowTrips {
    public static void main(String[] args) throws Exception {
        String url = args.length > 0 ? args[0] : "jdbc:postgresql://127.0.0.1:55433/cq";
        try (Connection admin = DriverManager.getConnection(url, "cq", "");
             Connection reader = DriverManager.getConnection(url, "cq", "")) {
            try (Statement st = admin.createStatement()) {
                st.execute("DROP STREAM IF EXISTS jtrips CASCADE");
                st.execute("CREATE STREAM jtrips (zone INT, fare DOUBLE PRECISION, "
                           + "t TIMESTAMP TIMESTAMPCOLUMN)");
            }
            Thread feeder = new Thread(() -> feed(admin));
            feeder.start();
            reader.setAutoCommit(false);           // a fetch size needs a transaction
            try (Statement st = reader.createStatement()) {
                st.setFetchSize(2);
                try (ResultSet rs = st.executeQuery(
                        "SELECT zone, fare FROM jtrips WHERE fare > 10 LIMIT 3")) {
                    while (rs.next()) {
                        System.out.println("zone " + rs.getInt(1) + ": " + rs.getDouble(2));
                    }
                }
            }
            reader.commit();
            feeder.join();
        }
    }

    /** Insert trips once the query runs in the back end (cq_queries lists it). */
    static void feed(Connection admin) {
        try (Statement st = admin.createStatement()) {
            while (true) {
                try (ResultSet rs = st.executeQuery(
                        "SELECT count(*) FROM cq_queries WHERE query LIKE '%FROM jtrips%'")) {
                    rs.next();
                    if (rs.getInt(1) > 0) break;
                }
                Thread.sleep(50);
            }
            st.execute("INSERT INTO jtrips VALUES (1, 12.5, '2026-10-01 08:05'), "
                       + "(2, 8.0, '2026-10-01 08:06'), (2, 30.0, '2026-10-01 08:12'), "
                       + "(1, 11.0, '2026-10-01 08:20'), (1, 40.0, '2026-10-01 08:30')");
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }
}
