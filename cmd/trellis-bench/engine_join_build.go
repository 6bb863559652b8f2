package main

// J1 join-build (joins spec §7): the build of a 1-1 JOIN target over
// 1,000,000 facts joined by two LEFT joins (a star: facts → dim_a of 100,000
// rows, facts → dim_b of 1,000 rows), and of the same joins folded by
// `GROUP BY` a dimension column (b.name: 1,000 groups), against the
// plain-SQL floor: `CREATE TABLE AS` of the same join query plus the key
// index the target has (B8's floor). The build is timed from the commit of
// the TRANSFORM to AwaitLive; the define itself (a catalog write, no scan)
// is reported beside it. Per repetition: both floors, the two builds in an
// order rotated per repetition, both floors again; the ratio is build over
// the mean of the bracketing floors. Each built target is compared with its
// join query, then dropped.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

const j1Joins = `FROM j1_facts f LEFT JOIN j1_dim_a a ON a.id = f.a_id LEFT JOIN j1_dim_b b ON b.id = f.b_id`

type joinBuildKind struct {
	Name  string
	Stmt  string // the TRANSFORM; %s is the target
	Floor string // CTAS + index of the same join; %s is the table
	Got   string // read of the target; %s is the target
	Want  string
}

var joinBuildKinds = []joinBuildKind{
	{
		Name:  "1-1, 2 LEFT joins",
		Stmt:  `TRANSFORM %s ` + j1Joins + ` SELECT f.amount AS amount, a.name AS a_name, b.name AS b_name`,
		Floor: `CREATE TABLE %[1]s AS SELECT f.id, f.amount, a.name AS a_name, b.name AS b_name ` + j1Joins + `; ALTER TABLE %[1]s ADD PRIMARY KEY (id)`,
		Got:   `SELECT id, amount, a_name, b_name FROM %s`,
		Want:  `SELECT f.id, f.amount, a.name, b.name ` + j1Joins,
	},
	{
		// Both joins are read (a.w), so neither side may drop the join to
		// dim_a as unused.
		Name:  "GROUP BY b.name (one group per dim_b row)",
		Stmt:  `TRANSFORM %s ` + j1Joins + ` GROUP BY b.name SELECT SUM(f.amount) AS s, SUM(a.w) AS sw, COUNT(*) AS n`,
		Floor: `CREATE TABLE %[1]s AS SELECT b.name, sum(f.amount) AS s, sum(a.w) AS sw, count(*) AS n ` + j1Joins + ` GROUP BY b.name; CREATE UNIQUE INDEX ON %[1]s (name) NULLS NOT DISTINCT`,
		Got:   `SELECT name, s, sw, n FROM %s`,
		Want:  `SELECT b.name, sum(f.amount), sum(a.w), count(*) ` + j1Joins + ` GROUP BY b.name`,
	},
}

// j1Schema fills the star: facts point at dim_a (1 in 97 NULL, 1 in 89
// dangling) and dim_b (1 in 101 NULL), so the LEFT joins have NULLs to give.
func j1Schema(facts, dimA, dimB int) []string {
	return []string{
		`CREATE TABLE j1_dim_a (id int PRIMARY KEY, name text, w int)`,
		`CREATE TABLE j1_dim_b (id int PRIMARY KEY, name text)`,
		`CREATE TABLE j1_facts (id bigint PRIMARY KEY, a_id int, b_id int, amount int)`,
		fmt.Sprintf(`INSERT INTO j1_dim_a SELECT g, 'a' || g, g %% 100 FROM generate_series(1, %d) g`, dimA),
		fmt.Sprintf(`INSERT INTO j1_dim_b SELECT g, 'b' || g FROM generate_series(1, %d) g`, dimB),
		fmt.Sprintf(`INSERT INTO j1_facts SELECT g,
			CASE WHEN g %% 97 = 0 THEN NULL WHEN g %% 89 = 0 THEN %d + 1 ELSE 1 + ((g::bigint * 7919) %% %d)::int END,
			CASE WHEN g %% 101 = 0 THEN NULL ELSE 1 + g %% %d END, g %% 1000
			FROM generate_series(1, %d) g`, dimA, dimA, dimB, facts),
		// The indexes fan-out needs (joins spec §5 item 5).
		`CREATE INDEX ON j1_facts (a_id)`,
		`CREATE INDEX ON j1_facts (b_id)`,
		`VACUUM ANALYZE j1_dim_a, j1_dim_b, j1_facts`,
	}
}

