package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

// passthrough is B1: the cost of the proxy for ordinary SQL, against a direct
// connection and PgBouncer in session mode, all in the same run.
type passthrough struct {
	b        *bench
	base     string // scratch directory (cluster, configs, logs)
	pgbench  string
	admin    *pgconn.PgConn // direct connection for setup and oracles
	dsn      map[string]string
	procs    map[string]*process
	upstream string // host:port of Postgres
	upURL    string // postgres:// URL of Postgres for the proxy
	proxyArg []string

	copyRef     []byte // the exact COPY text of the source table
	copyRefHash [32]byte
	copyRows    int
	copyDigest  string // tableDigest of the source
	bigRows     int    // rows of 1,000 bytes in the large result
}

const (
	bigRowBytes = 1000
	// A streaming cell repeats its operation until it has timed this much
	// (but at most maxStreamIters times).
	minStreamTime  = time.Second
	maxStreamIters = 30
)

func runPassthrough(ctx context.Context, b *bench) error {
	cfg := b.cfg
	p := &passthrough{b: b, dsn: map[string]string{}, procs: map[string]*process{}, copyRows: cfg.CopyRows}
	p.bigRows = 100_000_000 / bigRowBytes
	if cfg.Quick {
		p.bigRows /= 10
	}
	var err error
	p.pgbench = cfg.PgbenchBin
	if p.pgbench == "" {
		if p.pgbench, err = findBin("pgbench"); err != nil {
			return fmt.Errorf("%v: install the postgresql-client package", err)
		}
	}

	root := cfg.Disk
	if root == "" {
		// tmpfs by default (§2.1): no disk noise in a pass-through benchmark.
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			root = "/dev/shm"
		}
	}
	if p.base, err = os.MkdirTemp(root, "trellis-bench-"); err != nil {
		return err
	}
	defer os.RemoveAll(p.base)

	// The cluster. Enough connections for the idle-memory figure, where
	// every client through the proxy (and PgBouncer, after its first query
	// in session mode) holds a backend.
	dataDir := ""
	p.dsn[pathDirect] = cfg.DirectDSN
	if cfg.DirectDSN == "" {
		fmt.Fprintf(os.Stderr, "starting a throwaway cluster in %s\n", p.base)
		c, err := pgcluster.Start(ctx, pgcluster.Options{
			DataDir: filepath.Join(p.base, "pgdata"),
			Fast:    true,
			Settings: map[string]string{
				"max_connections": strconv.Itoa(cfg.IdleConns + 100),
			},
		})
		if err != nil {
			return err
		}
		defer c.Stop()
		dataDir = c.DataDir
		p.dsn[pathDirect] = c.URL("postgres")
		p.upstream = c.Addr()
	} else {
		pc, err := pgconn.ParseConfig(cfg.DirectDSN)
		if err != nil {
			return fmt.Errorf("--direct-dsn: %w", err)
		}
		p.upstream = net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port)))
	}
	p.upURL = p.dsn[pathDirect]
	if p.admin, err = pgconn.Connect(ctx, p.dsn[pathDirect]); err != nil {
		return fmt.Errorf("connecting directly: %w", err)
	}
	defer p.admin.Close(context.Background())
	b.out.env = captureEnv(ctx, p.admin, dataDir)
	b.out.env["profile"] = cfg.Profile
	if cfg.Quick {
		b.out.env["profile"] = "smoke"
	}
	b.out.env["pgbench_scale"] = cfg.Scale
	b.out.env["cell_seconds"] = cfg.Duration.Seconds()

	if err := p.setup(ctx); err != nil {
		return err
	}
	if err := p.startTargets(ctx); err != nil {
		return err
	}
	defer func() {
		for _, pr := range p.procs {
			pr.Stop()
		}
	}()
	variants := []string{}
	for _, path := range []string{pathProxy, pathBouncer} {
		if p.dsn[path] != "" {
			variants = append(variants, path)
		}
	}

	r := &runner{scenario: "passthrough", control: pathDirect, variants: variants, reps: cfg.Reps, wait: cfg.Wait, out: b.out}
	modes, _ := cfg.modeList()
	clients, _ := cfg.clientList()
	var shapes []shapeSpec
	for _, m := range modes {
		for _, c := range clients {
			shapes = append(shapes, p.pgbenchShape(m, c))
		}
	}
	est := time.Duration(cfg.Reps*len(shapes)*(len(variants)+2)) * (cfg.Duration + cfg.Wait + 500*time.Millisecond)
	fmt.Fprintf(os.Stderr, "\npgbench: %d shapes × %d reps × %d runs (direct, %s, direct), %s each: about %s\n",
		len(shapes), cfg.Reps, len(variants)+2, strings.Join(variants, ", "), cfg.Duration, est.Round(time.Minute))
	pgRes := r.run(ctx, shapes)

	streamShapes := []shapeSpec{p.copyOutShape(), p.copyInShape(), p.bigResultShape()}
	fmt.Fprintf(os.Stderr, "\nstreaming: COPY %d rows out and in, a %d MB result\n", p.copyRows, p.bigRows*bigRowBytes/1_000_000)
	stRes := r.run(ctx, streamShapes)
	b.fail += r.failures
	if ctx.Err() != nil {
		return ctx.Err()
	}
	idle := p.idleMemory(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	p.report(shapes, pgRes, streamShapes, stRes, variants, idle)
	return nil
}

