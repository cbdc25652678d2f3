// A PgJDBC client for tests/python/test_server.py: connects to `strata serve` and prints what a
// Java application would see, one fact per line. Run as a single-file program:
//   java -cp postgresql.jar JdbcClient.java jdbc:postgresql://127.0.0.1:PORT/strata USER PASSWORD
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;

public class JdbcClient {
    public static void main(String[] args) throws Exception {
        try (Connection conn = DriverManager.getConnection(args[0], args[1], args[2])) {
            try (Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery("SELECT count(*) AS n FROM events")) {
                rs.next();
                System.out.println("count " + rs.getLong(1));
            }
            // Run more often than prepareThreshold (5): the driver then uses a named server-side
            // statement and binary transfer, where exact parameter types matter.
            String sql = "SELECT data.id AS id, data.author.name AS name FROM events "
                + "WHERE data.kind = ? AND data.id < ? ORDER BY id";
            try (PreparedStatement ps = conn.prepareStatement(sql)) {
                for (int run = 1; run <= 7; run++) {
                    ps.setString(1, "identity");
                    ps.setLong(2, 10);
                    StringBuilder rows = new StringBuilder();
                    try (ResultSet rs = ps.executeQuery()) {
                        while (rs.next()) {
                            rows.append(rs.getLong("id")).append(':').append(rs.getString("name")).append(' ');
                        }
                    }
                    System.out.println("prepared " + run + " " + rows.toString().trim());
                }
            }
            DatabaseMetaData meta = conn.getMetaData();
            try (ResultSet rs = meta.getTables(null, null, "%", new String[] {"TABLE"})) {
                while (rs.next()) {
                    System.out.println("table " + rs.getString("TABLE_NAME"));
                }
            }
            // A transaction with a savepoint rolled back to: only the first insert commits.
            conn.setAutoCommit(false);
            try (Statement st = conn.createStatement()) {
                st.executeUpdate("INSERT INTO events VALUES ('{\"id\": 1001, \"kind\": \"saved\"}')");
                java.sql.Savepoint savepoint = conn.setSavepoint("before_second");
                st.executeUpdate("INSERT INTO events VALUES ('{\"id\": 1002, \"kind\": \"saved\"}')");
                conn.rollback(savepoint);
                conn.commit();
            }
            conn.setAutoCommit(true);
            try (Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery("SELECT count(*) FROM events WHERE data.kind = 'saved'")) {
                rs.next();
                System.out.println("savepoint " + rs.getLong(1));
            }
            // The level as JDBC sets it (SET SESSION CHARACTERISTICS) and reads it back (SHOW).
            conn.setTransactionIsolation(Connection.TRANSACTION_SERIALIZABLE);
            System.out.println("isolation " + conn.getTransactionIsolation());
            conn.setTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED);
            System.out.println("isolation " + conn.getTransactionIsolation());
            try (Statement st = conn.createStatement()) {
                st.executeQuery("SELECT * FROM no_such_table");
            } catch (java.sql.SQLException e) {
                System.out.println("error " + e.getSQLState());
            }
        }
    }
}
