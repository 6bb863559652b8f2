package main

// J2 join-latency (joins spec §7): commit → visible when one dimension row
// that 1,000 facts read is updated, at 100 dimension updates/s beside 1,000
// fact writes/s, engine defaults.
//
// Schema: j2_dim(id, ver) with D rows (default 1,000), j2_facts with 1,000
// facts per dimension row; the 1-1 JOIN target j2_t carries each fact's
// a_id and its dimension's ver. Dimension update k sets row 1 + (k-1) % D
// to ver = k (versions only grow), from 2 connections sharing one paced
// schedule, and records when its commit returned. Fact writers (4
// connections, one paced schedule) alternate a single-row UPDATE of a
// random fact's own column with a single-row INSERT of a new fact pointing
// at a random dimension row.
//
// Visible: no target row of that dimension row still shows an older
// version, i.e. every fact reading it shows the new value (or a later
// one). A watcher on its own connection checks every pending update every
// 5 ms in one query, NOT EXISTS over an index on j2_t(a_id, ver) that the
// harness adds (one index probe per pending update), and records when each
// first passes. An update not visible within the grace after the window
// counts as infinite. The target is compared with its join after each
// repetition.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

const j2Stmt = `TRANSFORM j2_t FROM j2_facts f LEFT JOIN j2_dim d ON d.id = f.a_id SELECT f.a_id AS a_id, f.amount AS amount, d.ver AS ver`

type j2Config struct {
	dims, perDim       int
	dimRate, factRate  float64
	window, grace      time.Duration
	verBase, factsNext int64 // advanced by each repetition
}

type j2Result struct {
	lat                 []float64 // ms per dimension update, +Inf if never visible
	dimRate, factRate   float64   // achieved, per second of the window
	drainAfter          float64   // seconds from the window's end to convergence
	oracleErr           error
	dimUpdates, factOps int64
}

