package engine

// The differential test (correctness spec): random tables, definitions and
// concurrent DML, with faults; after convergence every target must equal
// Postgres's own recompute of its definition. The oracle is rendered here
// from bare column names, independently of the engine's compiler.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// pinnedSeeds are seeds that once failed; they run on every fast lane.
// Seeds that once diverged. 1795960113908280630 and 1795960468835950693: writers
// committed on a cancelled context (a COMMIT landing after the token; fixed in the
// test) and, like 1795962439957931085, a definition made on an autocommit handle was
// seen by the stager before its reads and built without capture (fixed in Define).
var pinnedSeeds = []uint64{1795960113908280630, 1795960468835950693, 1795962439957931085}

// pinnedLifecycleSeeds once failed with lifecycle operations interleaved;
// they run with them. 1796118380445470786: ALTER TRANSFORM ... ALTER f AS e
// alone sent a bare ALTER TABLE (42601; fixed in alter.go).
// 1796118899947463274: a paused 1-1 reader of an aggregate target kept rows
// of groups that vanished (the rebuild's sweep skipped nullable keys).
// 1796126038432999025: an aggregate field's refresh after RESUME t.col
// starved updating the definition row behind pages (fixed in build.go).
var pinnedLifecycleSeeds = []uint64{1796118380445470786, 1796118899947463274, 1796126038432999025}

type dField struct {
	name, expr string // expr uses {col} placeholders
	agg        AggKind
	cast       string
}

type dDef struct {
	name     string
	src      string // table or upstream definition name
	srcSQL   string // oracle relation of a base table (a chain nests its upstream's oracle)
	key      []string
	group    []dField
	fields   []dField
	upstream *dDef
}

func fill(expr string, engine bool) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(expr, '{')
		if i < 0 {
			b.WriteString(expr)
			return b.String()
		}
		j := strings.IndexByte(expr[i:], '}') + i
		b.WriteString(expr[:i])
		c := expr[i+1 : j]
		if engine {
			b.WriteString(SourceColumn(c))
		} else {
			b.WriteString(base.Ident(c))
		}
		expr = expr[j+1:]
	}
}

func (d *dDef) spec() Spec {
	s := Spec{Target: TableName{Name: d.name}, Source: TableName{Name: d.src}, Statement: "-- differential " + d.name}
	for _, g := range d.group {
		s.GroupBy = append(s.GroupBy, GroupKey{Name: g.name, Expr: fill(g.expr, true)})
	}
	for _, f := range d.fields {
		s.Fields = append(s.Fields, Field{Name: f.name, Expr: fill(f.expr, true), Agg: f.agg, Cast: f.cast})
	}
	return s
}

// sourceSQL is the oracle's relation: the base table, or the upstream's
// oracle as it reads now (an ALTER TRANSFORM may have changed it).
func (d *dDef) sourceSQL() string {
	if d.upstream != nil {
		return "(" + d.upstream.oracle() + ")"
	}
	return d.srcSQL
}

// oracle renders the definition's from-scratch result.
func (d *dDef) oracle() string {
	var cols []string
	if len(d.group) == 0 {
		for _, k := range d.key {
			cols = append(cols, base.Ident(k))
		}
		for _, f := range d.fields {
			cols = append(cols, "("+fill(f.expr, false)+") AS "+base.Ident(f.name))
		}
		return "SELECT " + strings.Join(cols, ", ") + " FROM " + d.sourceSQL() + " x"
	}
	var gs []string
	for _, g := range d.group {
		cols = append(cols, "("+fill(g.expr, false)+") AS "+base.Ident(g.name))
		gs = append(gs, "("+fill(g.expr, false)+")")
	}
	for _, f := range d.fields {
		var a string
		switch f.agg {
		case AggCountStar:
			a = "count(*)"
		case AggJSONBAgg:
			var ks []string
			for _, k := range d.key {
				ks = append(ks, base.Ident(k))
			}
			a = "jsonb_agg((" + fill(f.expr, false) + ") ORDER BY " + strings.Join(ks, ", ") + ")"
		default:
			a = oracleAgg[f.agg] + "((" + fill(f.expr, false) + "))"
		}
		if f.cast != "" {
			a = "(" + a + ")::" + f.cast
		}
		cols = append(cols, a+" AS "+base.Ident(f.name))
	}
	return "SELECT " + strings.Join(cols, ", ") + " FROM " + d.sourceSQL() + " x GROUP BY " + strings.Join(gs, ", ")
}

func (d *dDef) targetSQL() string {
	var cols []string
	if len(d.group) == 0 {
		for _, k := range d.key {
			cols = append(cols, base.Ident(k))
		}
	}
	for _, g := range d.group {
		cols = append(cols, base.Ident(g.name))
	}
	for _, f := range d.fields {
		cols = append(cols, base.Ident(f.name))
	}
	return "SELECT " + strings.Join(cols, ", ") + " FROM " + base.Ident(d.name)
}

