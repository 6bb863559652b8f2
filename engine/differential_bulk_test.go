package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// Bulk programs of the differential test (issue 18): besides the usual
// writers, statements of hundreds to thousands of rows, each captured
// as one log row whose keys fill one bucket over many pages (engine/drain/bulk.go),
// drained while the faults kill worker connections mid-page and stop
// engines.

// bulkWriter issues one bulk statement every 100-400 ms until ctx ends
// (a statement may wait a second or more for the row writers' locks): an
// INSERT … SELECT of 200-2,000 new rows (always the first), an UPDATE of
// every row, a DELETE of about half the rows, or (rarely) the bulk insert
// rolled back.
func (dr *diffRun) bulkWriter(ctx context.Context, seed uint64, textKey map[string]bool) error {
	r := rand.New(rand.NewPCG(seed, 7))
	for next := 1000; ctx.Err() == nil; {
		worker.SleepCtx(ctx, time.Duration(100+r.IntN(300))*time.Millisecond)
		if ctx.Err() != nil {
			return nil
		}
		t := dr.tables[r.IntN(len(dr.tables))]
		n := 200 + r.IntN(1800)
		var q string
		commits := true
		switch x := r.IntN(10); {
		case x < 5 || next == 1000: // the first is always a committed insert: each run drains one
			q = bulkInsert(t, dr.keys[t], textKey[t], next, n)
			next += n
		case x < 7:
			q = "UPDATE " + t + " SET i = coalesce(i, 0) + 1, n = coalesce(n, 0) + 1, g2 = coalesce(g2, 0) + 1"
		case x < 9:
			q = "DELETE FROM " + t + " WHERE random() < 0.5"
		default: // rolled back: captured rows that never commit
			q, commits = "BEGIN; "+bulkInsert(t, dr.keys[t], textKey[t], next, n)+"; ROLLBACK", false
		}
		_, err := dr.pool.Exec(ctx, q)
		switch {
		case err != nil && ctx.Err() == nil && !retryable(err):
			return fmt.Errorf("bulk writer: %s: %w", q, err)
		case err == nil && commits:
			dr.commits.Add(1)
		}
	}
	return nil
}

// bulkInsert inserts n rows with keys from off on, none of them a key
// the row writers use (theirs stay below 1,000).
func bulkInsert(t string, keys []string, textKey bool, off, n int) string {
	id := fmt.Sprintf("%d + g", off)
	if textKey {
		id = "(" + id + ")::text || 'k'"
	}
	cols, vals := []string{"id"}, []string{id}
	if len(keys) == 2 {
		cols, vals = append(cols, "k2"), append(vals, "'k' || (g % 7)")
	}
	cols = append(cols, "g1", "g2", "n", "i", "b", "j")
	vals = append(vals, "'g' || (g % 5)", "g % 11", "(g % 13) * 1.5", "g % 17", "g % 2 = 0", `jsonb_build_object('v', g % 3)`)
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM generate_series(1, %d) g ON CONFLICT DO NOTHING",
		t, strings.Join(cols, ", "), strings.Join(vals, ", "), n)
}

func TestDifferentialBulk(t *testing.T) {
	seeds := diffSeedsN(envRuns("TRELLIS_DIFF_BULK_RUNS", 2))
	if os.Getenv("TRELLIS_DIFF_SEEDS") != "" {
		seeds = diffSeeds()
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed_%d", seed), func(t *testing.T) {
			t.Logf("seed %d: bulk, faults (replay: TRELLIS_DIFF_SEEDS=%d go test ./engine -run TestDifferentialBulk)", seed, seed)
			if d := runDifferential(t, seed, diffMode{faults: true, bulk: true}, worker.Plants{}, diffWriteFor(), 0); len(d) > 0 {
				t.Fatalf("seed %d diverged:\n%s", seed, strings.Join(d, "\n"))
			}
		})
	}
}
