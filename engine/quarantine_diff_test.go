package engine

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// pinnedQuarantineSeeds once failed TestDifferentialQuarantine; they run on
// every fast lane. 1796115132893343322: a page charged a death to a key
// another page had just held, and the stale death never cleared (settle
// timed out).
var pinnedQuarantineSeeds = []uint64{1796115132893343322}

// TestDifferentialQuarantine is the differential test with planted failing
// rows: every random table also feeds a 1-1 and an aggregate definition whose
// formula divides by (i + 1000), and a planter sets i = -1000 on up to two
// keys per table (a key change may move one: at most four held) (before the build and while writers run; the writers never
// produce that value). While keys are held, every definition holding none is
// exact, and a token taken then does not converge; after the rows are fixed
// and every held key is released, every definition is exact.
func TestDifferentialQuarantine(t *testing.T) {
	seeds := diffSeeds()
	if os.Getenv("TRELLIS_DIFF_SEEDS") == "" {
		seeds = append(append([]uint64{}, pinnedQuarantineSeeds...), seeds[len(pinnedSeeds)+len(pinnedLifecycleSeeds):]...)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed_%d", seed), func(t *testing.T) {
			if d := runQuarantineDifferential(t, seed, diffWriteFor()); len(d) > 0 {
				t.Fatalf("seed %d diverged:\n%s", seed, strings.Join(d, "\n"))
			}
		})
	}
}

