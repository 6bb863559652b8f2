package main

// B8 backfill: Define → live of a 1-1 target and of a 100,000-group SUM/COUNT
// target over posts(id, author, word_count, byte_size), against the plain-SQL
// floor of the same query (CREATE TABLE AS SELECT plus the key index). One
// database, engine with default settings. Per repetition: both floors, the
// two builds in an order rotated per repetition, both floors again; the ratio
// is build / mean of the bracketing floors. Each built target is compared
// with its definition, then dropped.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

type buildKind struct {
	Name  string
	Floor string // CTAS + index of the same query; %s is the table name
	Spec  func(target string) engine.Spec
	Got   func(target string) string
	Want  string
}

var buildKinds = []buildKind{
	{
		Name:  "1-1",
		Floor: `CREATE TABLE %[1]s AS SELECT id, author, word_count + byte_size AS total_size FROM posts; ALTER TABLE %[1]s ADD PRIMARY KEY (id)`,
		Spec: func(t string) engine.Spec {
			return oneToOne(t, "posts", engine.Field{Name: "author", Expr: col("author")},
				engine.Field{Name: "total_size", Expr: col("word_count") + " + " + col("byte_size")})
		},
		Got:  func(t string) string { return "SELECT id, author, total_size FROM " + t },
		Want: "SELECT id, author, word_count + byte_size FROM posts",
	},
	{
		Name:  "100k groups",
		Floor: `CREATE TABLE %[1]s AS SELECT author, sum(word_count) AS s, count(*) AS n FROM posts GROUP BY author; CREATE UNIQUE INDEX ON %[1]s (author)`,
		Spec:  func(t string) engine.Spec { return sumCount(t, "posts", "author", "word_count") },
		Got:   func(t string) string { return "SELECT author, s, n FROM " + t },
		Want:  "SELECT author, sum(word_count), count(*) FROM posts GROUP BY author",
	},
}

func runBackfill(ctx context.Context, b *bench) error {
	def := 200_000
	switch {
	case b.cfg.Quick:
		def = 20_000
	case b.cfg.Profile == "full":
		def = 1_000_000
	}
	rows := envInt("TRELLIS_BENCH_B8_ROWS", def)
	pool, stop, err := labDB(ctx, b, "backfill", 8)
	if err != nil {
		return err
	}
	defer stop()
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE posts (id bigint PRIMARY KEY, author int, word_count int, byte_size int);
		INSERT INTO posts SELECT g, g %% 100000, g %% 1000, g %% 7919 FROM generate_series(1, %d) g`, rows)); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE posts"); err != nil {
		return err
	}
	e, err := startEngine(ctx, pool, engine.Config{})
	if err != nil {
		return err
	}
	defer e.stop()
	fmt.Fprintf(os.Stderr, "B8: %d source rows, %d reps × (floors, builds rotated, floors); engine defaults (2 drain workers, chunks of 5000 keys, staging every 500ms)\n", rows, b.cfg.Reps)

	ratios := make([][]float64, len(buildKinds))
	drifts := make([][]float64, len(buildKinds))
	floors := make([][]float64, len(buildKinds))
	builds := make([][]float64, len(buildKinds))
	var names []string
	for _, k := range buildKinds {
		names = append(names, k.Name)
	}
	for rep := range b.cfg.Reps {
		head, err := timeFloors(ctx, pool, "b8", buildKinds, func(k buildKind) (string, string) { return k.Name, k.Floor }, rep, "h")
		if err != nil {
			return err
		}
		pause(ctx, b.cellWait())
		secs := map[string]float64{}
		order := schedule(rep, "", names)
		for _, name := range order[1 : len(order)-1] {
			ki := slices.IndexFunc(buildKinds, func(k buildKind) bool { return k.Name == name })
			k := buildKinds[ki]
			target := fmt.Sprintf("b8_%d_r%d", ki, rep)
			start := time.Now()
			if err := define(ctx, e, pool, k.Spec(target), 15*time.Minute); err != nil {
				return err
			}
			secs[name] = time.Since(start).Seconds()
			oerr := checkSame(ctx, pool, k.Got(target), k.Want)
			if oerr != nil {
				b.failf("backfill %s rep %d: %v", name, rep, oerr)
			}
			b.out.emit(map[string]any{"scenario": "backfill", "variant": "build", "shape": name, "rep": rep, "rows": rows,
				"define_to_live_seconds": secs[name], "rows_per_sec": float64(rows) / secs[name], "oracle_ok": oerr == nil, "error": errString(oerr)})
			if err := e.Pause(ctx, pool, engine.TableName{Name: target}); err != nil {
				return fmt.Errorf("pause %s: %w", target, err)
			}
			if err := e.Drop(ctx, pool, engine.TableName{Name: target}); err != nil {
				return fmt.Errorf("drop %s: %w", target, err)
			}
			pause(ctx, b.cellWait())
		}
		tail, err := timeFloors(ctx, pool, "b8", buildKinds, func(k buildKind) (string, string) { return k.Name, k.Floor }, rep, "t")
		if err != nil {
			return err
		}
		for ki, k := range buildKinds {
			c := control(head[ki], tail[ki])
			rt := ratio(secs[k.Name], c)
			ratios[ki] = append(ratios[ki], rt)
			drifts[ki] = append(drifts[ki], drift(head[ki], tail[ki]))
			floors[ki] = append(floors[ki], c)
			builds[ki] = append(builds[ki], secs[k.Name])
			g := Goal{What: "build/floor", AtMost: true, Bound: 3}
			b.out.emit(map[string]any{"scenario": "backfill", "variant": "build", "shape": k.Name, "rep": rep,
				"floor_seconds": c, "build_over_floor": rt, "drift": drifts[ki][len(drifts[ki])-1], "goal": g.String(), "goal_met": g.Met(rt)})
		}
		pause(ctx, b.cellWait())
	}
	t := &table{header: []string{"B8 build", "rows", "floor s (CTAS+index)", "build s (define→live)", "build/floor (median)", "per-rep ratios", "max floor drift", "goal", "verdict"}}
	for ki, k := range buildKinds {
		m := median(ratios[ki])
		g := Goal{What: "build/floor", AtMost: true, Bound: 3}
		b.out.emit(map[string]any{"scenario": "backfill", "shape": k.Name, "summary": true, "rows": rows, "build_over_floor": m, "goal": g.String(), "goal_met": g.Met(m)})
		t.add(k.Name, fmt.Sprint(rows), fmtNum(median(floors[ki]), 2), fmtNum(median(builds[ki]), 2), fmtRatio(m), fmtList(ratios[ki], 1),
			fmtPct(maxAbs(drifts[ki])), g.String(), verdict(g.Met(m)))
	}
	b.printTable(t)
	return nil
}
