import java.sql.*;

/** A continuous query read through pgjdbc's fetch size: autocommit off, setFetchSize(2), so the
 *  driver executes the portal two rows at a time. Prints each row as it arrives. */
public class ContinuousCheck {
    public static void main(String[] args) throws Exception {
        try (Connection c = DriverManager.getConnection(args[0], "cq", "")) {
            c.setAutoCommit(false);
            try (Statement st = c.createStatement()) {
                st.setFetchSize(2);
                try (ResultSet rs = st.executeQuery(args[1])) {
                    ResultSetMetaData md = rs.getMetaData();
                    System.out.println("columns=" + md.getColumnName(1) + ":" + md.getColumnTypeName(1));
                    while (rs.next()) {
                        System.out.println("row=" + rs.getInt(1));
                        System.out.flush();
                    }
                }
            }
            c.commit();
            System.out.println("done");
        }
    }
}