func runJoinLatency(ctx context.Context, b *bench) error {
	jc := j2Config{dims: envInt("TRELLIS_BENCH_J2_DIMS", 1000), perDim: 1000,
		dimRate: float64(envInt("TRELLIS_BENCH_J2_DIM_RATE", 100)), factRate: float64(envInt("TRELLIS_BENCH_J2_FACT_RATE", 1000)),
		window: time.Duration(envInt("TRELLIS_BENCH_J2_SECONDS", 10)) * time.Second,
		grace:  time.Duration(envInt("TRELLIS_BENCH_J2_GRACE_S", 30)) * time.Second}
	if b.cfg.Quick {
		jc.dims, jc.window, jc.grace = 50, 3*time.Second, 10*time.Second
	}
	pool, stop, err := labDB(ctx, b, "join-latency", 16)
	if err != nil {
		return err
	}
	defer stop()
	facts := int64(jc.dims * jc.perDim)
	if err := execAll(ctx, pool,
		`CREATE TABLE j2_dim (id int PRIMARY KEY, ver bigint NOT NULL)`,
		fmt.Sprintf(`INSERT INTO j2_dim SELECT g, 0 FROM generate_series(1, %d) g`, jc.dims),
		`CREATE TABLE j2_facts (id bigint PRIMARY KEY, a_id int, amount int)`,
		fmt.Sprintf(`INSERT INTO j2_facts SELECT g, 1 + (g - 1) %% %d, 0 FROM generate_series(1, %d) g`, jc.dims, facts),
		`CREATE INDEX ON j2_facts (a_id)`,
		`VACUUM ANALYZE j2_dim, j2_facts`,
	); err != nil {
		return err
	}
	e, err := startEngine(ctx, pool, engine.Config{})
	if err != nil {
		return err
	}
	defer e.stop()
	if err := defineJoin(ctx, e, pool, "j2_t", j2Stmt, 10*time.Minute); err != nil {
		return err
	}
	// The watcher's index (a plain index on a target is a user's right).
	if err := execAll(ctx, pool, `CREATE INDEX j2_t_a_ver ON j2_t (a_id, ver)`, `ANALYZE j2_t`); err != nil {
		return err
	}
	jc.factsNext = facts
	fmt.Fprintf(os.Stderr, "J2: %d dimension rows × %d facts; %g dimension updates/s (2 conns) beside %g fact writes/s (4 conns, UPDATE/INSERT alternating); %s per rep, grace %s, %d reps; engine defaults; watcher every 5 ms\n",
		jc.dims, jc.perDim, jc.dimRate, jc.factRate, jc.window, jc.grace, b.cfg.Reps)
	resetStatements(ctx, pool)
	gp50 := Goal{What: "p50", AtMost: true, Bound: 100, Unit: "ms"}
	gp99 := Goal{What: "p99", AtMost: true, Bound: 500, Unit: "ms"}
	t := &table{header: []string{"J2 rep", "dim upd/s", "fact writes/s", "p50 ms", "p99 ms", "max ms", "never visible", "converge after watch s", "oracle"}}
	var p50s, p99s []float64
	for rep := range b.cfg.Reps {
		r, err := j2Cell(ctx, e, pool, &jc)
		if err != nil {
			return fmt.Errorf("J2 rep %d: %w", rep, err)
		}
		if r.oracleErr != nil {
			b.failf("join-latency rep %d oracle: %v", rep, r.oracleErr)
		}
		s := summarizeLatencies(r.lat)
		p50s, p99s = append(p50s, s.P50), append(p99s, s.P99)
		b.out.emit(map[string]any{"scenario": "join-latency", "variant": "dimension update", "shape": fmt.Sprintf("%d facts per row", jc.perDim), "rep": rep,
			"dim_updates_per_sec": r.dimRate, "fact_writes_per_sec": r.factRate, "observations": s.N, "missing": s.Missing,
			"visible_p50_ms": s.P50, "visible_p99_ms": s.P99, "visible_max_ms": s.Max, "visible_mean_ms": s.Mean,
			"drain_after_window_seconds": r.drainAfter, "oracle_ok": r.oracleErr == nil, "error": errString(r.oracleErr)})
		t.add(fmt.Sprint(rep), fmtNum(r.dimRate, 0), fmtNum(r.factRate, 0), fmtNum(s.P50, 0), fmtNum(s.P99, 0), fmtNum(s.Max, 0),
			fmt.Sprint(s.Missing), fmtNum(r.drainAfter, 1), okString(r.oracleErr))
		pause(ctx, b.cellWait())
	}
	m50, m99 := median(p50s), median(p99s)
	met50, met99 := latencyMet(gp50, m50), latencyMet(gp99, m99)
	b.out.emit(map[string]any{"scenario": "join-latency", "variant": "dimension update", "summary": true,
		"visible_p50_ms": m50, "visible_p99_ms": m99, "goal": gp50.String() + ", " + gp99.String(), "goal_met": and(met50, met99)})
	t.add("median", "", "", fmtNum(m50, 0)+" ("+verdict(met50)+")", fmtNum(m99, 0)+" ("+verdict(met99)+")", "", "", "", gp50.String()+", "+gp99.String())
	b.printTable(t)
	topStatements(ctx, pool, "J2", 12)
	return nil
}

type j2Update struct {
	d        int32
	v        int64
	commitAt int64 // unix nanos
	seenAt   int64
}

