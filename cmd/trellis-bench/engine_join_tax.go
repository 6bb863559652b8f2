package main

// J3 join-write-tax (joins spec §7): what capturing a JOIN target's tables
// costs the writers of the dimension (single-row UPDATE) and of the fact
// table (single-row and 1000-row statements), B2's method (engine_writetax.go)
// on two identical star pairs in one database: jt_facts_none/jt_dim_none
// with no transform, jt_facts_cap/jt_dim_cap read by a 1-1 JOIN target, so
// both tables carry the capture triggers (the fact table's log rows also
// carry the old and new join values when a_id changes). Both pairs have the
// index on facts(a_id) the JOIN target requires, so the figure is capture's
// alone. The engine is stopped once the target is live: nothing drains
// while writers are timed. Per shape and repetition: none, trigger, none
// on one connection, direct to Postgres; the ratio is trigger over the mean
// of the bracketing controls. Afterwards the engine drains the backlog
// (dimension writes fan out) and the target is compared with its join.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

const jtDims = 10_000 // 10 facts per dimension row at the default preload

// joinTaxShapes: sfx is "none" or "cap", naming the pair of tables.
var joinTaxShapes = []writeShape{
	{Name: "dim update 1 row", Rows: 1, Goal: 0.6, stmt: func(sfx string, _ *int64, _ int64, rng *rand.Rand) (string, []any) {
		return "UPDATE jt_dim_" + sfx + " SET ver = ver + 1 WHERE id = $1", []any{1 + rng.Int64N(jtDims)}
	}},
	{Name: "fact update 1 row", Rows: 1, Goal: 0.6, stmt: func(sfx string, _ *int64, preload int64, rng *rand.Rand) (string, []any) {
		return "UPDATE jt_facts_" + sfx + " SET amount = amount + 1 WHERE id = $1", []any{1 + rng.Int64N(preload)}
	}},
	{Name: "fact re-point 1 row", Rows: 1, Goal: 0.6, stmt: func(sfx string, _ *int64, preload int64, rng *rand.Rand) (string, []any) {
		return "UPDATE jt_facts_" + sfx + " SET a_id = $2 WHERE id = $1", []any{1 + rng.Int64N(preload), 1 + rng.Int64N(jtDims)}
	}},
	{Name: "fact insert 1 row", Rows: 1, Goal: 0.6, stmt: func(sfx string, next *int64, _ int64, rng *rand.Rand) (string, []any) {
		*next++
		return "INSERT INTO jt_facts_" + sfx + " (id, a_id, amount) VALUES ($1, $2, $3)", []any{*next, 1 + rng.Int64N(jtDims), *next % 1000}
	}},
	{Name: "fact insert 1000 rows", Rows: 1000, Goal: 0.5, stmt: func(sfx string, next *int64, _ int64, _ *rand.Rand) (string, []any) {
		lo := *next + 1
		*next += 1000
		return "INSERT INTO jt_facts_" + sfx + fmt.Sprintf(" (id, a_id, amount) SELECT g, 1 + g %% %d, g %% 1000 FROM generate_series($1::bigint, $2::bigint) g", jtDims), []any{lo, *next}
	}},
	{Name: "fact update 1000 rows", Rows: 1000, Goal: 0.5, stmt: func(sfx string, _ *int64, preload int64, rng *rand.Rand) (string, []any) {
		lo := 1 + rng.Int64N(preload-1000)
		return "UPDATE jt_facts_" + sfx + " SET amount = amount + 1 WHERE id BETWEEN $1 AND $1 + 999", []any{lo}
	}},
}

const jtStmt = `TRANSFORM jt_target FROM jt_facts_cap f LEFT JOIN jt_dim_cap d ON d.id = f.a_id SELECT f.amount AS amount, d.ver AS ver, d.name AS d_name`