// outCols are the columns a reader of this definition's target can use.
func (d *dDef) outCols() (keys []string, vals []dField) {
	if len(d.group) == 0 {
		return d.key, d.fields
	}
	for _, g := range d.group {
		keys = append(keys, g.name)
	}
	return keys, d.fields
}

var scalarPool = []dField{
	{expr: "{i} * 2"}, {expr: "coalesce({g1}, 'none')"}, {expr: "{n} + 1"}, {expr: "{b}"}, {expr: "{j}"},
	{expr: "{g2} % 2 = 0"}, {expr: "{n}"}, {expr: "length({g1})"},
}

var aggPool = []dField{
	{agg: AggSum, expr: "{n}"}, {agg: AggSum, expr: "{i}"}, {agg: AggCountStar}, {agg: AggCount, expr: "{n}"},
	{agg: AggAvg, expr: "{i}"}, {agg: AggAvg, expr: "{n}"}, {agg: AggMin, expr: "{n}"}, {agg: AggMax, expr: "{g1}"},
	{agg: AggBoolAnd, expr: "{b}"}, {agg: AggBoolOr, expr: "{b}"}, {agg: AggJSONBAgg, expr: "{j}"},
	{agg: AggMax, expr: "{i}"}, {agg: AggBitOr, expr: "({i} & 7)::bit(3)", cast: "varbit"},
	{agg: AggBitAnd, expr: "({i} & 7)::bit(3)", cast: "varbit"}, {agg: AggSum, expr: "{i} * {n}"},
}

var groupPool = []dField{{expr: "{g1}"}, {expr: "{g2}"}, {expr: "{i} % 3"}, {expr: "{b}"}}

// grammarGroupPool: GROUP BY keys are column references (grammar §7.2).
var grammarGroupPool = []dField{{expr: "{g1}"}, {expr: "{g2}"}, {expr: "{b}"}}

// oracleAgg names each aggregate in the oracle and the TRANSFORM text,
// written here rather than taken from the engine.
var oracleAgg = map[AggKind]string{
	AggSum: "sum", AggCountStar: "count", AggCount: "count", AggAvg: "avg", AggMin: "min",
	AggMax: "max", AggBoolAnd: "bool_and", AggBoolOr: "bool_or", AggBitAnd: "bit_and",
	AggBitOr: "bit_or", AggJSONBAgg: "jsonb_agg",
}

// transformSQL renders the definition as the TRANSFORM statement a user
// would write (grammar mode only: keys are columns, casts implied).
func (d *dDef) transformSQL() string {
	var b strings.Builder
	b.WriteString("TRANSFORM " + base.Ident(d.name) + " FROM " + base.Ident(d.src))
	if len(d.group) > 0 {
		var gs []string
		for _, g := range d.group {
			gs = append(gs, base.Ident(strings.Trim(g.expr, "{}")))
		}
		b.WriteString(" GROUP BY " + strings.Join(gs, ", "))
	}
	var fs []string
	for _, f := range d.fields {
		switch {
		case f.agg == AggCountStar:
			fs = append(fs, "COUNT(*) AS "+base.Ident(f.name))
		case f.agg != AggNone:
			fs = append(fs, strings.ToUpper(oracleAgg[f.agg])+"(("+fill(f.expr, false)+")) AS "+base.Ident(f.name))
		default:
			fs = append(fs, "("+fill(f.expr, false)+") AS "+base.Ident(f.name))
		}
	}
	b.WriteString(" SELECT " + strings.Join(fs, ", "))
	return b.String()
}

func pick[T any](r *rand.Rand, pool []T, n int) []T {
	idx := r.Perm(len(pool))[:min(n, len(pool))]
	out := make([]T, len(idx))
	for i, j := range idx {
		out[i] = pool[j]
	}
	return out
}

type diffRun struct {
	t         *testing.T
	r         *rand.Rand
	pool      *pgxpool.Pool
	tables    []string
	keys      map[string][]string // table -> key columns
	defs      []*dDef
	minChains int
	logs      *syncBuffer
	commits   atomic.Int64
	faults    atomic.Int64
	life      *lifecycle // nil: no lifecycle operations
	// grammar: definitions are drawn from what a TRANSFORM statement can
	// say and defined through it (RESUME re-validates the stored text).
	grammar bool
}

// define installs one definition: through its TRANSFORM statement in
// grammar mode, else from its Spec.
func (dr *diffRun) define(set *engineSet, d *dDef) error {
	if dr.grammar {
		return dr.life.statement(d.transformSQL())
	}
	_, err := set.any().Define(context.Background(), dr.pool, d.spec())
	return err
}

func (dr *diffRun) genTables() {
	dr.keys = map[string][]string{}
	nt := 1 + dr.r.IntN(2)
	for i := range nt {
		name := fmt.Sprintf("t%d", i)
		var keyDDL string
		switch dr.r.IntN(3) {
		case 0:
			keyDDL, dr.keys[name] = "id int PRIMARY KEY", []string{"id"}
		case 1:
			keyDDL, dr.keys[name] = "id text PRIMARY KEY", []string{"id"}
		default:
			keyDDL, dr.keys[name] = "id int, k2 text, PRIMARY KEY (id, k2)", []string{"id", "k2"}
		}
		exec(dr.t, dr.pool, "CREATE TABLE "+name+" ("+keyDDL+", g1 text, g2 int, n numeric, i int, b bool, j jsonb)")
		dr.tables = append(dr.tables, name)
	}
}