// setup initialises pgbench's tables and the COPY source.
func (p *passthrough) setup(ctx context.Context) error {
	cfg := p.b.cfg
	fmt.Fprintf(os.Stderr, "pgbench -i -s %d\n", cfg.Scale)
	t0 := time.Now()
	if out, err := execOutput(ctx, p.pgbench, "-i", "-q", "-s", strconv.Itoa(cfg.Scale), p.dsn[pathDirect]); err != nil {
		return fmt.Errorf("pgbench -i: %v: %s", err, lastLines(out, 5))
	}
	fmt.Fprintf(os.Stderr, "  initialised in %s\n", time.Since(t0).Round(100*time.Millisecond))
	// A row of ~60 bytes of COPY text: a key, some text, a number.
	sql := fmt.Sprintf(`DROP TABLE IF EXISTS bench_copy_src, bench_copy_dst;
CREATE TABLE bench_copy_src AS
  SELECT g AS id, 'row ' || g || ' ' || md5(g::text) AS note, g * 7 AS n FROM generate_series(1, %d) g;
CREATE TABLE bench_copy_dst (LIKE bench_copy_src);`, p.copyRows)
	// VACUUM may not share a multi-statement string (an implicit transaction).
	for _, q := range []string{sql, "VACUUM ANALYZE bench_copy_src"} {
		if _, err := p.admin.Exec(ctx, q).ReadAll(); err != nil {
			return fmt.Errorf("creating the COPY tables: %w", err)
		}
	}
	var buf bytes.Buffer
	if _, err := p.admin.CopyTo(ctx, &buf, "COPY bench_copy_src TO STDOUT"); err != nil {
		return fmt.Errorf("reference COPY: %w", err)
	}
	p.copyRef = buf.Bytes()
	p.copyRefHash = sha256.Sum256(p.copyRef)
	var err error
	p.copyDigest, err = p.tableDigest(ctx, "bench_copy_src")
	return err
}

// tableDigest is a row count and an order-independent sum of row hashes: one
// scan, cheap enough to check every COPY in, and a lost, duplicated or
// altered row changes it.
func (p *passthrough) tableDigest(ctx context.Context, table string) (string, error) {
	res, err := p.admin.Exec(ctx, "SELECT count(*) || ' rows, hash sum ' || coalesce(sum(hashtext(t::text)::bigint), 0) FROM "+table+" t").ReadAll()
	if err != nil {
		return "", err
	}
	return string(res[0].Rows[0][0]), nil
}