func runQuarantineDifferential(t *testing.T, seed uint64, writeFor time.Duration) []string {
	r := rand.New(rand.NewPCG(seed, 11))
	pool := testDB(t)
	dr := &diffRun{t: t, r: r, pool: pool}
	dr.genTables()
	textKey := map[string]bool{}
	for _, tb := range dr.tables {
		textKey[tb] = dr.isTextKey(tb)
	}
	{
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		dr.writer(ctx, seed^0xdef, textKey)
		cancel()
	}
	dr.genDefs()
	// The planted readers: failing only where i = -1000.
	for _, tb := range dr.tables {
		dr.defs = append(dr.defs,
			&dDef{name: "q1_" + tb, src: tb, srcSQL: tb, key: dr.keys[tb],
				fields: []dField{{name: "r", expr: "10000 / ({i} + 1000)"}, {name: "n", expr: "{n}"}}},
			&dDef{name: "q2_" + tb, src: tb, srcSQL: tb, key: dr.keys[tb],
				group:  []dField{{name: "g", expr: "{g2}"}},
				fields: []dField{{name: "s", agg: AggSum, expr: "10000 / ({i} + 1000)"}, {name: "c", agg: AggCountStar}}})
	}
	planted := map[string]int{}
	var plantMu sync.Mutex
	plant := func(pr *rand.Rand) {
		tb := dr.tables[pr.IntN(len(dr.tables))]
		plantMu.Lock()
		defer plantMu.Unlock()
		if planted[tb] >= 2 {
			return
		}
		kv := dr.keyVals(pr, tb)
		where := "id = $1"
		if len(kv) == 2 {
			where = "id = $1 AND k2 = $2"
		}
		tag, err := pool.Exec(context.Background(), "UPDATE "+tb+" SET i = -1000 WHERE "+where, kv...)
		if err == nil && tag.RowsAffected() > 0 {
			planted[tb]++
		}
	}
	pr := rand.New(rand.NewPCG(seed, 13))
	plant(pr) // before any build: a chunk meets it
	for _, d := range dr.defs {
		t.Logf("seed %d: %s <- %s key %v group %v fields %v", seed, d.name, d.src, d.key, d.group, d.fields)
	}
	cfg := fastConfig()
	cfg.PageSize = 1 + r.IntN(50)
	cfg.BuildChunkSize = 5 + r.IntN(40)
	cfg.DrainWorkers = 2
	var logBuf syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	set := &engineSet{t: t, pool: pool, cfg: cfg, plant: worker.Plants{KeepLog: true}}
	dr.logs = &logBuf
	defer set.stopAll()
	e := set.start()
	set.start()
	for _, d := range dr.defs {
		if _, err := e.Define(context.Background(), pool, d.spec()); err != nil {
			t.Fatalf("seed %d: define %s: %v", seed, d.name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := dr.writer(ctx, seed*37+uint64(w), textKey); err != nil {
				errs <- err
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			worker.SleepCtx(ctx, time.Duration(100+pr.IntN(300))*time.Millisecond)
			if ctx.Err() == nil {
				plant(pr)
			}
		}
	}()
	worker.SleepCtx(ctx, writeFor)
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("seed %d: %v", seed, err)
	}
	for _, d := range dr.defs {
		if err := e.AwaitLive(context.Background(), TableName{Name: d.name}, 90*time.Second); err != nil {
			st, _ := e.Status(context.Background())
			t.Fatalf("seed %d: %s not live: %v\n%+v", seed, d.name, err, st)
		}
	}
	// Settle: every still-bad key held, nothing left to seal, drain or
	// stage again (a page defers a failing definition's keys to _deferred
	// before they are charged: a planted key deferred is not held yet). One
	// statement, one snapshot: a page committing between separate checks
	// could stage a rederive after the batch check passed.
	unsettled := func() bool {
		return scalar[bool](t, pool, `SELECT EXISTS (SELECT 1 FROM trellis._key_deaths)
			OR EXISTS (SELECT 1 FROM trellis._deferred)
			OR EXISTS (SELECT 1 FROM trellis._batches WHERE state <> 'drained')
			OR EXISTS (SELECT 1 FROM trellis._batch_buckets WHERE last_error IS NOT NULL)
			OR EXISTS (SELECT 1 FROM trellis._change_log c
			  WHERE NOT pg_visible_in_snapshot(c.txid, (SELECT snap FROM trellis._batches ORDER BY seq DESC LIMIT 1)))`)
	}
	deadline := time.Now().Add(90 * time.Second)
	for unsettled() {
		if time.Now().After(deadline) {
			t.Fatalf("seed %d: quarantine did not settle\n%s\n%s", seed, settleState(t, pool), logBuf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	tok, err := e.WatermarkToken(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]int64{}
	rows, err := pool.Query(context.Background(), `SELECT d.compiled->'spec'->'target'->>'name', count(*) FROM trellis._poison p
		JOIN trellis._definitions d ON d.id = p.definition_id GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		var c int64
		if err := rows.Scan(&n, &c); err != nil {
			t.Fatal(err)
		}
		held[n] = c
	}
	rows.Close()
	var out []string
	for _, d := range dr.defs {
		if held[d.name] > 0 {
			if !strings.HasPrefix(d.name, "q") {
				out = append(out, fmt.Sprintf("%s holds %d keys but has no failing formula", d.name, held[d.name]))
			}
			continue
		}
		if dd := diff(t, pool, d.targetSQL(), d.oracle()); dd != "" {
			out = append(out, fmt.Sprintf("while held: %s (%s):\n%s\n%s", d.name, d.src, dd, dr.diagnose(d)))
		}
	}
	var total int64
	for _, c := range held {
		total += c
	}
	if total > 0 {
		if ok, err := e.Converged(context.Background(), tok); err != nil || ok {
			out = append(out, fmt.Sprintf("token converged with %d keys held (%v)", total, err))
		}
	}
	// Fix and release every held key; then everything is exact.
	for _, tb := range dr.tables {
		exec(t, pool, "UPDATE "+tb+" SET i = 0 WHERE i = -1000")
	}
	exec(t, pool, `WITH p AS (DELETE FROM trellis._poison RETURNING *)
		INSERT INTO trellis._change_log (src_table, key, op, definition_id, origin_lsn)
		SELECT p.src_table, p.Key, 'rederive', p.definition_id, p.origin_lsn FROM p`)
	if err := e.AwaitConverged(context.Background(), tok, 90*time.Second); err != nil {
		t.Fatalf("seed %d: token after release: %v", seed, err)
	}
	tok2, err := e.WatermarkToken(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AwaitConverged(context.Background(), tok2, 90*time.Second); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	for _, d := range dr.defs {
		if dd := diff(t, pool, d.targetSQL(), d.oracle()); dd != "" {
			out = append(out, fmt.Sprintf("after release: %s (%s):\n%s\n%s", d.name, d.src, dd, dr.diagnose(d)))
		}
	}
	t.Logf("seed %d: %d tables, %d definitions, %d commits, planted %v, held %v", seed, len(dr.tables), len(dr.defs),
		dr.commits.Load(), planted, held)
	return out
}

// settleState lists what keeps the quarantine test from settling: death
// counts, undrained batches, failing buckets, holds.
func settleState(t *testing.T, pool Querier) string {
	var b strings.Builder
	for _, q := range []string{
		`SELECT format('death %s', row(definition_id, src_table, key, deaths, last_failed_at)) FROM trellis._key_deaths`,
		`SELECT format('batch %s', row(seq, state, sealed_at, done_mask, bucket_count)) FROM trellis._batches WHERE state <> 'drained'`,
		`SELECT format('bucket %s', row(batch_seq, bucket, attempts, last_error, next_attempt_at)) FROM trellis._batch_buckets WHERE last_error IS NOT NULL`,
		`SELECT format('held %s', row(definition_id, src_table, key, poisoned_at)) FROM trellis._poison`,
		`SELECT format('deferred %s', row(definition_id, key, whole)) FROM trellis._deferred`,
	} {
		rows, err := pool.Query(context.Background(), q)
		if err != nil {
			fmt.Fprintf(&b, "%v\n", err)
			continue
		}
		for rows.Next() {
			var s string
			rows.Scan(&s)
			b.WriteString(s + "\n")
		}
		rows.Close()
	}
	return b.String()
}