func (dr *diffRun) genDefs() {
	n := 0
	newName := func() string { n++; return fmt.Sprintf("d%d", n) }
	for _, t := range dr.tables {
		for range 1 + dr.r.IntN(3) {
			d := &dDef{name: newName(), src: t, srcSQL: t, key: dr.keys[t]}
			if dr.r.IntN(2) == 0 {
				for i, f := range pick(dr.r, scalarPool, 1+dr.r.IntN(4)) {
					f.name = fmt.Sprintf("f%d", i)
					d.fields = append(d.fields, f)
				}
			} else if dr.grammar {
				for _, g := range pick(dr.r, grammarGroupPool, 1+dr.r.IntN(2)) {
					g.name = strings.Trim(g.expr, "{}") // a GROUP BY key's column is named by it
					d.group = append(d.group, g)
				}
				for i, f := range pick(dr.r, aggPool, 1+dr.r.IntN(6)) {
					f.name = fmt.Sprintf("a%d", i)
					d.fields = append(d.fields, f)
				}
			} else {
				for i, g := range pick(dr.r, groupPool, 1+dr.r.IntN(2)) {
					g.name = fmt.Sprintf("g%d", i)
					d.group = append(d.group, g)
				}
				for i, f := range pick(dr.r, aggPool, 1+dr.r.IntN(6)) {
					f.name = fmt.Sprintf("a%d", i)
					d.fields = append(d.fields, f)
				}
			}
			dr.defs = append(dr.defs, d)
		}
	}
	// Chains: a reader of an earlier target, sometimes two deep.
	for range max(dr.r.IntN(3), dr.minChains) {
		up := dr.defs[dr.r.IntN(len(dr.defs))]
		keys, vals := up.outCols()
		d := &dDef{name: newName(), src: up.name, key: keys, upstream: up}
		var numeric []string
		for _, v := range vals {
			if v.agg == AggSum || v.agg == AggCountStar || v.agg == AggCount || v.agg == AggMax && v.expr == "{i}" ||
				v.agg == AggNone && (v.expr == "{i} * 2" || v.expr == "{n}" || v.expr == "{n} + 1") {
				numeric = append(numeric, v.name)
			}
		}
		if dr.grammar && len(numeric) > 0 && dr.r.IntN(2) == 0 {
			// GROUP BY takes a column: the upstream's first key.
			c := numeric[dr.r.IntN(len(numeric))]
			d.group = []dField{{name: keys[0], expr: "{" + keys[0] + "}"}}
			d.fields = []dField{{name: "cnt_" + d.name, agg: AggCountStar}, {name: "s_" + d.name, agg: AggSum, expr: "{" + c + "}"},
				{name: "mx_" + d.name, agg: AggMax, expr: "{" + c + "}"}}
		} else if !dr.grammar && len(numeric) > 0 && dr.r.IntN(2) == 0 {
			c := numeric[dr.r.IntN(len(numeric))]
			d.group = []dField{{name: "big", expr: "{" + c + "} > 10"}}
			d.fields = []dField{{name: "cnt", agg: AggCountStar}, {name: "s", agg: AggSum, expr: "{" + c + "}"}, {name: "mx", agg: AggMax, expr: "{" + c + "}"}}
		} else {
			// In grammar mode a field may not take the name of a column of its
			// source with another formula (42702): name them after the reader.
			copyName, vName := "copy_"+keys[0], "v"
			if dr.grammar {
				copyName, vName = "copy_"+d.name, "v_"+d.name
			}
			d.fields = []dField{{name: copyName, expr: "{" + keys[0] + "}"}}
			if len(numeric) > 0 {
				d.fields = append(d.fields, dField{name: vName, expr: "{" + numeric[0] + "}"})
			}
		}
		dr.defs = append(dr.defs, d)
	}
}

var textKeys = []string{"a", "b", "", "sep\x1fx", "ctl\x01", "esc\x1b", "q'uote", "ünï", "sp ace", "z"}

func (dr *diffRun) keyVals(r *rand.Rand, table string) []any {
	id := r.IntN(120)
	switch {
	case len(dr.keys[table]) == 2:
		return []any{id % 40, textKeys[id%len(textKeys)]}
	case table != "" && dr.isTextKey(table):
		return []any{textKeys[id%len(textKeys)] + strconv.Itoa(id/len(textKeys))}
	default:
		return []any{id}
	}
}

func (dr *diffRun) isTextKey(table string) bool {
	var typ string
	dr.pool.QueryRow(context.Background(), `SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'id'`, table).Scan(&typ)
	return typ == "text"
}