// startTargets starts PgBouncer and the proxy (unless DSNs were given or
// they are left out).
func (p *passthrough) startTargets(ctx context.Context) error {
	cfg := p.b.cfg
	switch {
	case cfg.NoBouncer || cfg.RelayBaseline:
	case cfg.BouncerDSN != "":
		p.dsn[pathBouncer] = cfg.BouncerDSN
	default:
		bin := cfg.BouncerBin
		if bin == "" {
			var err error
			if bin, err = findBin("pgbouncer"); err != nil {
				return fmt.Errorf("%v: install it (make bench-passthrough does: scripts/ensure-postgres.sh pgbouncer) or pass --no-pgbouncer", err)
			}
		}
		p.b.cfg.BouncerBin = bin
		pr, err := p.startBouncer(ctx, "pgbouncer", 100)
		if err != nil {
			return err
		}
		p.procs[pathBouncer], p.dsn[pathBouncer] = pr, pr.DSN()
	}

	switch {
	case cfg.NoProxy:
	case cfg.ProxyDSN != "":
		p.dsn[pathProxy] = cfg.ProxyDSN
	default:
		if st, err := os.Stat(cfg.ProxyBin); err != nil || st.IsDir() {
			fmt.Fprintf(os.Stderr, "NOTE: no proxy binary at %s (make build): the proxy column is pending; measuring direct and PgBouncer only\n", cfg.ProxyBin)
			return nil
		}
		// Absolute: the proxy runs in the scratch directory.
		if abs, err := filepath.Abs(cfg.ProxyBin); err == nil {
			p.b.cfg.ProxyBin = abs
		}
		flags := proxyFlags(p.b.cfg.ProxyBin)
		if flags["max-client-conns"] {
			p.proxyArg = append(p.proxyArg, "--max-client-conns", strconv.Itoa(cfg.IdleConns+100))
		}
		if flags["log-level"] {
			p.proxyArg = append(p.proxyArg, "--log-level", "warn")
		}
		p.proxyArg = append(p.proxyArg, strings.Fields(cfg.ProxyArgs)...)
		pr, err := p.startProxy(ctx)
		if err != nil {
			return err
		}
		p.procs[pathProxy], p.dsn[pathProxy] = pr, pr.DSN()
		if cfg.RelayBaseline {
			if pr, err = p.startRelay(ctx); err != nil {
				return err
			}
			p.procs[pathBouncer], p.dsn[pathBouncer] = pr, pr.DSN()
			fmt.Fprintf(os.Stderr, "NOTE: -relay-baseline: the pgbouncer column is the proxy with --routing=false\n")
		}
		if out, err := exec.Command(p.b.cfg.ProxyBin, "version").Output(); err == nil {
			p.b.out.env["proxy_version"] = strings.TrimSpace(string(out))
		}
	}
	return nil
}

func (p *passthrough) startBouncer(ctx context.Context, name string, pool int) (*process, error) {
	return startBouncer(ctx, bouncerOptions{
		Bin: p.b.cfg.BouncerBin, Upstream: p.upstream, Dir: filepath.Join(p.base, name),
		PoolMode: "session", MaxClients: pool + 10, PoolSize: pool, RunAs: p.b.cfg.RunAs,
	})
}

func (p *passthrough) startProxy(ctx context.Context) (*process, error) {
	return startProxy(ctx, proxyOptions{Bin: p.b.cfg.ProxyBin, Upstream: p.upURL, Dir: p.base, ExtraArgs: p.proxyArg})
}

// startRelay starts the proxy with routing off: same binary, same engine,
// every statement relayed untouched (-relay-baseline).
func (p *passthrough) startRelay(ctx context.Context) (*process, error) {
	args := append(append([]string(nil), p.proxyArg...), "--routing=false", "--staging=off")
	return startProxy(ctx, proxyOptions{Bin: p.b.cfg.ProxyBin, Upstream: p.upURL, Dir: p.base, ExtraArgs: args})
}

// target returns the DSN and the pid (0 when not ours) for a path,
// restarting a started process that died so that one crash does not void
// the rest of the run (the crash is still reported by the failed run).
func (p *passthrough) target(ctx context.Context, path string) (string, int, error) {
	pr := p.procs[path]
	if pr == nil {
		return p.dsn[path], 0, nil
	}
	if err := pr.alive(); err != nil {
		fmt.Fprintf(os.Stderr, "  %v; restarting it\n", err)
		var np *process
		switch {
		case path == pathProxy:
			np, err = p.startProxy(ctx)
		case p.b.cfg.RelayBaseline:
			np, err = p.startRelay(ctx)
		default:
			np, err = p.startBouncer(ctx, "pgbouncer-restarted", 100)
		}
		if err != nil {
			return "", 0, err
		}
		p.procs[path], p.dsn[path] = np, np.DSN()
		pr = np
	}
	return p.dsn[path], pr.PID, nil
}

// cpuKey names the per-transaction CPU field of the forwarding process.
func cpuKey(path, per string) string {
	if path == pathBouncer {
		return "pgbouncer_cpu_us_per_" + per
	}
	return "proxy_cpu_us_per_" + per
}

