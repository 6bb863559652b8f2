package main

// Shared plumbing of the engine benchmarks (B2, B6, B7, B8, B9, B10): a
// throwaway cluster per scenario, a fresh database per cell, the engine run
// in this process through its Go API, and the oracle of §1.5 (the target
// compared with its definition's query, EXCEPT ALL both ways).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

// engineLab is one scenario's cluster.
type engineLab struct {
	b       *bench
	cluster *pgcluster.Cluster
	base    string
	seq     atomic.Int64
}

// startLab starts a throwaway cluster (fast settings, tmpfs unless -disk) and
// fills the result lines' environment.
func startLab(ctx context.Context, b *bench, scenario string) (*engineLab, error) {
	root := b.cfg.Disk
	if root == "" {
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			root = "/dev/shm"
		}
	}
	base, err := os.MkdirTemp(root, "trellis-bench-"+scenario+"-")
	if err != nil {
		return nil, err
	}
	settings := map[string]string{
		"max_connections": "100",
		// Builds and 1M-row statements: keep checkpoints out of the cells.
		"max_wal_size": "4GB",
	}
	// Diagnosis: TRELLIS_BENCH_PG_LOG=FILE keeps the server's log, with
	// every statement slower than TRELLIS_BENCH_PG_LOG_MS (default 0) and
	// lock waits longer than 10 ms. Figures taken so are not for the record.
	var serverLog *os.File
	if path := os.Getenv("TRELLIS_BENCH_PG_LOG"); path != "" {
		if serverLog, err = os.Create(path); err != nil {
			os.RemoveAll(base)
			return nil, err
		}
		settings["log_min_duration_statement"] = strconv.Itoa(envInt("TRELLIS_BENCH_PG_LOG_MS", 0))
		settings["log_line_prefix"] = "%m [%p] %a "
		settings["log_lock_waits"] = "on"
		settings["deadlock_timeout"] = "10ms"
	}
	// Diagnosis: TRELLIS_BENCH_PGSS=1 loads pg_stat_statements (nested
	// statements too, so the engine's PL/pgSQL and CTEs show) for the JOIN
	// benchmarks' "where the time goes" listing.
	pgss := os.Getenv("TRELLIS_BENCH_PGSS") == "1"
	if pgss {
		settings["shared_preload_libraries"] = "pg_stat_statements"
		settings["pg_stat_statements.track"] = "all"
	}
	opts := pgcluster.Options{DataDir: filepath.Join(base, "pgdata"), Fast: true, Settings: settings}
	if serverLog != nil {
		opts.Log = serverLog
	}
	c, err := pgcluster.Start(ctx, opts)
	if err != nil {
		os.RemoveAll(base)
		return nil, err
	}
	l := &engineLab{b: b, cluster: c, base: base}
	admin, err := pgconn.Connect(ctx, c.URL("postgres"))
	if err != nil {
		l.stop()
		return nil, err
	}
	defer admin.Close(context.Background())
	b.out.env = captureEnv(ctx, admin, c.DataDir)
	b.out.env["profile"] = b.cfg.Profile
	if b.cfg.Quick {
		b.out.env["profile"] = "smoke"
	}
	b.out.env["path"] = "in-process engine"
	return l, nil
}

func (l *engineLab) stop() {
	if l.cluster != nil {
		l.cluster.Stop()
	}
	os.RemoveAll(l.base)
}

// newDB creates a fresh database and a pool on it; drop removes both.
// startProxy starts the proxy binary bin in front of database db of the
// lab's cluster, with extra flags, logging warnings only when this build
// knows --log-level (the proxy is developed alongside the harness).
func (l *engineLab) startProxy(ctx context.Context, bin, db string, extra ...string) (*process, error) {
	if proxyFlags(bin)["log-level"] {
		extra = append(extra, "--log-level", "warn")
	}
	return startProxy(ctx, proxyOptions{Bin: bin, Upstream: l.cluster.URL(db), Dir: l.base, ExtraArgs: extra})
}

func (l *engineLab) newDB(ctx context.Context, maxConns int32) (pool *pgxpool.Pool, name string, drop func(), err error) {
	name = fmt.Sprintf("bench_%d_%d", os.Getpid(), l.seq.Add(1))
	admin, err := pgx.Connect(ctx, l.cluster.URL("postgres"))
	if err != nil {
		return nil, "", nil, err
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, "", nil, err
	}
	pc, err := pgxpool.ParseConfig(l.cluster.URL(name))
	if err != nil {
		return nil, "", nil, err
	}
	pc.MaxConns = maxConns
	pool, err = pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, "", nil, err
	}
	drop = func() {
		pool.Close()
		a, err := pgx.Connect(context.Background(), l.cluster.URL("postgres"))
		if err == nil {
			a.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			a.Close(context.Background())
		}
	}
	return pool, name, drop, nil
}

// runningEngine is an engine whose workers run until stop.
type runningEngine struct {
	*engine.Engine
	cancel context.CancelFunc
	done   chan error
}