func runJoinWriteTax(ctx context.Context, b *bench) error {
	pool, stop, err := labDB(ctx, b, "join-write-tax", 8)
	if err != nil {
		return err
	}
	defer stop()
	preload := int64(envInt("TRELLIS_BENCH_J3_FACTS", 100_000))
	if b.cfg.Quick {
		preload = 20_000
	}
	for _, sfx := range []string{"none", "cap"} {
		if err := execAll(ctx, pool,
			fmt.Sprintf(`CREATE TABLE jt_dim_%s (id int PRIMARY KEY, name text, ver bigint NOT NULL)`, sfx),
			fmt.Sprintf(`INSERT INTO jt_dim_%s SELECT g, 'd' || g, 0 FROM generate_series(1, %d) g`, sfx, jtDims),
			fmt.Sprintf(`CREATE TABLE jt_facts_%s (id bigint PRIMARY KEY, a_id int, amount int)`, sfx),
			fmt.Sprintf(`INSERT INTO jt_facts_%s SELECT g, 1 + g %% %d, g %% 1000 FROM generate_series(1, %d) g`, sfx, jtDims, preload),
			fmt.Sprintf(`CREATE INDEX ON jt_facts_%s (a_id)`, sfx),
			fmt.Sprintf(`VACUUM ANALYZE jt_dim_%[1]s, jt_facts_%[1]s`, sfx),
		); err != nil {
			return err
		}
	}
	e, err := startEngine(ctx, pool, engine.Config{})
	if err != nil {
		return err
	}
	if err := defineJoin(ctx, e, pool, "jt_target", jtStmt, 5*time.Minute); err != nil {
		e.stop()
		return err
	}
	if err := e.stop(); err != nil {
		return fmt.Errorf("engine stop: %w", err)
	}

	dur := min(b.cfg.Duration, time.Duration(envInt("TRELLIS_BENCH_J3_SECONDS", 2))*time.Second)
	if b.cfg.Quick {
		dur = time.Second
	}
	fmt.Fprintf(os.Stderr, "J3: %d shapes × %d reps × (none, trigger, none) × %s on 1 connection, direct; %d facts and %d dimension rows per pair; the engine is stopped during the cells\n",
		len(joinTaxShapes), b.cfg.Reps, dur, preload, jtDims)
	ts := taxSetup{scenario: "join-write-tax", shapes: joinTaxShapes, table: map[string]string{"none": "none", "trigger": "cap"}}
	next := map[string]*int64{"none": new(int64), "cap": new(int64)}
	*next["none"], *next["cap"] = preload, preload
	rng := rand.New(rand.NewPCG(3, 4))
	tc, err := writeTaxCells(ctx, b, ts, pool, "direct", dur, preload, next, rng)
	if err != nil {
		return err
	}

	fmt.Fprintln(os.Stderr, "J3: draining the captured writes for the oracle")
	start := time.Now()
	e, err = startEngine(ctx, pool, engine.Config{})
	if err != nil {
		return err
	}
	oracleErr := e.converge(ctx, 15*time.Minute)
	if oracleErr == nil {
		oracleErr = checkSame(ctx, pool, "SELECT id, amount, ver, d_name FROM jt_target",
			"SELECT f.id, f.amount, d.ver, d.name FROM jt_facts_cap f LEFT JOIN jt_dim_cap d ON d.id = f.a_id")
	}
	if err := e.stop(); err != nil && oracleErr == nil {
		oracleErr = err
	}
	drain := time.Since(start).Seconds()
	b.out.emit(map[string]any{"scenario": "join-write-tax", "variant": "trigger", "shape": "oracle", "oracle_ok": oracleErr == nil,
		"drain_seconds": drain, "error": errString(oracleErr)})
	if oracleErr != nil {
		b.failf("join-write-tax oracle: %v", oracleErr)
	}

	t := &table{header: []string{"J3 shape", "none stmt/s", "trigger stmt/s", "trigger/none (median)", "per-rep ratios", "max drift",
		"backend CPU share (median)", "extra WAL B/row", "goal", "verdict"}}
	for si, sh := range joinTaxShapes {
		m := median(tc.ratios[si])
		g := Goal{What: "trigger/none", Bound: sh.Goal}
		cs := median(tc.cpuShare[si])
		t.add(sh.Name, fmtNum(median(tc.ctl[si]), 0), fmtNum(median(tc.capv[si]), 0), fmtRatio(m), fmtList(tc.ratios[si], 2),
			fmtPct(maxAbs(tc.drifts[si])), fmtRatio(cs), fmtNum(median(tc.extraWAL[si]), 0), g.String(), verdict(g.Met(m)))
		b.out.emit(map[string]any{"scenario": "join-write-tax", "path": "direct", "variant": "trigger", "shape": sh.Name, "summary": true,
			"share_of_control": m, "cpu_share_of_control": cs, "extra_wal_bytes_per_row": median(tc.extraWAL[si]),
			"goal": g.String(), "goal_met": g.Met(m), "oracle_ok": oracleErr == nil})
	}
	b.printTable(t)
	fmt.Fprintf(os.Stderr, "oracle (jt_target = its join after draining, %.1f s): %v\n", drain, okString(oracleErr))
	return nil
}
