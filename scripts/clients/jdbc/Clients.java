// pgJDBC scenarios for cmd/trellis-clients: how JDBC applications, and the
// migration tools and ORMs on top of JDBC (Flyway, Liquibase, Hibernate,
// Spring), reach Postgres. One line per case on stdout: "PASS name",
// "FAIL name: why", "SKIP name: why". Connection from PGHOST/PGPORT/PGUSER/
// PGDATABASE; CLIENTS_PATH=proxy runs the Trellis cases too; CLIENTS_TAG
// keeps the direct and proxy runs' tables apart.
//
// Run: javac -cp /usr/share/java/postgresql.jar -d out Clients.java
//      java -cp out:/usr/share/java/postgresql.jar Clients

import java.io.StringReader;
import java.io.StringWriter;
import java.sql.*;
import java.util.Properties;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;
import org.postgresql.PGStatement;
import org.postgresql.copy.CopyManager;

public class Clients {
    static final boolean viaProxy = "proxy".equals(System.getenv("CLIENTS_PATH"));
    static final String tag = System.getenv().getOrDefault("CLIENTS_TAG", "x");
    static final String url = "jdbc:postgresql://" + System.getenv("PGHOST") + ":" + System.getenv("PGPORT") + "/" + System.getenv("PGDATABASE");

    interface Case { void run() throws Exception; }

    static String t(String name) { return "jdbc_" + tag + "_" + name; }

    static void check(boolean cond, String msg) { if (!cond) throw new AssertionError(msg); }