// startEngine migrates and runs an engine with cfg (zero fields take the
// engine's defaults: SealInterval 50ms, StagingInterval 500ms, PollInterval
// 1s, 2 drain workers).
func startEngine(ctx context.Context, pool *pgxpool.Pool, cfg engine.Config) (*runningEngine, error) {
	if os.Getenv("TRELLIS_BENCH_ENGINE_LOG") == "debug" && cfg.Logger == nil {
		// The engine's own account of its steps (build tasks, pages), to stderr.
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	e := engine.New(pool, cfg)
	if err := e.Migrate(ctx); err != nil {
		e.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &runningEngine{Engine: e, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- e.Run(rctx) }()
	return r, nil
}

// stop ends the workers and waits for them.
func (r *runningEngine) stop() error {
	if r == nil || r.cancel == nil {
		return nil
	}
	r.cancel()
	err := <-r.done
	r.Close()
	r.cancel = nil
	return err
}

// converge waits until every write committed before the call is in every
// target.
func (r *runningEngine) converge(ctx context.Context, timeout time.Duration) error {
	tok, err := r.WatermarkToken(ctx)
	if err != nil {
		return err
	}
	return r.AwaitConverged(ctx, tok, timeout)
}

// col is a source column reference inside a spec expression.
func col(c string) string { return engine.SourceColumn(c) }

// oneToOne is `TRANSFORM target FROM source SELECT <fields>`.
func oneToOne(target, source string, fields ...engine.Field) engine.Spec {
	return engine.Spec{Target: engine.TableName{Name: target}, Source: engine.TableName{Name: source},
		Statement: "TRANSFORM " + target + " FROM " + source, Fields: fields}
}

// sumCount is `TRANSFORM target FROM source GROUP BY g SELECT SUM(v) AS s, COUNT(*) AS n`.
func sumCount(target, source, g, v string) engine.Spec {
	return engine.Spec{Target: engine.TableName{Name: target}, Source: engine.TableName{Name: source},
		Statement: "TRANSFORM " + target + " FROM " + source + " GROUP BY " + g + " SELECT SUM(" + v + ") AS s, COUNT(*) AS n",
		GroupBy:   []engine.GroupKey{{Name: g, Expr: col(g)}},
		Fields: []engine.Field{
			{Name: "s", Agg: engine.AggSum, Expr: col(v)},
			{Name: "n", Agg: engine.AggCountStar},
		}}
}

// sumCountOracle is the definition of sumCount rendered independently, and
// the matching read of the target.
func sumCountOracle(target, source, g, v string) (got, want string) {
	return fmt.Sprintf("SELECT %s, s, n FROM %s", g, target),
		fmt.Sprintf("SELECT %s, sum(%s), count(*) FROM %s GROUP BY %s", g, v, source, g)
}

// define registers spec on the pool (its own transaction) and waits until it
// is live.
func define(ctx context.Context, e *runningEngine, pool *pgxpool.Pool, spec engine.Spec, timeout time.Duration) error {
	if _, err := e.Define(ctx, pool, spec); err != nil {
		return fmt.Errorf("define %s: %w", spec.Target.Name, err)
	}
	if err := e.AwaitLive(ctx, spec.Target, timeout); err != nil {
		return fmt.Errorf("await live %s: %w", spec.Target.Name, err)
	}
	return nil
}

// errDiverged marks an oracle failure: the benchmark's answer was wrong.
var errDiverged = errors.New("target differs from its definition")

// checkSame compares two queries as multisets (EXCEPT ALL both ways); an
// error wrapping errDiverged describes up to 5 differing rows each way.
func checkSame(ctx context.Context, q engine.Querier, got, want string) error {
	var msgs []string
	for i, dir := range [][2]string{{got, want}, {want, got}} {
		rows, err := q.Query(ctx, "SELECT x::text FROM (("+dir[0]+") EXCEPT ALL ("+dir[1]+")) x LIMIT 5")
		if err != nil {
			return fmt.Errorf("oracle query: %w", err)
		}
		r, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("oracle query: %w", err)
		}
		if len(r) > 0 {
			label := "extra in target"
			if i == 1 {
				label = "missing from target"
			}
			msgs = append(msgs, label+": "+strings.Join(r, " | "))
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%w: %s", errDiverged, strings.Join(msgs, "; "))
	}
	return nil
}

// envInt reads a positive integer knob from the environment.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// cellWait is the pause between cells (§1.2 says 2 s; -wait).
func (b *bench) cellWait() time.Duration {
	if b.cfg.Quick {
		return 200 * time.Millisecond
	}
	return b.cfg.Wait
}

// printTable writes a result table to stderr.
func (b *bench) printTable(t *table) {
	t.markdown = b.cfg.Markdown
	fmt.Fprintln(os.Stderr)
	t.write(os.Stderr)
}

// failf records a correctness or harness failure of one cell.
func (b *bench) failf(format string, args ...any) {
	b.fail++
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
}

// timeFloors times each kind's floor (its CTAS + index; %s is the table)
// once, in seconds per kind, dropping each table after.
func timeFloors[K any](ctx context.Context, pool *pgxpool.Pool, prefix string, kinds []K, floor func(K) (name, sql string), rep int, tag string) ([]float64, error) {
	out := make([]float64, len(kinds))
	for ki, k := range kinds {
		name, sql := floor(k)
		table := fmt.Sprintf("%s_floor_%d_%s%d", prefix, ki, tag, rep)
		start := time.Now()
		if _, err := pool.Exec(ctx, fmt.Sprintf(sql, table)); err != nil {
			return nil, fmt.Errorf("floor %s: %w", name, err)
		}
		out[ki] = time.Since(start).Seconds()
		if _, err := pool.Exec(ctx, "DROP TABLE "+table); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// labDB starts scenario's lab and a fresh database in it with a pool of
// maxConns; stop drops the database and stops the lab.
func labDB(ctx context.Context, b *bench, scenario string, maxConns int32) (pool *pgxpool.Pool, stop func(), err error) {
	l, err := startLab(ctx, b, scenario)
	if err != nil {
		return nil, nil, err
	}
	pool, _, drop, err := l.newDB(ctx, maxConns)
	if err != nil {
		l.stop()
		return nil, nil, err
	}
	return pool, func() { drop(); l.stop() }, nil
}
