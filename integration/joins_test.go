package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// joinSchema is the star and snowflake of the JOIN target tests: orders
// point at customers (and at a sales rep, an employee), customers at
// regions, employees at their manager (a self-join).
var joinSchema = []string{
	`CREATE TABLE regions (id int PRIMARY KEY, name text)`,
	`CREATE TABLE customers (id bigint PRIMARY KEY, name text, region_id int)`,
	`CREATE INDEX ON customers (region_id)`,
	`CREATE TABLE employees (id int PRIMARY KEY, name text, manager_id int)`,
	`CREATE INDEX ON employees (manager_id)`,
	`CREATE TABLE skus (maker text, code int, family text, PRIMARY KEY (maker, code))`,
	`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint, rep_id int, maker text, code int, amount numeric)`,
	`CREATE INDEX ON orders (customer_id)`,
	`CREATE INDEX ON orders (rep_id)`,
	`CREATE INDEX ON orders (maker, code)`,
	`INSERT INTO regions SELECT g, 'region ' || g FROM generate_series(1, 4) g`,
	`INSERT INTO customers SELECT g, 'customer ' || g, nullif(g % 5, 0) FROM generate_series(1, 30) g`,
	`INSERT INTO employees SELECT g, 'emp ' || g, CASE WHEN g > 3 THEN g % 3 + 1 END FROM generate_series(1, 12) g`,
	`INSERT INTO skus SELECT m, c, 'family ' || (c % 3) FROM unnest(ARRAY['a', 'b']) m, generate_series(1, 6) c`,
	`INSERT INTO orders SELECT g, nullif(g % 33, 0), g % 13, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END, g % 7, g FROM generate_series(1, 400) g`,
}

// startJoinSchema starts a proxy with the engine and creates joinSchema.
func startJoinSchema(t *testing.T) (*trellisHarness, *pgx.Conn) {
	h := startTrellis(t)
	c := h.client(t)
	for _, q := range joinSchema {
		mustExec(t, c, q)
	}
	return h, c
}

