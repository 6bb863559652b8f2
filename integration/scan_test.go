package integration

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestTrellisAfterCarriageReturnComment: a TRANSFORM after a "--" comment
// ended by '\r' (Postgres ends line comments at '\n' or '\r') is executed by
// the proxy, not relayed to Postgres as a syntax error; so is one after a
// ';' in the same string.
func TestTrellisAfterCarriageReturnComment(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE scan_orders (id bigint PRIMARY KEY, price numeric)`)
	simple := connectURL(t, h.url("postgres", "", h.db, "default_query_exec_mode=simple_protocol"))
	q := "-- a comment\rTRANSFORM scan_cr FROM scan_orders SELECT price * 2 AS doubled"
	rows, err := simple.Query(ctx, q)
	if err != nil {
		t.Fatalf("%q: %v", q, err)
	}
	vals, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil {
		t.Fatalf("%q: relayed instead of executed: %v", q, err)
	}
	if len(vals) != 1 || vals[0]["kind"] != "transform_defined" || vals[0]["target_table"] != "public.scan_cr" {
		t.Fatalf("%q: reply %v", q, vals)
	}
	// After a ';' in a multi-statement string.
	q = "SELECT 1; -- x\rTRANSFORM scan_cr2 FROM scan_orders SELECT price AS p"
	if tag, err := simple.Exec(ctx, q); err != nil || tag.String() != "TRANSFORM" {
		t.Fatalf("%q: tag %q, %v", q, tag, err)
	}
	// Extended protocol: the same statement in a Parse.
	var kind string
	if err := c.QueryRow(ctx, "-- c\rTRANSFORM scan_cr3 FROM scan_orders SELECT price AS p").Scan(&kind, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if kind != "transform_defined" {
		t.Fatalf("extended: kind %q", kind)
	}
	var n int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM trellis._definitions WHERE target_table LIKE 'public.scan_cr%'`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("definitions: %d %v", n, err)
	}
}