// j2Cell runs one window and its oracle.
func j2Cell(ctx context.Context, e *runningEngine, pool *pgxpool.Pool, jc *j2Config) (j2Result, error) {
	var r j2Result
	var mu sync.Mutex
	var ups []*j2Update
	start := time.Now().Add(50 * time.Millisecond)
	end := start.Add(jc.window)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	var wg sync.WaitGroup
	var werr atomic.Value
	var dimN, factN atomic.Int64
	verBase, factsBase := jc.verBase, jc.factsNext
	paced := func(conns int, rate float64, next *atomic.Int64, do func(ctx context.Context, k int64, c *pgxpool.Conn) error) {
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn, err := pool.Acquire(wctx)
				if err != nil {
					werr.Store(err)
					return
				}
				defer conn.Release()
				for {
					k := next.Add(1)
					due := start.Add(time.Duration(float64(k-1) / rate * float64(time.Second)))
					if due.After(end) {
						return
					}
					if d := time.Until(due); d > 0 {
						select {
						case <-time.After(d):
						case <-wctx.Done():
						}
					}
					if wctx.Err() != nil {
						return
					}
					if err := do(context.Background(), k, conn); err != nil {
						werr.Store(err)
						return
					}
				}
			}()
		}
	}
	var dimK, factK atomic.Int64
	paced(2, jc.dimRate, &dimK, func(ctx context.Context, k int64, c *pgxpool.Conn) error {
		d, v := int32(1+(verBase+k-1)%int64(jc.dims)), verBase+k
		if _, err := c.Exec(ctx, `UPDATE j2_dim SET ver = $2 WHERE id = $1`, d, v); err != nil {
			return err
		}
		u := &j2Update{d: d, v: v, commitAt: time.Now().UnixNano()}
		mu.Lock()
		ups = append(ups, u)
		mu.Unlock()
		dimN.Add(1)
		return nil
	})
	paced(4, jc.factRate, &factK, func(ctx context.Context, k int64, c *pgxpool.Conn) error {
		rng := rand.New(rand.NewPCG(uint64(k), 7))
		var err error
		if k%2 == 0 {
			_, err = c.Exec(ctx, `UPDATE j2_facts SET amount = amount + 1 WHERE id = $1`, 1+rng.Int64N(factsBase))
		} else {
			_, err = c.Exec(ctx, `INSERT INTO j2_facts (id, a_id, amount) VALUES ($1, $2, 0)`, factsBase+k, 1+rng.IntN(jc.dims))
		}
		if err == nil {
			factN.Add(1)
		}
		return err
	})
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()

	wconn, err := pool.Acquire(ctx)
	if err != nil {
		return r, err
	}
	defer wconn.Release()
	var grace time.Time
	seenUpTo := 0 // every update before this index has been seen
	for {
		mu.Lock()
		var idx []int
		var ds []int32
		var vs []int64
		for i := seenUpTo; i < len(ups); i++ {
			if ups[i].seenAt == 0 {
				idx, ds, vs = append(idx, i), append(ds, ups[i].d), append(vs, ups[i].v)
			}
		}
		mu.Unlock()
		if len(idx) > 0 {
			rows, err := wconn.Query(ctx, `SELECT p.i FROM unnest($1::int[], $2::bigint[], $3::int[]) AS p(d, v, i)
				WHERE NOT EXISTS (SELECT 1 FROM j2_t t WHERE t.a_id = p.d AND t.ver < p.v)`, ds, vs, idx)
			if err != nil {
				return r, fmt.Errorf("watcher: %w", err)
			}
			now := time.Now().UnixNano()
			var seen []int
			for rows.Next() {
				var i int
				if err := rows.Scan(&i); err != nil {
					return r, err
				}
				seen = append(seen, i)
			}
			if err := rows.Err(); err != nil {
				return r, fmt.Errorf("watcher: %w", err)
			}
			mu.Lock()
			for _, i := range seen {
				ups[i].seenAt = now
			}
			for seenUpTo < len(ups) && ups[seenUpTo].seenAt != 0 {
				seenUpTo++
			}
			mu.Unlock()
		}
		if grace.IsZero() {
			select {
			case <-writersDone:
				grace = time.Now().Add(jc.grace)
			default:
			}
		}
		if !grace.IsZero() {
			mu.Lock()
			all := seenUpTo == len(ups)
			mu.Unlock()
			if all || time.Now().After(grace) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	windowEnd := time.Now()
	if v := werr.Load(); v != nil {
		return r, fmt.Errorf("writer: %v", v)
	}
	elapsed := min(jc.window, time.Since(start)).Seconds()
	r.dimUpdates, r.factOps = dimN.Load(), factN.Load()
	r.dimRate, r.factRate = float64(r.dimUpdates)/elapsed, float64(r.factOps)/elapsed
	for _, u := range ups {
		if u.seenAt == 0 {
			r.lat = append(r.lat, math.Inf(1))
			continue
		}
		r.lat = append(r.lat, max(0, float64(u.seenAt-u.commitAt)/1e6))
	}
	jc.verBase += dimK.Load()
	jc.factsNext += factK.Load()
	if err := e.converge(ctx, 15*time.Minute); err != nil {
		if errors.Is(err, context.Canceled) {
			return r, err
		}
		r.oracleErr = err
		return r, nil
	}
	r.drainAfter = time.Since(windowEnd).Seconds()
	r.oracleErr = checkSame(ctx, pool, "SELECT id, a_id, amount, ver FROM j2_t",
		"SELECT f.id, f.a_id, f.amount, d.ver FROM j2_facts f LEFT JOIN j2_dim d ON d.id = f.a_id")
	return r, nil
}