// Every accepted form of joins spec §2 through the proxy: each goes live
// and, after writes to every table, equals Postgres's own run of its join
// query.
func TestJoinTargetsThroughProxy(t *testing.T) {
	h, c := startJoinSchema(t)
	ctx := context.Background()
	cases := []struct{ name, stmt, got, want string }{
		{"star_left", `TRANSFORM j_star FROM orders o LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN employees e ON e.id = o.rep_id
			SELECT o.amount AS amount, c.name AS customer, e.name AS rep`,
			`SELECT id, amount, customer, rep FROM j_star`,
			`SELECT o.id, o.amount, c.name, e.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN employees e ON e.id = o.rep_id`},
		{"snowflake_inner", `TRANSFORM j_snow FROM orders AS o INNER JOIN customers AS c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id
			SELECT r.name AS region, o.amount * 2 AS twice`,
			`SELECT id, region, twice FROM j_snow`,
			`SELECT o.id, r.name, o.amount * 2 FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id`},
		{"self_join", `TRANSFORM j_boss FROM employees e LEFT OUTER JOIN employees m ON m.id = e.manager_id SELECT e.name AS who, m.name AS boss`,
			`SELECT id, who, boss FROM j_boss`,
			`SELECT e.id, e.name, m.name FROM employees e LEFT JOIN employees m ON m.id = e.manager_id`},
		{"composite_bare_columns", `TRANSFORM j_sku FROM orders o JOIN skus s ON s.maker = o.maker AND s.code = o.code SELECT family AS family, amount AS amount`,
			`SELECT id, family, amount FROM j_sku`,
			`SELECT o.id, s.family, o.amount FROM orders o JOIN skus s ON s.maker = o.maker AND s.code = o.code`},
		{"aggregate_by_joined", `TRANSFORM j_region_revenue FROM orders o LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id
			GROUP BY r.name SELECT SUM(o.amount) AS revenue, COUNT(*) AS n, MIN(c.name) AS first_customer`,
			`SELECT name, revenue, n, first_customer FROM j_region_revenue`,
			`SELECT r.name, sum(o.amount), count(*), min(c.name) FROM orders o LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id GROUP BY r.name`},
		{"without_source_index", `TRANSFORM j_noidx FROM customers c LEFT JOIN regions r ON r.id = c.region_id SELECT r.name AS region WITHOUT SOURCE INDEX`,
			`SELECT id, region FROM j_noidx`,
			`SELECT c.id, r.name FROM customers c LEFT JOIN regions r ON r.id = c.region_id`},
		{"target_as_dimension", `TRANSFORM j_chain FROM regions r LEFT JOIN j_region_revenue g ON g.name = r.name SELECT g.revenue AS revenue WITHOUT SOURCE INDEX`,
			`SELECT id, revenue FROM j_chain`,
			`SELECT r.id, g.revenue FROM regions r LEFT JOIN (SELECT r.name, sum(o.amount) AS revenue FROM orders o LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id GROUP BY r.name) g ON g.name = r.name`},
		{"join_target_as_source", `TRANSFORM j_from_target FROM j_star s LEFT JOIN regions r ON r.id = s.amount::int % 4 SELECT s.customer AS customer`,
			"", ""},
	}
	for _, cs := range cases {
		if cs.got == "" {
			// A formula in an ON condition is not a column: refused (the
			// chain above covers a JOIN target read by another).
			_, err := c.Exec(ctx, cs.stmt)
			if pe := pgErrOf(t, err); pe.Code != "42601" && pe.Code != "0A000" {
				t.Fatalf("%s: %s %s", cs.name, pe.Code, pe.Message)
			}
			continue
		}
		if _, err := c.Exec(ctx, cs.stmt); err != nil {
			t.Fatalf("%s: %v", cs.name, err)
		}
	}
	mustExec(t, c, `TRANSFORM j_from_star FROM j_star s LEFT JOIN customers c2 ON c2.id = s.id SELECT s.customer AS customer, c2.name AS other`)
	cases = append(cases, struct{ name, stmt, got, want string }{"join_target_as_source", "",
		`SELECT id, customer, other FROM j_from_star`,
		`SELECT o.id, c.name, c2.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN customers c2 ON c2.id = o.id`})
	check := func(when string) {
		t.Helper()
		var token string
		if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&token); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "SELECT trellis.await_converged($1, 60000)", token); err != nil {
			t.Fatalf("%s: await_converged: %v", when, err)
		}
		for _, cs := range cases {
			if cs.got == "" {
				continue
			}
			var n int64
			q := fmt.Sprintf(`SELECT count(*) FROM ((%[1]s EXCEPT ALL %[2]s) UNION ALL (%[2]s EXCEPT ALL %[1]s)) d`, cs.got, cs.want)
			if err := c.QueryRow(ctx, q).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%s: %s differs from its join in %d rows (%v)", when, cs.name, n, err)
			}
		}
	}
	for _, n := range []string{"j_star", "j_snow", "j_boss", "j_sku", "j_region_revenue", "j_noidx", "j_chain", "j_from_star"} {
		h.waitStatus(t, n, "live")
	}
	check("built")
	for _, q := range []string{
		`UPDATE regions SET name = name || '''' WHERE id = 2`,
		`UPDATE customers SET region_id = 3 WHERE region_id = 1`,
		`UPDATE orders SET customer_id = customer_id % 7 + 1, rep_id = NULL WHERE id % 4 = 0`,
		`UPDATE employees SET manager_id = 2 WHERE manager_id = 3`,
		`DELETE FROM customers WHERE id % 6 = 0`,
		`UPDATE skus SET family = 'new' WHERE code = 3`,
		`INSERT INTO customers VALUES (6, 'customer six again', 4)`,
		`TRUNCATE regions`,
		`INSERT INTO regions VALUES (1, 'one'), (2, 'two')`,
	} {
		mustExec(t, c, q)
	}
	check("after writes to every table")

	// A fan-out index dropped later is a warning in status, naming the fix.
	mustExec(t, c, `DROP INDEX customers_region_id_idx`)
	var gaps string
	if err := c.QueryRow(ctx, `SELECT source_index_gaps::text FROM trellis.status WHERE target = 'j_snow'`).Scan(&gaps); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(gaps, `"create_index": "CREATE INDEX ON public.customers (region_id);"`) || !strings.Contains(gaps, `"role": "join"`) {
		t.Fatalf("source_index_gaps %s", gaps)
	}
	if err := c.QueryRow(ctx, `SELECT source_index_gaps::text FROM trellis.status WHERE target = 'j_star'`).Scan(&gaps); err != nil || gaps != "[]" {
		t.Fatalf("j_star gaps %s %v", gaps, err)
	}

	// Status and the definitions show the joined tables; the dump replays.
	var joined string
	var reads []string
	if err := c.QueryRow(ctx, `SELECT definition_text, reads FROM trellis.definitions WHERE target = 'j_snow'`).Scan(&joined, &reads); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(joined, `JOIN "public"."customers" AS "c" ON "c"."id" = "o"."customer_id"`) || !strings.Contains(joined, `JOIN "public"."regions"`) ||
		strings.Join(reads, ",") != "public.orders,public.customers,public.regions" {
		t.Fatalf("definitions: statement %q reads %q", joined, reads)
	}
}

