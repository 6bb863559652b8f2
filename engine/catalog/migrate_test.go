package catalog

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

func TestMain(m *testing.M) { pgcluster.RunMain(m) }

func freshConn(t *testing.T) *pgx.Conn {
	t.Helper()
	c := pgcluster.ForTest(t)
	conn, err := pgx.Connect(context.Background(), c.URL(c.FreshDB(t, "cat")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func formatOf(t *testing.T, conn *pgx.Conn, schema string) int {
	t.Helper()
	var v int
	if err := conn.QueryRow(context.Background(), "SELECT format_version FROM "+pgx.Identifier{schema, "_instance"}.Sanitize()).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// Migrate creates the catalog at this build's format, is a no-op when run
// again, recreates the read views, and two instances live side by side.
func TestMigrateCreatesAndKeeps(t *testing.T) {
	ctx := context.Background()
	conn := freshConn(t)
	for range 2 {
		if err := Migrate(ctx, conn, "trellis", "public"); err != nil {
			t.Fatal(err)
		}
		if v := formatOf(t, conn, "trellis"); v != FormatVersion {
			t.Fatalf("format %d, want %d", v, FormatVersion)
		}
	}
	var views int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = 'trellis'::regnamespace AND relkind = 'v' AND relname = ANY ($1)`,
		ReadViews()).Scan(&views); err != nil || views != len(ReadViews()) {
		t.Fatalf("%d of %d read views (%v)", views, len(ReadViews()), err)
	}
	var fence bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, FenceSchema("trellis")).Scan(&fence); err != nil || !fence {
		t.Fatalf("fence schema %s: %v %v", FenceSchema("trellis"), fence, err)
	}
	if err := Migrate(ctx, conn, "second", "reports"); err != nil {
		t.Fatalf("a second instance: %v", err)
	}
	if ok, err := IsCatalog(ctx, conn, "second"); err != nil || !ok {
		t.Fatalf("IsCatalog(second) = %v, %v", ok, err)
	}
}

// What Migrate refuses, each as 55000 CatalogSchemaRefused and nothing
// created: a system schema, the target schema, a schema holding other
// objects, another instance's target schema, a catalog of a newer format.
func TestMigrateRefuses(t *testing.T) {
	ctx := context.Background()
	conn := freshConn(t)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA busy; CREATE TABLE busy.t (id int)`); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, conn, "trellis", "public"); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, conn, "trellis2", "rep"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, schema, target string }{
		{"system schema", "pg_trellis", "public"},
		{"public", "public", "reports"},
		{"catalog is the target schema", "same", "same"},
		{"schema with objects", "busy", "public"},
		{"another instance's target schema", "public2", "trellis"},
		{"catalog is another instance's target", "rep", "public"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Migrate(ctx, conn, c.schema, c.target)
			pe, ok := pgerr.As(err)
			if !ok || pe.Code != pgerr.ObjectNotInPrerequisiteState || pe.Variant != "CatalogSchemaRefused" {
				t.Fatalf("Migrate(%s, %s) = %v, want 55000 CatalogSchemaRefused", c.schema, c.target, err)
			}
		})
	}
	if _, err := conn.Exec(ctx, `UPDATE trellis._instance SET format_version = format_version + 1`); err != nil {
		t.Fatal(err)
	}
	err := Migrate(ctx, conn, "trellis", "public")
	if pe, ok := pgerr.As(err); !ok || pe.Variant != "CatalogSchemaRefused" || pe.Hint == "" {
		t.Fatalf("a newer catalog: %v", err)
	}
}
