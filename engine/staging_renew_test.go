package engine

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

// The staging session lives at most its lifetime (worker.StagingLifetime:
// a stale role-membership cache must not outlive it), then a fresh session
// takes over at once, and changes keep converging across the renewals.
func TestStagingSessionRenewed(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE renew_src (id bigint PRIMARY KEY, v int)`)
	exec(t, pool, `INSERT INTO renew_src SELECT g, g FROM generate_series(1, 100) g`)
	e, _ := startPlanted(t, pool, fastConfig(), func(e *Engine) { e.w.Plant.StagingLifetime = 300 * time.Millisecond })
	define(t, e, Spec{Target: TableName{Name: "renew_t"}, Source: TableName{Name: "renew_src"},
		Fields: []Field{{Name: "w", Expr: col("v") + " * 2", Reads: []string{"v"}}}})
	awaitLive(t, e, "renew_t")
	stagingPids := func() []int32 {
		return pgcluster.Backends(t, pool, pool.Config().ConnConfig.Database, "trellis-staging ")
	}
	var seen []int32
	deadline := time.Now().Add(30 * time.Second)
	for round := 0; len(seen) < 3; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("staging sessions seen in 30 s: %v, want 3 renewals", seen)
		}
		for _, p := range stagingPids() {
			if !slices.Contains(seen, p) {
				seen = append(seen, p)
			}
		}
		exec(t, pool, fmt.Sprintf(`UPDATE renew_src SET v = v + 1 WHERE id = %d`, 1+round%100))
		time.Sleep(50 * time.Millisecond)
	}
	converge(t, e)
	assertSame(t, pool, `SELECT id, w FROM renew_t`, `SELECT id, v * 2 FROM renew_src`)
}
