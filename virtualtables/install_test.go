package virtualtables

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
)

// apiObjects are the surface objects this version installs (surface §4).
var apiObjects = []string{
	"applied", "apply", "await_converged", "await_live", "await_self_check", "capture_disruptions", "config", "converged", "define", "definitions",
	"detect_capture_disruptions", "dump_definitions_sql", "fleet", "fleet_workers", "has_live_drain_workers", "has_live_staging_worker",
	"metrics_text", "migrate", "poisoned", "poisoned_since", "proxy_workers", "quarantine_status", "quarantined",
	"quarantined_rows", "relationships", "release_key", "request_backfill", "sample_quarantined", "self_check", "self_check_divergences", "self_checks", "status", "try_await_converged",
	"watermark_token",
}

func TestInstallIdempotentConcurrentAndNamesDisjoint(t *testing.T) {
	_, pool := testDB(t)
	e, _ := newEngine(t, pool, fastConfig("trellis"))
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- Install(ctx, pool, e.Schema())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent install: %v", err)
		}
	}

	names := queryStrings(t, pool, `
		SELECT c.relname::text FROM pg_class c WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r','v','m','S','p','f')
		UNION ALL SELECT p.proname::text FROM pg_proc p WHERE p.pronamespace = $1::regnamespace
		UNION ALL SELECT t.typname::text FROM pg_type t JOIN pg_class r ON r.oid = t.typrelid
		  WHERE t.typnamespace = $1::regnamespace AND r.relkind = 'c'`, "trellis")
	var api, storage []string
	for _, n := range names {
		if strings.HasPrefix(n, "_") {
			storage = append(storage, n)
		} else {
			api = append(api, n)
		}
	}
	slices.Sort(api)
	api = slices.Compact(api)
	if !slices.Equal(api, apiObjects) {
		t.Fatalf("API objects:\n got %v\nwant %v", api, apiObjects)
	}
	// D16: the two name sets are disjoint.
	for _, s := range storage {
		if slices.Contains(api, s) {
			t.Errorf("storage object %s clashes with an API name", s)
		}
	}
	for _, want := range []string{"_definitions", "_change_log", "_poison", "_workers", "_surface", "_fail"} {
		if !slices.Contains(storage, want) {
			t.Errorf("storage object %s missing (have %v)", want, storage)
		}
	}

	// An unchanged surface is left alone: the objects keep their oids.
	before := queryStrings(t, pool, "SELECT 'trellis.status'::regclass::oid::text")
	if err := Install(ctx, pool, "trellis"); err != nil {
		t.Fatal(err)
	}
	after := queryStrings(t, pool, "SELECT 'trellis.status'::regclass::oid::text")
	if before[0] != after[0] {
		t.Fatalf("reinstall of an unchanged surface recreated trellis.status")
	}
	// Every start closes storage opened to PUBLIC, and keeps a DBA's revoke
	// of an API grant (§2.2: grants may be moved to chosen roles).
	exec(t, pool, "GRANT INSERT ON trellis._definitions TO PUBLIC")
	exec(t, pool, "GRANT USAGE ON SEQUENCE trellis._change_seq TO PUBLIC")
	exec(t, pool, "REVOKE SELECT ON trellis.fleet FROM PUBLIC")
	if err := Install(ctx, pool, "trellis"); err != nil {
		t.Fatal(err)
	}
	open := queryStrings(t, pool, `SELECT c.relname::text FROM pg_class c, aclexplode(c.relacl) a
		WHERE c.relnamespace = 'trellis'::regnamespace AND a.grantee = 0 ORDER BY 1`)
	if !slices.Equal(open, []string{"capture_disruptions", "config", "definitions", "fleet_workers", "poisoned", "proxy_workers",
		"quarantined", "quarantined_rows", "relationships", "self_check_divergences", "self_checks", "status"}) {
		t.Fatalf("relations open to PUBLIC after install: %v", open)
	}

	// Objects dropped behind its back (an engine migration altering a column
	// a view reads) are recreated at the next start.
	exec(t, pool, "DROP VIEW trellis.status CASCADE")
	if err := Install(ctx, pool, "trellis"); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, "SELECT * FROM trellis.definitions, trellis.quarantined")

	// A changed script (here: a different TTL) is reinstalled in place.
	if err := InstallOptions(ctx, pool, Options{Schema: "trellis", WorkerTTL: 7000000}); err != nil {
		t.Fatal(err)
	}
	if got := queryStrings(t, pool, "SELECT reclaim_ttl_ms::text FROM trellis.fleet"); got[0] != "7" {
		t.Fatalf("reclaim_ttl_ms after reinstall = %v", got)
	}
}

func TestInstallRefusesSchemaWithoutCatalog(t *testing.T) {
	_, pool := testDB(t)
	exec(t, pool, "CREATE SCHEMA nothing_here")
	err := Install(context.Background(), pool, "nothing_here")
	if err == nil || !strings.Contains(err.Error(), "not a Trellis catalog") {
		t.Fatalf("want refusal, got %v", err)
	}
}