    static Connection connect(String... kv) throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", System.getenv("PGUSER"));
        p.setProperty("sslmode", "disable");
        for (int i = 0; i + 1 < kv.length; i += 2) p.setProperty(kv[i], kv[i + 1]);
        return DriverManager.getConnection(url, p);
    }

    static void test(String name, boolean trellis, Case c) {
        if (trellis && !viaProxy) { System.out.println("SKIP " + name + ": Trellis statement, proxy only"); return; }
        try {
            c.run();
            System.out.println("PASS " + name);
        } catch (SQLException e) {
            System.out.println("FAIL " + name + ": " + e.getSQLState() + " " + e.getMessage().replace('\n', ' '));
        } catch (Throwable e) {
            System.out.println("FAIL " + name + ": " + String.valueOf(e.getMessage()).replace('\n', ' '));
        }
        System.out.flush();
    }

    static void exec(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement()) { s.execute(sql); }
    }

    static String one(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) {
            return rs.next() ? rs.getString(1) : null;
        }
    }

    static void awaitLive(Connection c, String target) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("SELECT trellis.await_live(?, 60000)")) {
            ps.setString(1, target);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next() && "live".equals(rs.getString(1)), target + " not live");
            }
        }
    }

    public static void main(String[] args) throws Exception {
        try (Connection c = connect()) {
            exec(c, "DROP TABLE IF EXISTS " + t("items") + ", " + t("batch") + ", " + t("copy") + ", " + t("multi"));
            exec(c, "CREATE TABLE " + t("items") + " (id bigint PRIMARY KEY, name text NOT NULL)");
            exec(c, "INSERT INTO " + t("items") + " SELECT g, 'n' || g FROM generate_series(1, 10) g");
            exec(c, "CREATE TABLE " + t("batch") + " (id bigint PRIMARY KEY, v text)");
            exec(c, "CREATE TABLE " + t("copy") + " (id bigint PRIMARY KEY, v text)");
        }

        test("jdbc.simple_statement", false, () -> {
            try (Connection c = connect()) { check("1".equals(one(c, "SELECT 1")), "SELECT 1"); }
        });

        test("jdbc.prepared_statement_default_threshold", false, () -> {
            try (Connection c = connect(); PreparedStatement ps = c.prepareStatement("SELECT name FROM " + t("items") + " WHERE id = ?")) {
                for (int i = 1; i <= 7; i++) {
                    ps.setLong(1, i);
                    try (ResultSet rs = ps.executeQuery()) { check(rs.next() && ("n" + i).equals(rs.getString(1)), "row " + i); }
                }
            }
        });

        test("jdbc.server_prepared_threshold_1", false, () -> {
            try (Connection c = connect("prepareThreshold", "1"); PreparedStatement ps = c.prepareStatement("SELECT name FROM " + t("items") + " WHERE id = ?")) {
                for (int i = 1; i <= 3; i++) {
                    ps.setLong(1, i);
                    try (ResultSet rs = ps.executeQuery()) { check(rs.next() && ("n" + i).equals(rs.getString(1)), "row " + i); }
                }
                check(ps.unwrap(PGStatement.class).isUseServerPrepare(), "not server-prepared");
            }
        });

        test("jdbc.autocommit_off_sql", false, () -> {
            try (Connection c = connect()) {
                c.setAutoCommit(false);
                exec(c, "INSERT INTO " + t("batch") + " VALUES (100, 'rolled back')");
                c.rollback();
                exec(c, "INSERT INTO " + t("batch") + " VALUES (101, 'kept')");
                c.commit();
                check("1".equals(one(c, "SELECT count(*) FROM " + t("batch") + " WHERE id IN (100, 101)")), "rollback/commit");
            }
        });

        test("jdbc.execute_batch_sql", false, () -> {
            try (Connection c = connect(); PreparedStatement ps = c.prepareStatement("INSERT INTO " + t("batch") + " VALUES (?, ?)")) {
                for (int i = 1; i <= 50; i++) { ps.setLong(1, i); ps.setString(2, "v" + i); ps.addBatch(); }
                int[] n = ps.executeBatch();
                check(n.length == 50, "batch counts " + n.length);
                check("50".equals(one(c, "SELECT count(*) FROM " + t("batch") + " WHERE id <= 50")), "rows");
            }
        });

        test("jdbc.statement_batch_sql", false, () -> {
            try (Connection c = connect(); Statement s = c.createStatement()) {
                s.addBatch("INSERT INTO " + t("batch") + " VALUES (200, 'a')");
                s.addBatch("UPDATE " + t("batch") + " SET v = 'b' WHERE id = 200");
                s.addBatch("DELETE FROM " + t("batch") + " WHERE id = 200");
                int[] n = s.executeBatch();
                check(n.length == 3 && n[0] == 1 && n[1] == 1 && n[2] == 1, "counts");
            }
        });

        test("jdbc.multi_statement_execute_sql", false, () -> {
            try (Connection c = connect(); Statement s = c.createStatement()) {
                s.execute("CREATE TABLE " + t("multi") + " (id bigint PRIMARY KEY); INSERT INTO " + t("multi") + " VALUES (1), (2)");
                check("2".equals(one(c, "SELECT count(*) FROM " + t("multi"))), "rows");
            }
        });

        test("jdbc.error_then_recover", false, () -> {
            try (Connection c = connect()) {
                try { one(c, "SELEC 1"); check(false, "no error"); } catch (SQLException e) { check("42601".equals(e.getSQLState()), e.getSQLState()); }
                c.setAutoCommit(false);
                try { one(c, "SELECT 1/0"); check(false, "no error"); } catch (SQLException e) { check("22012".equals(e.getSQLState()), e.getSQLState()); }
                c.rollback();
                check("3".equals(one(c, "SELECT 3")), "recover");
            }
        });

        test("jdbc.backend_pid", false, () -> {
            try (Connection c = connect()) {
                int pid = c.unwrap(PGConnection.class).getBackendPID();
                check(String.valueOf(pid).equals(one(c, "SELECT pg_backend_pid()")), "reported pid " + pid);
            }
        });

        test("jdbc.listen_notify_sender_pid", false, () -> {
            try (Connection c = connect()) {
                exec(c, "LISTEN " + t("chan"));
                exec(c, "NOTIFY " + t("chan") + ", 'hi'");
                PGNotification[] ns = c.unwrap(PGConnection.class).getNotifications(10000);
                check(ns != null && ns.length == 1, "no notification");
                check("hi".equals(ns[0].getParameter()), ns[0].getParameter());
                check(ns[0].getPID() == c.unwrap(PGConnection.class).getBackendPID(), "sender pid " + ns[0].getPID());
            }
        });

        test("jdbc.cancel", false, () -> {
            try (Connection c = connect(); Statement s = c.createStatement()) {
                Thread th = new Thread(() -> { try { Thread.sleep(400); s.cancel(); } catch (Exception e) { } });
                th.start();
                try { s.execute("SELECT pg_sleep(30)"); check(false, "not cancelled"); } catch (SQLException e) { check("57014".equals(e.getSQLState()), e.getSQLState()); }
                th.join();
                check("1".equals(one(c, "SELECT 1")), "after cancel");
            }
        });

        test("jdbc.query_timeout", false, () -> {
            try (Connection c = connect(); Statement s = c.createStatement()) {
                s.setQueryTimeout(1);
                try { s.execute("SELECT pg_sleep(20)"); check(false, "no timeout"); } catch (SQLException e) { check("57014".equals(e.getSQLState()), e.getSQLState()); }
            }
        });

        test("jdbc.copy_in_out", false, () -> {
            try (Connection c = connect()) {
                CopyManager cm = c.unwrap(PGConnection.class).getCopyAPI();
                StringBuilder sb = new StringBuilder();
                for (int i = 1; i <= 1000; i++) sb.append(i).append('\t').append("v").append(i).append('\n');
                long in = cm.copyIn("COPY " + t("copy") + " FROM STDIN", new StringReader(sb.toString()));
                StringWriter w = new StringWriter();
                long out = cm.copyOut("COPY " + t("copy") + " TO STDOUT", w);
                check(in == 1000 && out == 1000 && w.toString().equals(sb.toString()), "in " + in + " out " + out);
            }
        });

        test("jdbc.transform_autocommit", true, () -> {
            try (Connection c = connect(); Statement s = c.createStatement()) {
                s.execute("TRANSFORM " + t("upper") + " FROM " + t("items") + " SELECT upper(name) AS uname");
                awaitLive(c, t("upper"));
                check("N3".equals(one(c, "SELECT uname FROM " + t("upper") + " WHERE id = 3")), "target row");
            }
        });

        test("jdbc.autocommit_off_transform_first", true, () -> {
            // pgJDBC sends BEGIN and the transaction's first statement in one
            // Sync batch: what Flyway does with a migration starting with a
            // TRANSFORM.
            try (Connection c = connect()) {
                c.setAutoCommit(false);
                exec(c, "TRANSFORM " + t("lens") + " FROM " + t("items") + " SELECT length(name) AS len");
                c.commit();
                awaitLive(c, t("lens"));
            }
        });

        test("jdbc.autocommit_off_create_then_transform", true, () -> {
            try (Connection c = connect()) {
                c.setAutoCommit(false);
                exec(c, "CREATE TABLE " + t("pay") + " (id bigint PRIMARY KEY, who text, amount numeric)");
                exec(c, "TRANSFORM " + t("paid") + " FROM " + t("pay") + " GROUP BY who SELECT SUM(amount) AS total");
                c.commit();
                // Autocommit on again: the next case is the proxy call as a
                // transaction's first statement.
                c.setAutoCommit(true);
                awaitLive(c, t("paid"));
            }
        });

        test("jdbc.autocommit_off_proxy_call_first", true, () -> {
            // BEGIN shares the Sync batch with the proxy-answered call.
            try (Connection c = connect()) {
                c.setAutoCommit(false);
                awaitLive(c, t("upper"));
                c.commit();
            }
        });

        test("jdbc.autocommit_off_transform_rollback", true, () -> {
            try (Connection c = connect()) {
                c.setAutoCommit(false);
                exec(c, "SELECT 1");
                exec(c, "TRANSFORM " + t("gone") + " FROM " + t("items") + " SELECT name || '!' AS bang");
                c.rollback();
                c.setAutoCommit(true);
                check("0".equals(one(c, "SELECT count(*) FROM trellis.status WHERE target = '" + t("gone") + "'")), "rolled-back transform still listed");
            }
        });

        test("jdbc.multi_statement_create_and_transform", true, () -> {
            try (Connection c = connect(); Statement s = c.createStatement()) {
                s.execute("CREATE TABLE " + t("ms") + " (id bigint PRIMARY KEY, v text); TRANSFORM " + t("ms_up") + " FROM " + t("ms") + " SELECT upper(v) AS uv");
                awaitLive(c, t("ms_up"));
            }
        });

        test("jdbc.statement_batch_with_transform", true, () -> {
            try (Connection c = connect(); Statement s = c.createStatement()) {
                s.addBatch("CREATE TABLE " + t("bt") + " (id bigint PRIMARY KEY, v text)");
                s.addBatch("TRANSFORM " + t("bt_up") + " FROM " + t("bt") + " SELECT upper(v) AS uv");
                s.executeBatch();
                awaitLive(c, t("bt_up"));
            }
        });

        test("jdbc.server_prepared_transform", true, () -> {
            try (Connection c = connect("prepareThreshold", "1"); PreparedStatement ps = c.prepareStatement("TRANSFORM " + t("sp") + " FROM " + t("items") + " SELECT name || '?' AS q")) {
                try (ResultSet rs = ps.executeQuery()) { check(rs.next() && "transform_defined".equals(rs.getString("kind")), "reply row"); }
                awaitLive(c, t("sp"));
            }
        });

        test("jdbc.server_prepared_status_query", true, () -> {
            try (Connection c = connect("prepareThreshold", "1"); PreparedStatement ps = c.prepareStatement("SELECT target, status FROM trellis.status WHERE target = ?")) {
                for (int i = 0; i < 3; i++) {
                    ps.setString(1, t("upper"));
                    try (ResultSet rs = ps.executeQuery()) { check(rs.next() && t("upper").equals(rs.getString(1)), "status row"); }
                }
            }
        });

        test("jdbc.status_select", true, () -> {
            try (Connection c = connect(); Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT * FROM trellis.status")) {
                check(rs.next(), "no rows");
                rs.getString("target");
            }
        });
    }
}
