package integration

import (
	"context"
	"testing"
	"time"
)

// TestSCTransformMetrics scrapes /metrics around a scripted workload and
// checks the per-transform series moved by exactly what it did: keys
// re-derived per transform, self-check pages and divergences per target,
// and a commit-to-visible observation per transform for its pages.
func TestSCTransformMetrics(t *testing.T) {
	db := obsDB(t)
	h := startObs(t, db, "obs-sc", nil)
	waitReady(t, h)
	ctx := context.Background()
	conn := connectURL(t, h.url("postgres", "", db, ""))
	execAll(t, conn, `CREATE TABLE sc_m (id bigint PRIMARY KEY, cust int, amount int)`,
		`TRANSFORM sc_m_copy FROM sc_m SELECT amount * 2 AS dbl`,
		`TRANSFORM sc_m_sums FROM sc_m GROUP BY cust SELECT cust AS cust, SUM(amount) AS total`,
		`SELECT trellis.await_live('sc_m_copy', 30000)`, `SELECT trellis.await_live('sc_m_sums', 30000)`)
	before := scrape(t, h)
	execAll(t, conn, `INSERT INTO sc_m SELECT g, g % 3, g FROM generate_series(1, 30) g`,
		`SELECT trellis.await_converged(trellis.watermark_token(), 30000)`,
		`UPDATE sc_m SET amount = amount + 1 WHERE id <= 10`,
		`SELECT trellis.await_converged(trellis.watermark_token(), 30000)`)
	check := func(target string) string {
		var id int64
		if err := conn.QueryRow(ctx, `SELECT id FROM trellis.self_check($1, 30000)`, target).Scan(&id); err != nil {
			t.Fatal(err)
		}
		var outcome string
		if err := conn.QueryRow(ctx, `SELECT trellis.await_self_check($1, 60000)`, id).Scan(&outcome); err != nil {
			t.Fatal(err)
		}
		return outcome
	}
	if got := check("sc_m_copy"); got != "converged" {
		t.Fatalf("untouched: %s", got)
	}
	execAll(t, conn, `UPDATE sc_m_copy SET dbl = -1 WHERE id IN (4, 5)`)
	if got := check("sc_m_copy"); got != "diverged" {
		t.Fatalf("tampered: %s", got)
	}
	var after scrapeResult
	// Counters move after their commit; the scrape may run a moment ahead.
	eventually(t, 30*time.Second, "per-transform counters", func() bool {
		after = scrape(t, h)
		return after[`trellis_transform_self_check_pages_total{transform="sc_m_copy"}`]-before[`trellis_transform_self_check_pages_total{transform="sc_m_copy"}`] >= 2
	})
	delta(t, before, after, `trellis_transform_keys_rederived_total{transform="sc_m_copy"}`, 40)
	delta(t, before, after, `trellis_transform_keys_rederived_total{transform="sc_m_sums"}`, 40)
	delta(t, before, after, `trellis_transform_self_check_pages_total{transform="sc_m_copy"}`, 2)
	delta(t, before, after, `trellis_transform_self_check_divergences_total{transform="sc_m_copy"}`, 2)
	for _, tr := range []string{"sc_m_copy", "sc_m_sums"} {
		k := `trellis_transform_commit_to_visible_seconds_count{transform="` + tr + `"}`
		if after[k]-before[k] < 2 { // one page at least per statement; buckets may split one
			t.Errorf("%s moved by %v, want at least 2", k, after[k]-before[k])
		}
	}

	// An operator's pause and a column fuse, counted as the poller sees them.
	execAll(t, conn, `TRANSFORM sc_m_two FROM sc_m SELECT amount / (cust + 1) AS per, amount + 1 AS up`,
		`SELECT trellis.await_live('sc_m_two', 30000)`)
	eventually(t, 30*time.Second, "the poller to see sc_m_two", func() bool {
		after = scrape(t, h)
		return after[`trellis_transform_status{status="live",transform="sc_m_two"}`] == 1
	})
	mid := after
	execAll(t, conn, `PAUSE TRANSFORM sc_m_copy`)
	eventually(t, 30*time.Second, "the poller to see the pause", func() bool {
		return scrape(t, h)[`trellis_transform_status{status="paused",transform="sc_m_copy"}`] == 1
	})
	execAll(t, conn, `RESUME TRANSFORM sc_m_copy`, `SELECT trellis.await_live('sc_m_copy', 30000)`,
		`UPDATE sc_m SET cust = -1 WHERE id <= 8`) // 8 rows fail on per: the fuse pauses it (at 5)
	eventually(t, 30*time.Second, "the poller to see the fuse", func() bool {
		after = scrape(t, h)
		return after[`trellis_transform_column_fuses_total{transform="sc_m_two"}`] >= 1 &&
			after[`trellis_transform_status{status="live",transform="sc_m_copy"}`] == 1
	})
	delta(t, mid, after, `trellis_transform_pauses_total{cause="operator",transform="sc_m_copy"}`, 1)
	delta(t, mid, after, `trellis_transform_column_fuses_total{transform="sc_m_two"}`, 1)
	delta(t, mid, after, `trellis_transform_pauses_total{cause="operator",transform="sc_m_two"}`, 0)
}