func rowVals(r *rand.Rand) []any {
	g1s := []any{nil, "", "a", "b", "c\x1f", "ü"}
	var g2, n, i, b any
	if r.IntN(5) > 0 {
		g2 = r.IntN(5)
	}
	if r.IntN(5) > 0 {
		n = fmt.Sprintf("%d.%d", r.IntN(100)-50, r.IntN(2)*5) + []string{"", "0"}[r.IntN(2)]
	}
	if r.IntN(6) > 0 {
		i = r.IntN(101) - 50
	}
	if r.IntN(4) > 0 {
		b = r.IntN(2) == 0
	}
	return []any{g1s[r.IntN(len(g1s))], g2, n, i, b}
}

// writer runs random transactions until ctx ends.
//
// Statements run on a context that is never cancelled: a COMMIT cut off by a
// cancelled context may still land after the caller stopped waiting, and so
// after the token the test takes.
func (dr *diffRun) writer(stop context.Context, seed uint64, textKey map[string]bool) error {
	return dr.writeTxs(stop, rand.New(rand.NewPCG(seed, 7)), textKey, -1)
}

// writeTxs runs n random transactions (n < 0: until stop).
func (dr *diffRun) writeTxs(stop context.Context, r *rand.Rand, textKey map[string]bool, n int) error {
	ctx := context.Background()
	for ; stop.Err() == nil && n != 0; n-- {
		tx, err := dr.pool.Begin(ctx)
		if err != nil {
			return nil
		}
		nops := 1 + r.IntN(4)
		var werr error
		for op := 0; op < nops && werr == nil; op++ {
			t := dr.tables[r.IntN(len(dr.tables))]
			kcols := dr.keys[t]
			kv := func() []any {
				id := r.IntN(120)
				if len(kcols) == 2 {
					return []any{id % 40, textKeys[id%len(textKeys)]}
				}
				if textKey[t] {
					return []any{textKeys[id%len(textKeys)] + strconv.Itoa(id/len(textKeys))}
				}
				return []any{id}
			}
			keyPH := func(start int) string {
				var ps []string
				for i := range kcols {
					ps = append(ps, fmt.Sprintf("$%d", start+i))
				}
				return strings.Join(ps, ", ")
			}
			kc := strings.Join(kcols, ", ")
			switch x := r.IntN(100); {
			case x < 35: // multi-row upsert
				var vals []string
				var args []any
				seen := map[string]bool{}
				for range 1 + r.IntN(4) {
					k := kv()
					if seen[fmt.Sprint(k)] {
						continue
					}
					seen[fmt.Sprint(k)] = true
					row := append(k, rowVals(r)...)
					var ps []string
					for range row {
						args = append(args, nil)
						ps = append(ps, fmt.Sprintf("$%d", len(args)))
					}
					copy(args[len(args)-len(row):], row)
					ps[len(ps)-3] += "::numeric"
					vals = append(vals, "("+strings.Join(ps, ", ")+", jsonb_build_object('v', "+ps[len(ps)-2]+"::int))")
				}
				conflict := " ON CONFLICT (" + kc + ") DO UPDATE SET g1 = excluded.g1, n = excluded.n, i = t.i + 1, j = excluded.j"
				if r.IntN(3) == 0 {
					conflict = " ON CONFLICT DO NOTHING"
				}
				_, werr = tx.Exec(ctx, "INSERT INTO "+t+" AS t ("+kc+", g1, g2, n, i, b, j) VALUES "+strings.Join(vals, ", ")+conflict, args...)
			case x < 60:
				v := rowVals(r)
				_, werr = tx.Exec(ctx, "UPDATE "+t+" SET g1 = $1, g2 = $2, n = $3::numeric, b = $4 WHERE ("+kc+") >= ("+keyPH(5)+") AND random() < 0.3",
					append([]any{v[0], v[1], v[2], v[4]}, kv()...)...)
			case x < 70:
				_, werr = tx.Exec(ctx, "UPDATE "+t+" SET i = i + 1, n = n * 1.0 WHERE ("+kc+") = ("+keyPH(1)+")", kv()...)
			case x < 82:
				_, werr = tx.Exec(ctx, "DELETE FROM "+t+" WHERE ("+kc+") = ("+keyPH(1)+")", kv()...)
			case x < 90: // a savepoint rolled back
				if _, werr = tx.Exec(ctx, "SAVEPOINT sp"); werr == nil {
					if _, werr = tx.Exec(ctx, "DELETE FROM "+t+" WHERE random() < 0.2"); werr == nil {
						_, werr = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT sp")
					}
				}
			case x < 95: // a key change
				if len(kcols) == 1 && !textKey[t] {
					_, werr = tx.Exec(ctx, "UPDATE "+t+" SET id = id + 60 WHERE id = $1 AND id < 60 AND NOT EXISTS (SELECT 1 FROM "+t+" WHERE id = $1 + 60)", r.IntN(60))
				} else {
					_, werr = tx.Exec(ctx, "UPDATE "+t+" SET g2 = coalesce(g2, 0) + 1 WHERE random() < 0.05")
				}
			case x < 96 && r.IntN(4) == 0:
				_, werr = tx.Exec(ctx, "TRUNCATE "+t)
			default:
				_, werr = tx.Exec(ctx, "DELETE FROM "+t+" WHERE ("+kc+") <= ("+keyPH(1)+") AND random() < 0.1", kv()...)
			}
		}
		if werr != nil {
			tx.Rollback(context.Background())
			switch pgerr.CodeOf(werr) {
			case "40P01", "23505", "40001", "55P03":
				continue
			}
			if dr.life.writerMayFail(werr) {
				continue
			}
			return fmt.Errorf("writer: %w", werr)
		}
		if r.IntN(8) == 0 {
			tx.Rollback(ctx)
		} else if err := tx.Commit(ctx); err != nil {
			if c := pgerr.CodeOf(err); c == "40P01" || c == "40001" {
				continue
			}
			return fmt.Errorf("commit: %w", err)
		} else if err == nil {
			dr.commits.Add(1)
		}
	}
	return nil
}

