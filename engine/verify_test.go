package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The workers verify a tenant's catalog row by compiling its statement
// again (engine/staging/verify.go): every statement the grammar accepts, defined or
// altered, must recompile to exactly the stored form, or a tenant's
// honest transform would be paused. A row that differs in any SQL
// fragment, type or name must not.
func TestRecompileMatchesDefine(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, region text, amount numeric(12,2), tax numeric(12,2),
		qty int, status varchar(20), at timestamptz, tags text[], "Odd Col" text, flag boolean, bits bit(8))`)
	exec(t, pool, `CREATE TABLE pairs (a int, b text COLLATE "C", v int, PRIMARY KEY (a, b))`)
	e, _ := startEngine(t, pool, fastConfig())
	statements := []string{
		`TRANSFORM rv_view FROM orders SELECT amount + tax AS gross, CASE WHEN status = 'shipped' THEN 1 ELSE 0 END AS shipped,
		   round(amount * 0.92, 2) AS amount_eur, gross * 2 AS double_gross, upper("Odd Col") AS "Odd Out", at AT TIME ZONE 'UTC' AS at_utc,
		   cardinality(tags) AS ntags, coalesce(status, 'none')::text AS st`,
		`TRANSFORM rv_sums FROM orders GROUP BY region SELECT SUM(amount) AS total, COUNT(*) AS n, COUNT(status) AS with_status,
		   AVG(qty) AS avg_qty, MIN(at) AS first_at, MAX(amount) AS top, BOOL_AND(flag) AS all_flag, BOOL_OR(flag) AS any_flag,
		   BIT_AND(bits) AS band, BIT_OR(bits) AS bor, JSONB_AGG(qty) AS qtys`,
		`TRANSFORM rv_multi FROM orders GROUP BY region, status SELECT SUM(qty) AS q`,
		`TRANSFORM rv_pairs FROM pairs SELECT v * 2 AS w, b || '!' AS b2`,
		`TRANSFORM rv_chain FROM rv_sums SELECT total * 2 AS twice`,
		`TRANSFORM rv_chain_agg FROM rv_view GROUP BY shipped SELECT SUM(gross) AS g`,
	}
	for _, s := range statements {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if _, err := applyText(t, e, `ALTER TRANSFORM rv_pairs ADD v + 1 AS v1`); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT target_table, definition_sql, compiled, source_oid FROM trellis._definitions ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	type def struct {
		target, stmt string
		raw          []byte
		src          uint32
	}
	defs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (def, error) {
		var d def
		return d, r.Scan(&d.target, &d.stmt, &d.raw, &d.src)
	})
	if err != nil || len(defs) != len(statements) {
		t.Fatalf("%d definitions (%v)", len(defs), err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, d := range defs {
		why, err := e.w.VerifyOne(ctx, conn.Conn(), d.stmt, d.raw, d.src)
		if err != nil || why != "" {
			t.Errorf("%s: %q %v\n%s", d.target, why, err, d.stmt)
		}
		// Tampering with any part of the row is caught.
		for _, tamper := range []struct{ path, value string }{
			{"{spec,fields,0,expr}", `"(SELECT 1)"`},
			{"{key,0,type}", `"bigint OR true"`},
			{"{source_text}", `"pg_catalog.pg_authid"`},
			{"{spec,source,name}", `"pg_authid"`},
			{"{field_types,0}", `"text"`},
		} {
			var raw []byte
			if err := pool.QueryRow(ctx, `SELECT jsonb_set($1::jsonb, $2::text[], $3::jsonb)`, d.raw, tamper.path, tamper.value).Scan(&raw); err != nil {
				t.Fatal(err)
			}
			if why, err := e.w.VerifyOne(ctx, conn.Conn(), d.stmt, raw, d.src); err != nil || why == "" {
				t.Errorf("%s with %s = %s: verified (%v)", d.target, tamper.path, tamper.value, err)
			}
		}
		for _, stmt := range []string{d.stmt + "; ALTER ROLE postgres NOSUPERUSER", strings.ToLower(d.stmt), d.stmt + " -- x"} {
			if why, err := e.w.VerifyOne(ctx, conn.Conn(), stmt, d.raw, d.src); err != nil || why == "" {
				t.Errorf("%s with statement %q: verified (%v)", d.target, stmt, err)
			}
		}
	}
}
