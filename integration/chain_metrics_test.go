package integration

import (
	"testing"
	"time"
)

// TestChainTransformMetrics scrapes /metrics around a scripted workload on
// a chain (ch_src -> ch_a -> ch_b) and an aggregate beside it (ch_sums),
// and checks the changes applied per transform exactly (changed source
// keys; a TRUNCATE counts one, and reaches ch_b as ch_a's deleted rows),
// and that the end-to-end latency is observed for the last transform of
// each chain only (ch_b and ch_sums, never ch_a, whose target ch_b reads),
// once per page that applied its changes, each at least that page's own
// commit-to-visible (it starts at the original write, a hop earlier).
func TestChainTransformMetrics(t *testing.T) {
	db := obsDB(t)
	h := startObs(t, db, "obs-chain", nil)
	waitReady(t, h)
	conn := connectURL(t, h.url("postgres", "", db, ""))
	execAll(t, conn, `CREATE TABLE ch_src (id bigint PRIMARY KEY, cust int, amount int)`,
		`TRANSFORM ch_a FROM ch_src SELECT amount * 2 AS dbl`,
		`SELECT trellis.await_live('ch_a', 30000)`,
		`TRANSFORM ch_b FROM ch_a SELECT dbl + 1 AS up`,
		`TRANSFORM ch_sums FROM ch_src GROUP BY cust SELECT cust AS cust, SUM(amount) AS total`,
		`SELECT trellis.await_live('ch_b', 30000)`, `SELECT trellis.await_live('ch_sums', 30000)`)
	before := scrape(t, h)
	execAll(t, conn, `INSERT INTO ch_src SELECT g, g % 3, g FROM generate_series(1, 30) g`,
		`SELECT trellis.await_converged(trellis.watermark_token(), 30000)`,
		`UPDATE ch_src SET amount = amount + 1 WHERE id <= 10`,
		`SELECT trellis.await_converged(trellis.watermark_token(), 30000)`,
		`TRUNCATE ch_src`,
		`SELECT trellis.await_converged(trellis.watermark_token(), 30000)`)
	if n := qString(t, conn, `SELECT count(*) FROM ch_b`); n != "0" {
		t.Fatalf("ch_b has %s rows after the truncate", n)
	}
	var after scrapeResult
	// Counters move after their page's commit; the scrape may run ahead.
	eventually(t, 30*time.Second, "the chain's counters", func() bool {
		after = scrape(t, h)
		return after[`trellis_transform_changes_applied_total{transform="ch_b"}`]-before[`trellis_transform_changes_applied_total{transform="ch_b"}`] >= 70
	})
	delta(t, before, after, `trellis_transform_changes_applied_total{transform="ch_a"}`, 30+10+1)
	delta(t, before, after, `trellis_transform_changes_applied_total{transform="ch_sums"}`, 30+10+1)
	delta(t, before, after, `trellis_transform_changes_applied_total{transform="ch_b"}`, 30+10+30)
	delta(t, before, after, `trellis_transform_end_to_end_latency_seconds_count{transform="ch_a"}`, 0)
	for _, tr := range []string{"ch_b", "ch_sums"} {
		e2e := `trellis_transform_end_to_end_latency_seconds_count{transform="` + tr + `"}`
		vis := `trellis_transform_commit_to_visible_seconds_count{transform="` + tr + `"}`
		// Every page that re-derived its keys measured both (the truncate's
		// page of ch_sums re-derived no key and measured neither).
		if got := after[e2e] - before[e2e]; got < 2 {
			t.Errorf("%s moved by %v, want at least 2 (one page per statement)", e2e, got)
		}
		delta(t, before, after, e2e, after[vis]-before[vis])
		sum := func(name string) float64 {
			k := name + `_sum{transform="` + tr + `"}`
			return after[k] - before[k]
		}
		if e, v := sum("trellis_transform_end_to_end_latency_seconds"), sum("trellis_transform_commit_to_visible_seconds"); e < v {
			t.Errorf("%s: end-to-end %v s in all, less than its commit-to-visible %v s", tr, e, v)
		}
	}
}