type engineSet struct {
	mu      sync.Mutex
	t       *testing.T
	pool    *pgxpool.Pool
	cfg     Config
	plant   plants
	running []*runningEngine
}

type runningEngine struct {
	e      *Engine
	cancel context.CancelFunc
	done   chan error
}

func (s *engineSet) start() *Engine {
	e := New(s.pool, s.cfg)
	e.plant = s.plant
	if err := e.Migrate(context.Background()); err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	re := &runningEngine{e: e, cancel: cancel, done: make(chan error, 1)}
	go func() { re.done <- e.Run(ctx) }()
	s.mu.Lock()
	s.running = append(s.running, re)
	s.mu.Unlock()
	return e
}

func (s *engineSet) stopOldest() {
	s.mu.Lock()
	if len(s.running) == 0 {
		s.mu.Unlock()
		return
	}
	re := s.running[0]
	s.running = s.running[1:]
	s.mu.Unlock()
	re.cancel()
	if err := <-re.done; err != nil {
		s.t.Errorf("engine run: %v", err)
	}
	re.e.Close()
}

func (s *engineSet) any() *Engine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[len(s.running)-1].e
}

func (s *engineSet) stopAll() {
	for {
		s.mu.Lock()
		n := len(s.running)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		s.stopOldest()
	}
}