func runJoinBuild(ctx context.Context, b *bench) error {
	facts, dimA, dimB := envInt("TRELLIS_BENCH_J1_FACTS", 1_000_000), 100_000, 1_000
	if b.cfg.Quick {
		facts, dimA, dimB = envInt("TRELLIS_BENCH_J1_FACTS", 50_000), 5_000, 100
	}
	pool, stop, err := labDB(ctx, b, "join-build", 8)
	if err != nil {
		return err
	}
	defer stop()
	if err := execAll(ctx, pool, j1Schema(facts, dimA, dimB)...); err != nil {
		return err
	}
	e, err := startEngine(ctx, pool, engine.Config{})
	if err != nil {
		return err
	}
	defer e.stop()
	fmt.Fprintf(os.Stderr, "J1: %d facts, dim_a %d rows, dim_b %d rows (star, two LEFT joins); %d reps × (floors, builds rotated, floors); engine defaults; build = TRANSFORM commit → AwaitLive\n",
		facts, dimA, dimB, b.cfg.Reps)

	n := len(joinBuildKinds)
	ratios, drifts, floors, builds, defines := make([][]float64, n), make([][]float64, n), make([][]float64, n), make([][]float64, n), make([][]float64, n)
	var names []string
	for _, k := range joinBuildKinds {
		names = append(names, k.Name)
	}
	g := Goal{What: "build/floor", AtMost: true, Bound: 2}
	resetStatements(ctx, pool)
	for rep := range b.cfg.Reps {
		head, err := timeFloors(ctx, pool, "j1", joinBuildKinds, func(k joinBuildKind) (string, string) { return k.Name, k.Floor }, rep, "h")
		if err != nil {
			return err
		}
		pause(ctx, b.cellWait())
		secs, defs := map[string]float64{}, map[string]float64{}
		order := schedule(rep, "", names)
		for _, name := range order[1 : len(order)-1] {
			ki := slices.IndexFunc(joinBuildKinds, func(k joinBuildKind) bool { return k.Name == name })
			k := joinBuildKinds[ki]
			target := fmt.Sprintf("j1_t%d_r%d", ki, rep)
			start := time.Now()
			committed, err := applyTransform(ctx, e, pool, fmt.Sprintf(k.Stmt, target))
			if err != nil {
				return err
			}
			if err := e.AwaitLive(ctx, tableName(target), 15*time.Minute); err != nil {
				return fmt.Errorf("await live %s: %w", target, err)
			}
			secs[name] = time.Since(committed).Seconds()
			defs[name] = committed.Sub(start).Seconds()
			oerr := checkSame(ctx, pool, fmt.Sprintf(k.Got, target), k.Want)
			if oerr != nil {
				b.failf("join-build %s rep %d: %v", name, rep, oerr)
			}
			b.out.emit(map[string]any{"scenario": "join-build", "variant": "build", "shape": name, "rep": rep, "facts": facts,
				"commit_to_live_seconds": secs[name], "define_seconds": defs[name], "rows_per_sec": float64(facts) / secs[name],
				"oracle_ok": oerr == nil, "error": errString(oerr)})
			if err := dropTarget(ctx, e, pool, target); err != nil {
				return err
			}
			pause(ctx, b.cellWait())
		}
		tail, err := timeFloors(ctx, pool, "j1", joinBuildKinds, func(k joinBuildKind) (string, string) { return k.Name, k.Floor }, rep, "t")
		if err != nil {
			return err
		}
		for ki, k := range joinBuildKinds {
			c := control(head[ki], tail[ki])
			rt := ratio(secs[k.Name], c)
			ratios[ki] = append(ratios[ki], rt)
			drifts[ki] = append(drifts[ki], drift(head[ki], tail[ki]))
			floors[ki] = append(floors[ki], c)
			builds[ki] = append(builds[ki], secs[k.Name])
			defines[ki] = append(defines[ki], defs[k.Name])
			b.out.emit(map[string]any{"scenario": "join-build", "variant": "build", "shape": k.Name, "rep": rep,
				"floor_seconds": c, "build_over_floor": rt, "drift": drifts[ki][len(drifts[ki])-1], "goal": g.String(), "goal_met": g.Met(rt)})
		}
		pause(ctx, b.cellWait())
	}
	t := &table{header: []string{"J1 build", "facts", "floor s (CTAS+index)", "build s (commit→live)", "define s", "build/floor (median)", "per-rep ratios", "max floor drift", "goal", "verdict"}}
	for ki, k := range joinBuildKinds {
		m := median(ratios[ki])
		b.out.emit(map[string]any{"scenario": "join-build", "shape": k.Name, "summary": true, "facts": facts, "build_over_floor": m,
			"floor_seconds": median(floors[ki]), "build_seconds": median(builds[ki]), "goal": g.String(), "goal_met": g.Met(m)})
		t.add(k.Name, fmt.Sprint(facts), fmtNum(median(floors[ki]), 2), fmtNum(median(builds[ki]), 2), fmtNum(median(defines[ki]), 3),
			fmtRatio(m), fmtList(ratios[ki], 2), fmtPct(maxAbs(drifts[ki])), g.String(), verdict(g.Met(m)))
	}
	b.printTable(t)
	topStatements(ctx, pool, "J1", 15)
	return nil
}