// pgbenchShape is one pgbench mode at one client count.
func (p *passthrough) pgbenchShape(m pgbenchMode, clients int) shapeSpec {
	cfg := p.b.cfg
	return shapeSpec{
		Name: fmt.Sprintf("%s/c%d", m.Name, clients),
		Unit: "tps",
		run: func(ctx context.Context, path string) point {
			pt := point{Value: math.NaN(), P50: math.NaN(), P99: math.NaN(), Fields: map[string]any{
				"mode": m.Name, "clients": clients,
			}}
			dsn, pid, err := p.target(ctx, path)
			if err != nil {
				pt.Err = err
				return pt
			}
			t0, _ := cpuTicks(pid)
			res, err := runPgbench(ctx, p.pgbench, dsn, m, clients, cfg.Duration, cfg.Sampling, p.base)
			if err != nil {
				pt.Err = err
				return pt
			}
			pt.Value, pt.P50, pt.P99 = res.TPS, res.P50, res.P99
			pt.Fields["tps"] = res.TPS
			pt.Fields["transactions"] = res.Processed
			pt.Fields["latency_avg_ms"] = res.LatencyAvg
			pt.Fields["latency_p50_ms"] = res.P50
			pt.Fields["latency_p99_ms"] = res.P99
			pt.Fields["latency_samples"] = res.Samples
			if pid > 0 {
				if t1, err := cpuTicks(pid); err == nil && res.Processed > 0 {
					pt.Fields[cpuKey(path, "txn")] = float64(t1-t0) * 1e6 / clockTicks / float64(res.Processed)
				}
				if kb, err := rssKB(pid); err == nil {
					pt.Fields[rssKey(path)] = float64(kb) / 1024
				}
			}
			pt.Fields["oracle_ok"] = nil
			if m.Writes {
				ok, err := p.tpcbOracle(ctx, res.Processed)
				pt.Fields["oracle_ok"] = ok
				if err != nil {
					pt.Err = err
				}
			}
			return pt
		},
	}
}

// tpcbOracle checks what TPC-B-like runs must leave behind: every
// transaction adds the same delta to one account, teller and branch, so the
// three balance sums agree; and every transaction pgbench counted committed
// a history row (pgbench truncates history before each run).
func (p *passthrough) tpcbOracle(ctx context.Context, processed int64) (bool, error) {
	res, err := p.admin.Exec(ctx, `SELECT (SELECT sum(abalance) FROM pgbench_accounts)::text,
  (SELECT sum(tbalance) FROM pgbench_tellers)::text,
  (SELECT sum(bbalance) FROM pgbench_branches)::text,
  (SELECT count(*) FROM pgbench_history)`).ReadAll()
	if err != nil {
		return false, fmt.Errorf("oracle: %w", err)
	}
	row := res[0].Rows[0]
	a, t, br := string(row[0]), string(row[1]), string(row[2])
	hist, _ := strconv.ParseInt(string(row[3]), 10, 64)
	if a != t || t != br {
		return false, fmt.Errorf("oracle: balance sums differ: accounts %s, tellers %s, branches %s", a, t, br)
	}
	if hist < processed {
		return false, fmt.Errorf("oracle: %d history rows for %d transactions pgbench counted", hist, processed)
	}
	return true, nil
}

// countHash counts and hashes what passes through it.
type countHash struct {
	h hash.Hash
	n int64
}

func (c *countHash) Write(b []byte) (int, error) {
	c.n += int64(len(b))
	return c.h.Write(b)
}

// streamOp is one streaming operation: prep runs untimed before each
// iteration (may be nil), op is timed and returns the bytes and rows it
// moved, check verifies what that iteration did (the oracle).
type streamOp struct {
	prep  func(ctx context.Context) error
	op    func(ctx context.Context, c *pgconn.PgConn) (nbytes, rows int64, err error)
	check func() error
}