// runDifferential runs one seed and returns the divergences found.
//
// With life, a lifecycle operator interleaves PAUSE/RESUME, drop and
// redefine, request_backfill and column renames with the writers; every
// paused definition but a frozen one is resumed before the comparison.
func runDifferential(t *testing.T, seed uint64, faults, life bool, plant plants, writeFor time.Duration, minChains int) []string {
	r := rand.New(rand.NewPCG(seed, 1))
	pool := testDB(t)
	dr := &diffRun{t: t, r: r, pool: pool, minChains: minChains}
	if seed%2 == 0 {
		// H12: hostile session defaults for every client (the engine pins its own).
		exec(t, pool, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = serializable', current_database());
			EXECUTE format('ALTER DATABASE %I SET TimeZone = ''Asia/Kolkata''', current_database());
			EXECUTE format('ALTER DATABASE %I SET DateStyle = ''SQL, DMY''', current_database());
			EXECUTE format('ALTER DATABASE %I SET extra_float_digits = 0', current_database()); END $$`)
		pool.Reset()
	}
	dr.grammar = life
	dr.genTables()
	textKey := map[string]bool{}
	for _, tb := range dr.tables {
		textKey[tb] = dr.isTextKey(tb)
	}
	// Some rows before any definition.
	{
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		dr.writer(ctx, seed^0xabc, textKey)
		cancel()
	}
	dr.genDefs()
	for _, d := range dr.defs {
		t.Logf("seed %d: %s <- %s key %v group %v fields %v", seed, d.name, d.src, d.key, d.group, d.fields)
	}
	cfg := fastConfig()
	cfg.PageSize = 1 + r.IntN(50) // several pages per bucket
	cfg.BuildChunkSize = 5 + r.IntN(40)
	cfg.DrainWorkers = 2
	var logBuf syncBuffer
	level := slog.LevelInfo
	if os.Getenv("TRELLIS_DIFF_DEBUG") != "" { // build tasks and retried steps in a failure's report
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: level}))
	plant.keepLog = true
	set := &engineSet{t: t, pool: pool, cfg: cfg, plant: plant}
	dr.logs = &logBuf
	defer set.stopAll()
	e := set.start()
	set.start() // two engines drain at once
	half := len(dr.defs) / 2
	var definedMu sync.Mutex
	defined := map[string]bool{}
	isDefined := func(n string) bool { definedMu.Lock(); defer definedMu.Unlock(); return defined[n] }
	if life {
		dr.life = newLifecycle(dr, set, seed)
	}
	for _, d := range dr.defs[:half] {
		if err := dr.define(set, d); err != nil {
			t.Fatalf("seed %d: define %s: %v", seed, d.name, err)
		}
		defined[d.name] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	if life {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := dr.life.run(ctx, isDefined); err != nil {
				errs <- fmt.Errorf("lifecycle: %w", err)
			}
		}()
	}
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := dr.writer(ctx, seed*31+uint64(w), textKey); err != nil {
				errs <- err
			}
		}()
	}
	var fwg sync.WaitGroup
	if faults {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			fr := rand.New(rand.NewPCG(seed, 99))
			for ctx.Err() == nil {
				sleepCtx(ctx, time.Duration(200+fr.IntN(500))*time.Millisecond)
				if ctx.Err() != nil {
					return
				}
				dr.faults.Add(1)
				switch fr.IntN(3) {
				case 0: // kill every worker connection mid-page / mid-chunk / mid-seal
					pool.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
						WHERE datname = current_database() AND application_name LIKE 'trellis-%'`)
				case 1: // stop the oldest engine (often the staging holder); another takes over
					set.start()
					set.stopOldest()
				}
			}
		}()
	}
	sleepCtx(ctx, writeFor/3)
	for _, d := range dr.defs[half:] { // defined while writers run
		if dr.life != nil {
			dr.life.ddl.Lock()
		}
		err := dr.define(set, d)
		if dr.life != nil {
			dr.life.ddl.Unlock()
		}
		if err != nil {
			cancel() // the writers and the operator stop before the engines do
			wg.Wait()
			fwg.Wait()
			t.Fatalf("seed %d: define %s: %v", seed, d.name, err)
		}
		definedMu.Lock()
		defined[d.name] = true
		definedMu.Unlock()
	}
	sleepCtx(ctx, writeFor*2/3)
	cancel()
	wg.Wait()
	fwg.Wait()
	close(errs)
	for err := range errs {
		if dr.life != nil {
			t.Logf("lifecycle journal:\n%s", strings.Join(dr.life.journal, "\n"))
		}
		t.Fatalf("seed %d: %v", seed, err)
	}
	e = set.any()
	if dr.life != nil {
		// Twice: the staging pass that read the catalog during the last
		// rename can pause a reader just after the rename back.
		err := dr.life.settle(90 * time.Second)
		if err == nil {
			time.Sleep(time.Second)
			err = dr.life.settle(90 * time.Second)
		}
		if err != nil {
			st, _ := e.Status(context.Background())
			t.Fatalf("seed %d: %v\n%+v\njournal:\n%s\n%s", seed, err, st, strings.Join(dr.life.journal, "\n"), dr.stuckBuilds())
		}
		t.Logf("seed %d: lifecycle operations %s", seed, dr.life.summary())
		if dr.life.total() == 0 {
			t.Errorf("seed %d: no lifecycle operation ran", seed)
		}
	}
	for _, d := range dr.defs {
		if dr.life != nil && dr.life.isFrozen(d.name) {
			continue
		}
		if err := e.AwaitLive(context.Background(), TableName{Name: d.name}, 90*time.Second); err != nil {
			st, _ := e.Status(context.Background())
			t.Fatalf("seed %d: %s not live: %v\n%+v", seed, d.name, err, st)
		}
	}
	tok, err := e.WatermarkToken(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AwaitConverged(context.Background(), tok, 90*time.Second); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	out := dr.compareAll()
	if dr.life != nil {
		out = append(out, dr.life.checkFrozen()...)
	}
	// Read-your-writes (H3): write, take a token, await it, compare at once.
	rr := rand.New(rand.NewPCG(seed, 5))
	for round := 0; round < 8 && len(out) == 0; round++ {
		if err := dr.writeTxs(context.Background(), rr, textKey, 1+rr.IntN(3)); err != nil {
			t.Fatal(err)
		}
		tok, err := e.WatermarkToken(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.AwaitConverged(context.Background(), tok, 90*time.Second); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		out = dr.compareAll()
		if dr.life != nil {
			out = append(out, dr.life.checkFrozen()...)
		}
		if len(out) > 0 {
			out = append([]string{fmt.Sprintf("read-your-writes round %d:", round)}, out...)
		}
	}
	var sizes []string
	for _, d := range dr.defs {
		sizes = append(sizes, fmt.Sprintf("%s=%d", d.name, count(t, pool, d.targetSQL())))
	}
	var seq int64
	pool.QueryRow(context.Background(), "SELECT last_value FROM trellis._change_seq").Scan(&seq)
	t.Logf("seed %d: %d tables, %d definitions, %d commits, %d faults, ~%d changes captured; target rows %s",
		seed, len(dr.tables), len(dr.defs), dr.commits.Load(), dr.faults.Load(), seq, strings.Join(sizes, " "))
	if len(out) > 0 && dr.life != nil {
		out = append(out, "lifecycle journal:\n"+strings.Join(dr.life.journal, "\n"))
	}
	return out
}

func (dr *diffRun) compareAll() []string {
	var out []string
	for _, d := range dr.defs {
		if dr.life != nil && dr.life.isFrozen(d.name) {
			continue
		}
		if dd := diff(dr.t, dr.pool, d.targetSQL(), d.oracle()); dd != "" {
			out = append(out, fmt.Sprintf("%s (%s):\n%s\noracle: %s\n%s", d.name, d.src, dd, d.oracle(), dr.diagnose(d)))
		}
	}
	return out
}

// writeRows writes q's rows (one text column) to b, a line each after
// prefix; a query that fails writes its error instead.
func (dr *diffRun) writeRows(b *strings.Builder, prefix, q string, args ...any) {
	rows, err := dr.pool.Query(context.Background(), q, args...)
	if err != nil {
		b.WriteString(prefix + err.Error() + "\n")
		return
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		rows.Scan(&s)
		b.WriteString(prefix + s + "\n")
	}
}

// stuckBuilds describes the build work of every definition not live and
// the engines' warnings, for a settle that timed out.
func (dr *diffRun) stuckBuilds() string {
	var b strings.Builder
	dr.writeRows(&b, "  ", `SELECT format('%s: %s', d.compiled #>> '{spec,target,name}', row(d.status, d.build_id, d.status_detail,
		  (SELECT json_agg(row(t.id, t.build_id, t.kind, t.state, t.attempts, t.last_error, t.next_attempt_at, t.lo, t.rows_done) ORDER BY t.id) FROM trellis._build_tasks t WHERE t.definition_id = d.id)))
		FROM trellis._definitions d WHERE d.status <> 'live' ORDER BY d.id`)
	dr.writeRows(&b, "  backend ", `SELECT format('%s', row(pid, application_name, state, wait_event_type, wait_event,
		  now() - xact_start, left(query, 300)))
		FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle' ORDER BY pid`)
	dr.writeRows(&b, "  lock ", `SELECT format('%s', row(l.pid, l.locktype, l.mode, l.granted, l.classid, l.objid, l.relation::regclass, a.application_name, a.state))
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.pid <> pg_backend_pid() AND (l.locktype = 'advisory' OR NOT l.granted) ORDER BY l.pid`)
	for _, line := range strings.Split(dr.logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.Contains(line, "build task") || strings.Contains(line, "step retried") {
			b.WriteString("  " + line + "\n")
		}
	}
	return b.String()
}

func diffSeeds() []uint64 {
	seeds := append(append([]uint64{}, pinnedSeeds...), pinnedLifecycleSeeds...)
	if s := os.Getenv("TRELLIS_DIFF_SEEDS"); s != "" {
		seeds = nil
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err == nil {
				seeds = append(seeds, v)
			}
		}
		return seeds
	}
	n := 3
	if s := os.Getenv("TRELLIS_DIFF_RUNS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	base := uint64(time.Now().UnixNano())
	for i := range n {
		seeds = append(seeds, base+uint64(i))
	}
	return seeds
}

func TestDifferential(t *testing.T) {
	for i, seed := range diffSeeds() {
		t.Run(fmt.Sprintf("seed_%d", seed), func(t *testing.T) {
			// Faults in three seeds of four; lifecycle operations in three
			// fresh seeds of four (a pinned seed replays the program it
			// failed with, drawn before lifecycle operations existed).
			life := i >= len(pinnedSeeds) && i%4 != 1 || slices.Contains(pinnedLifecycleSeeds, seed)
			if v := os.Getenv("TRELLIS_DIFF_LIFE"); v != "" { // replaying a seed: say how it ran
				life = v == "1"
			}
			faults := i%4 != 3
			if v := os.Getenv("TRELLIS_DIFF_FAULTS"); v != "" {
				faults = v == "1"
			}
			t.Logf("seed %d: faults %v, lifecycle %v (replay: TRELLIS_DIFF_SEEDS=%d TRELLIS_DIFF_FAULTS=%d TRELLIS_DIFF_LIFE=%d)",
				seed, faults, life, seed, b2i(faults), b2i(life))
			if d := runDifferential(t, seed, faults, life, plants{}, diffWriteFor(), 0); len(d) > 0 {
				t.Fatalf("seed %d diverged (pin it in pinnedSeeds or pinnedLifecycleSeeds):\n%s", seed, strings.Join(d, "\n"))
			}
		})
	}
}

// The test can fail: each planted bug, armed alone, is reported as a
// divergence (correctness spec, planted bugs).
func TestDifferentialCatchesPlantedFaults(t *testing.T) {
	for _, c := range []struct {
		name  string
		seed  uint64
		plant plants
	}{
		{"drop_one_key_in_five", 4242, plants{dropEveryNthKey: 5}},
		{"converged_is_drained", 4243, plants{convergedIsDrained: true}},
		{"no_origin_inheritance", 4244, plants{noOriginInheritance: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := runDifferential(t, c.seed, false, false, c.plant, 2*time.Second, 2)
			if len(d) == 0 {
				t.Fatalf("plant %s went unnoticed", c.name)
			}
			t.Logf("plant %s reported as expected (%d targets diverged)", c.name, len(d))
		})
	}
}

var _ = errors.New

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func diffWriteFor() time.Duration {
	if s := os.Getenv("TRELLIS_DIFF_WRITE"); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			return d
		}
	}
	return 3 * time.Second
}