// Each refusal of joins spec §2-§4 through the proxy, with its SQLSTATE,
// variant and caret (psql's position is 1-based, in characters).
func TestJoinRefusalsThroughProxy(t *testing.T) {
	_, c := startJoinSchema(t)
	ctx := context.Background()
	mustExec(t, c, `CREATE TABLE codes (id bigint PRIMARY KEY, code text UNIQUE)`)
	many := "TRANSFORM t FROM orders o"
	for i := range 17 {
		many += fmt.Sprintf(" LEFT JOIN regions r%d ON r%d.id = o.rep_id", i, i)
	}
	many += " SELECT o.amount AS a"
	cases := []struct{ stmt, code, variant, at string }{
		{`TRANSFORM t FROM orders o RIGHT JOIN customers c ON c.id = o.customer_id SELECT c.name AS n`, "0A000", "UnsupportedJoinKind", "RIGHT"},
		{`TRANSFORM t FROM orders o JOIN customers c USING (id) SELECT c.name AS n`, "0A000", "UnsupportedJoinCondition", "USING"},
		{`TRANSFORM t FROM orders o JOIN customers c ON c.id = o.customer_id OR c.id = 1 SELECT c.name AS n`, "0A000", "UnsupportedJoinCondition", "OR c.id"},
		{`TRANSFORM t FROM orders JOIN orders ON orders.id = orders.id SELECT amount AS a`, "42712", "DuplicateTableName", "orders ON"},
		{many, "54000", "TooManyJoins", "LEFT JOIN regions r16"},
		{`TRANSFORM t FROM customers c JOIN orders o ON o.customer_id = c.id SELECT o.amount AS a`, "0A000", "JoinNotToOne", "orders o"},
		{`TRANSFORM t FROM orders o JOIN regions r ON r.id = o.customer_id SELECT r.name AS n`, "42804", "JoinTypeMismatch", "regions r"},
		{`TRANSFORM t FROM skus s JOIN regions r ON r.id = s.code SELECT r.name AS n`, "0A000", "MissingSourceIndex", "regions r"},
		{`TRANSFORM t FROM orders o JOIN customers c ON c.id = o.customer_id SELECT name AS n, c.nope AS m`, "42703", "UnresolvedColumn", "c.nope"},
		{`RELATIONSHIP owner FROM orders.customer_id TO customers.id`, "0A000", "RelationshipsReplacedByJoin", "RELATIONSHIP"},
		{`TRANSFORM t FROM orders o JOIN orders ON orders.id = o.id SELECT o.amount AS a`, "", "", ""},
	}
	for _, cs := range cases {
		_, err := c.Exec(ctx, cs.stmt)
		if cs.code == "" {
			// A self-join whose second item keeps its table's name is fine.
			if err != nil {
				t.Fatalf("%s: %v", cs.stmt, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("%s: accepted, want %s %s", cs.stmt, cs.code, cs.variant)
		}
		pe := pgErrOf(t, err)
		if pe.Code != cs.code || !strings.Contains(pe.Detail, cs.variant) {
			t.Errorf("%s: got %s %q (%s), want %s %s", cs.stmt, pe.Code, pe.Detail, pe.Message, cs.code, cs.variant)
			continue
		}
		if want := strings.Index(cs.stmt, cs.at) + 1; int(pe.Position) != want {
			t.Errorf("%s: caret at %d, want %d (%q): %s", cs.stmt, pe.Position, want, cs.at, pe.Message)
		}
		if pe.Hint == "" {
			t.Errorf("%s: no hint", cs.stmt)
		}
	}
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM trellis.status WHERE target = 't'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the one accepted statement left %d transforms (%v)", n, err)
	}
}

// A JOIN target defined in one transaction with the tables it joins, as a
// migration does, and by an ordinary role with either workers' role (the
// workers verify a tenant's JOIN statement before they capture for it).
func TestJoinTargetInMigrationTransaction(t *testing.T) { eachWorkers(t, joinInMigration) }

func joinInMigration(t *testing.T, h *trellisHarness) {
	ctx := context.Background()
	h.tenant(t, "join_tenant")
	c := connectURL(t, h.url("join_tenant", "", h.db, ""))
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE teams (id int PRIMARY KEY, name text)`,
		`CREATE TABLE tickets (id bigint PRIMARY KEY, team_id int, title text)`,
		`CREATE INDEX ON tickets (team_id)`,
		`INSERT INTO teams VALUES (1, 'core'), (2, 'web')`,
		`INSERT INTO tickets SELECT g, g % 3, 'ticket ' || g FROM generate_series(1, 50) g`,
		`TRANSFORM ticket_teams FROM tickets t LEFT JOIN teams m ON m.id = t.team_id SELECT t.title AS title, m.name AS team`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(t, "ticket_teams", "live")
	mustExec(t, c, `UPDATE teams SET name = 'platform' WHERE id = 1`)
	mustExec(t, c, `UPDATE tickets SET team_id = 2 WHERE id % 5 = 0`)
	var token string
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&token); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "SELECT trellis.await_converged($1, 60000)", token); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := c.QueryRow(ctx, `SELECT count(*) FROM (
		(SELECT id, title, team FROM ticket_teams EXCEPT ALL SELECT t.id, t.title, m.name FROM tickets t LEFT JOIN teams m ON m.id = t.team_id)
		UNION ALL
		(SELECT t.id, t.title, m.name FROM tickets t LEFT JOIN teams m ON m.id = t.team_id EXCEPT ALL SELECT id, title, team FROM ticket_teams)) d`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("ticket_teams differs in %d rows (%v)", n, err)
	}
}