// streamPoint times so.op on a fresh connection through path, Iters times
// (one COPY of 1M rows takes well under a second here, too short to read
// alone on a noisy box). The connection time is not part of the figure.
func (p *passthrough) streamPoint(ctx context.Context, path string, so streamOp) point {
	pt := point{Value: math.NaN(), P50: math.NaN(), P99: math.NaN(), Fields: map[string]any{}}
	dsn, pid, err := p.target(ctx, path)
	if err != nil {
		pt.Err = err
		return pt
	}
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		pt.Err = err
		return pt
	}
	defer conn.Close(context.Background())
	var el time.Duration
	var ticks, nbytes, rows int64
	pt.Fields["oracle_ok"] = false
	iters := 0
	// At least StreamIters, and at least minStreamTime in all: a 100 MB
	// result takes ~0.1 s here, too short to read alone.
	for iters < p.b.cfg.StreamIters || el < minStreamTime && iters < maxStreamIters {
		iters++
		if so.prep != nil {
			if err := so.prep(ctx); err != nil {
				pt.Err = err
				return pt
			}
		}
		t0c, _ := cpuTicks(pid)
		t0 := time.Now()
		nb, nr, err := so.op(ctx, conn)
		el += time.Since(t0)
		t1c, _ := cpuTicks(pid)
		ticks += t1c - t0c
		nbytes += nb
		rows += nr
		if err != nil {
			pt.Err = err
			return pt
		}
		if err := so.check(); err != nil {
			pt.Err = err
			return pt
		}
	}
	pt.Fields["oracle_ok"] = true
	pt.Fields["iterations"] = iters
	pt.Fields["seconds"] = el.Seconds()
	pt.Fields["bytes"] = nbytes
	pt.Fields["rows"] = rows
	pt.Value = float64(nbytes) / el.Seconds()
	pt.Fields["bytes_per_sec"] = pt.Value
	pt.Fields["rows_per_sec"] = float64(rows) / el.Seconds()
	if pid > 0 && rows > 0 {
		pt.Fields[cpuKey(path, "row")] = float64(ticks) * 1e6 / clockTicks / float64(rows)
		if kb, err := rssKB(pid); err == nil {
			pt.Fields[rssKey(path)] = float64(kb) / 1024
		}
	}
	return pt
}

// copyOutShape: COPY TO STDOUT of the source table; the bytes must be
// identical to the direct reference.
func (p *passthrough) copyOutShape() shapeSpec {
	return shapeSpec{Name: "copy-out", Unit: "MB/s", Scale: 1e6, run: func(ctx context.Context, path string) point {
		var ch *countHash
		return p.streamPoint(ctx, path, streamOp{
			op: func(ctx context.Context, c *pgconn.PgConn) (int64, int64, error) {
				ch = &countHash{h: sha256.New()}
				tag, err := c.CopyTo(ctx, ch, "COPY bench_copy_src TO STDOUT")
				return ch.n, tag.RowsAffected(), err
			},
			check: func() error {
				var sum [32]byte
				copy(sum[:], ch.h.Sum(nil))
				if ch.n != int64(len(p.copyRef)) || sum != p.copyRefHash {
					return fmt.Errorf("oracle: COPY out returned %d bytes differing from the direct reference (%d bytes)", ch.n, len(p.copyRef))
				}
				return nil
			},
		})
	}}
}

// copyInShape: COPY FROM STDIN of the reference text into an empty table;
// the table must then hold exactly the source's rows.
func (p *passthrough) copyInShape() shapeSpec {
	return shapeSpec{Name: "copy-in", Unit: "MB/s", Scale: 1e6, run: func(ctx context.Context, path string) point {
		return p.streamPoint(ctx, path, streamOp{
			prep: func(ctx context.Context) error {
				_, err := p.admin.Exec(ctx, "TRUNCATE bench_copy_dst").ReadAll()
				return err
			},
			op: func(ctx context.Context, c *pgconn.PgConn) (int64, int64, error) {
				tag, err := c.CopyFrom(ctx, bytes.NewReader(p.copyRef), "COPY bench_copy_dst FROM STDIN")
				return int64(len(p.copyRef)), tag.RowsAffected(), err
			},
			check: func() error {
				got, err := p.tableDigest(ctx, "bench_copy_dst")
				if err != nil {
					return fmt.Errorf("oracle: %w", err)
				}
				if got != p.copyDigest {
					return fmt.Errorf("oracle: COPY in left %s, want %s (the source)", got, p.copyDigest)
				}
				return nil
			},
		})
	}}
}

// bigResultShape: a SELECT streaming ~100 MB of 1,000-byte rows.
func (p *passthrough) bigResultShape() shapeSpec {
	sql := fmt.Sprintf("SELECT repeat('x', %d) FROM generate_series(1, %d)", bigRowBytes, p.bigRows)
	return shapeSpec{Name: "large-result", Unit: "MB/s", Scale: 1e6, run: func(ctx context.Context, path string) point {
		var rows, nbytes int64
		return p.streamPoint(ctx, path, streamOp{
			op: func(ctx context.Context, c *pgconn.PgConn) (int64, int64, error) {
				rows, nbytes = 0, 0
				rr := c.ExecParams(ctx, sql, nil, nil, nil, nil)
				for rr.NextRow() {
					rows++
					nbytes += int64(len(rr.Values()[0]))
				}
				_, err := rr.Close()
				return nbytes, rows, err
			},
			check: func() error {
				if rows != int64(p.bigRows) || nbytes != int64(p.bigRows*bigRowBytes) {
					return fmt.Errorf("oracle: large result had %d rows, %d bytes; want %d, %d", rows, nbytes, p.bigRows, p.bigRows*bigRowBytes)
				}
				return nil
			},
		})
	}}
}