// diagnose describes a diverging definition's ledger and catalog state.
func (dr *diffRun) diagnose(d *dDef) string {
	var b strings.Builder
	ctx := context.Background()
	ledger := base.Ident(d.name + "__ledger")
	var members, srcRows int64
	dr.pool.QueryRow(ctx, "SELECT count(*) FROM "+ledger+func() string {
		if len(d.group) > 0 {
			return " WHERE member"
		}
		return ""
	}()).Scan(&members)
	dr.pool.QueryRow(ctx, "SELECT count(*) FROM "+d.sourceSQL()+" x").Scan(&srcRows)
	fmt.Fprintf(&b, "ledger entries %d, source rows %d\n", members, srcRows)
	if len(d.group) > 0 {
		var gs, ts []string
		for i, g := range d.group {
			gs = append(gs, fmt.Sprintf("g%d", i))
			ts = append(ts, base.Ident(g.name))
		}
		audit := diff(dr.t, dr.pool, "SELECT "+strings.Join(ts, ", ")+", \"__members\" FROM "+base.Ident(d.name),
			"SELECT "+strings.Join(gs, ", ")+", count(*) FROM "+ledger+" WHERE member GROUP BY "+strings.Join(gs, ", "))
		fmt.Fprintf(&b, "ledger audit (target vs ledger): %s\n", audit)
	}
	var raw []byte
	if d.upstream == nil && dr.pool.QueryRow(ctx, `SELECT compiled FROM trellis._definitions WHERE target_table = 'public.' || $1`, d.name).Scan(&raw) == nil {
		c := &compiled{}
		json.Unmarshal(raw, c)
		led := "SELECT k FROM " + ledger
		if len(d.group) > 0 {
			led += " WHERE member"
		}
		src := "SELECT " + model.KeySQL("x", c.Key, c.KeyNullable) + " FROM " + d.src + " x"
		for _, dir := range [][3]string{{src, led, "in source, not in ledger"}, {led, src, "in ledger, not in source"}} {
			rows, err := dr.pool.Query(ctx, "SELECT to_json(k)::text FROM (("+dir[0]+") EXCEPT ("+dir[1]+")) y(k) LIMIT 10")
			if err == nil {
				var ks []string
				for rows.Next() {
					var k string
					rows.Scan(&k)
					ks = append(ks, k)
				}
				rows.Close()
				fmt.Fprintf(&b, "%s: %v\n", dir[2], ks)
			}
		}
		fmt.Fprintf(&b, "key %+v nullable %v\n", c.Key, c.KeyNullable)
		// Where the mismatched keys' changes went: batch of each log row.
		// One line per mismatched key of each log row: a captured statement's
		// row holds its keys in keys, a rederive's in key.
		dr.writeRows(&b, "  log ", `SELECT format('%s', row(k.key, c.op, c.change_id, cardinality(c.keys), c.txid, c.origin_lsn,
			  (SELECT min(b.seq) FROM trellis._batches b WHERE pg_visible_in_snapshot(c.txid, b.snap)), c.staged_at))
			FROM trellis._change_log c CROSS JOIN LATERAL unnest(coalesce(c.keys, ARRAY[c.key])) AS k(key)
			WHERE c.src_table = 'public.' || $1
			  AND k.key IN ((`+src+` EXCEPT `+led+`) UNION ALL (`+led+` EXCEPT `+src+`))
			ORDER BY c.change_id, k.key LIMIT 80`, d.src)
		dr.writeRows(&b, "  batch ", `SELECT format('%s', row(seq, snap, sealed_at, row_count, bucket_count, has_truncate, drained_at)) FROM trellis._batches ORDER BY seq LIMIT 200`)
		dr.writeRows(&b, "  marker ", `SELECT format('%s', row(c.key, c.op, c.txid, c.staged_at)) FROM trellis._change_log c WHERE c.src_table = 'public.' || $1 AND c.key IS NULL AND c.keys IS NULL`, d.src)
		for _, line := range strings.Split(dr.logs.String(), "\n") {
			if strings.Contains(line, "capture install") || strings.Contains(line, "build started") || strings.Contains(line, "staging worker started") {
				b.WriteString("  " + line + "\n")
			}
		}
	}
	fmt.Fprintf(&b, "definitions: ")
	for _, o := range dr.defs {
		fmt.Fprintf(&b, "%s<-%s %v %v; ", o.name, o.src, o.group, o.fields)
	}
	b.WriteString("\n")
	rows, _ := dr.pool.Query(ctx, `SELECT format('%s', row(id, status, version, build_id, created_at)) FROM trellis._definitions ORDER BY id`)
	for rows.Next() {
		var s string
		rows.Scan(&s)
		b.WriteString(s + " ")
	}
	rows.Close()
	var pending, batches int64
	dr.pool.QueryRow(ctx, `SELECT count(*) FROM trellis._change_log`).Scan(&pending)
	dr.pool.QueryRow(ctx, `SELECT count(*) FROM trellis._batches WHERE state <> 'drained'`).Scan(&batches)
	fmt.Fprintf(&b, "\nlog rows %d, undrained batches %d", pending, batches)
	return b.String()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