// idleResult is the idle-connection memory figure of one forwarder.
type idleResult struct {
	Path        string
	Conns       int
	BaseKB      int64
	AfterKB     int64
	HWMKB       int64
	PerConnKB   float64
	OpenSeconds float64
	Err         error
}

// idleMemory opens N idle connections through a fresh proxy and a fresh
// PgBouncer (fresh, so the baseline is not inflated by what earlier cells
// left in the heap) and reports the RSS growth per connection.
func (p *passthrough) idleMemory(ctx context.Context) []idleResult {
	cfg := p.b.cfg
	var out []idleResult
	fmt.Fprintf(os.Stderr, "\nidle connections: %d through a fresh proxy and a fresh PgBouncer\n", cfg.IdleConns)
	type starter struct {
		path  string
		start func() (*process, error)
	}
	var todo []starter
	if p.procs[pathProxy] != nil {
		todo = append(todo, starter{pathProxy, func() (*process, error) { return p.startProxy(ctx) }})
	}
	if p.procs[pathBouncer] != nil && !cfg.RelayBaseline {
		todo = append(todo, starter{pathBouncer, func() (*process, error) {
			return p.startBouncer(ctx, "pgbouncer-idle", cfg.IdleConns+10)
		}})
	}
	for _, s := range todo {
		r := p.idleOne(ctx, s.path, s.start, cfg.IdleConns)
		fields := map[string]any{
			"scenario": "passthrough", "variant": s.path, "path": s.path, "shape": "idle-connections",
			"rep": 1, "position": 1, "idle_conns": r.Conns, "rss_before_kb": r.BaseKB, "rss_after_kb": r.AfterKB,
			"vm_hwm_kb": r.HWMKB, "kb_per_idle_conn": r.PerConnKB, rssKey(s.path): float64(r.AfterKB) / 1024,
			"open_seconds": r.OpenSeconds,
		}
		if r.Err != nil {
			p.b.fail++
			fields["error"] = r.Err.Error()
			fmt.Fprintf(os.Stderr, "  %-9s FAILED: %v\n", s.path, r.Err)
		} else {
			fmt.Fprintf(os.Stderr, "  %-9s RSS %d → %d kB: %.1f KB per idle connection\n", s.path, r.BaseKB, r.AfterKB, r.PerConnKB)
		}
		p.b.out.emit(fields)
		out = append(out, r)
	}
	return out
}

func (p *passthrough) idleOne(ctx context.Context, path string, start func() (*process, error), n int) idleResult {
	r := idleResult{Path: path, Conns: n, PerConnKB: math.NaN()}
	pr, err := start()
	if err != nil {
		r.Err = err
		return r
	}
	defer pr.Stop()
	time.Sleep(time.Second) // let start-up allocation settle
	if r.BaseKB, err = rssKB(pr.PID); err != nil {
		r.Err = err
		return r
	}
	conns := make([]*pgconn.PgConn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close(context.Background())
			}
		}
	}()
	t0 := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8) // modest: listen backlogs are finite and the box has 2 cores
	for i := range n {
		g.Go(func() error {
			c, err := pgconn.Connect(gctx, pr.DSN())
			if err != nil {
				return fmt.Errorf("connection %d: %w", i+1, err)
			}
			conns[i] = c
			// One query, so each is a used session (in PgBouncer's session
			// mode that also links a server connection, like the proxy).
			_, err = c.Exec(gctx, "SELECT 1").ReadAll()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		r.Err = err
		return r
	}
	r.OpenSeconds = time.Since(t0).Seconds()
	time.Sleep(2 * time.Second) // idle, as the figure says
	st, err := procStatus(pr.PID)
	if err != nil {
		r.Err = err
		return r
	}
	r.AfterKB, r.HWMKB = st["VmRSS"], st["VmHWM"]
	r.PerConnKB = float64(r.AfterKB-r.BaseKB) / float64(n)
	return r
}

func execOutput(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), err
	}
	return string(out), nil
}

// rssKey names the resident-memory field of the forwarding process.
func rssKey(path string) string {
	if path == pathBouncer {
		return "pgbouncer_rss_mb"
	}
	return "proxy_rss_mb"
}
