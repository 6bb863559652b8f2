// Command trellis-bench is the benchmark harness of docs/benchmarks.md (the
// spec in ../shared/spec/benchmarks.md): each benchmark is a scenario
// subcommand. Only B1 (passthrough) exists so far.
//
//	trellis-bench [flags] SCENARIO...
//
// Every measurement point is a JSON line on stdout (and in --out); a table for
// people goes to stderr. The exit code is non-zero only when the harness
// itself failed or a correctness check did, never for a missed goal.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// scenario is one benchmark of the spec.
type scenario struct {
	Name  string
	About string
	Run   func(ctx context.Context, b *bench) error
}

// scenarios are in the order `trellis-bench all` would run them; new
// benchmarks (write-tax, backfill, ...) are added here.
var scenarios = []scenario{
	{Name: "passthrough", About: "B1: what the proxy costs ordinary SQL (pgbench, COPY, idle connections), against direct and PgBouncer", Run: runPassthrough},
	// The engine benchmarks (engine_*.go); `make bench-engine` runs them.
	{Name: "write-tax", About: "B2: single-row and 1000-row writes on a captured table vs the same table without capture", Run: runWriteTax},
	{Name: "group-contention", About: "B6: fold rate into a SUM/COUNT aggregate at 400 and 40,000 groups", Run: runGroupContention},
	{Name: "hop-ladder", About: "B7: commit-to-visible latency of a 1-1 target at ~1,000 writes/s (default intervals)", Run: runHopLadder},
	{Name: "apply-latency", About: "B8 DDL latency: each Trellis statement through the proxy on a 10,000- and a 1,000,000-row source (goal <= 100 ms, no synchronous scan)", Run: runApplyLatency},
	{Name: "poisoned-key", About: "B7 under quarantine: commit-to-visible of other transforms and keys while a held key is rewritten in a tight loop, vs the same cell unpoisoned", Run: runPoisonedKey},
	{Name: "backfill", About: "B8: build of a 1-1 and a 100,000-group target vs CREATE TABLE AS SELECT", Run: runBackfill},
	{Name: "idle-cost", About: "B9: CPU and commits/s of 10 live transforms with no writes", Run: runIdleCost},
	{Name: "memory", About: "B10: Go heap and RSS while draining a large backlog", Run: runMemory},
	{Name: "bulk-drain", About: "issue 18: drain rate of one batch of 100,000, 1,000,000 and 10,000,000 keys (1-1 and 1,000 groups), alone and beside a side writer at 100 commits/s (its p99)", Run: runBulkDrain},
	// The JOIN benchmarks of the joins spec §7 (engine_join_*.go); `make bench-joins`.
	{Name: "join-build", About: "J1: build of a 1-1 and a GROUP BY JOIN target over 1,000,000 facts and two LEFT joins (100,000 and 1,000 dimension rows) vs CREATE TABLE AS of the join (goal <= 2x)", Run: runJoinBuild},
	{Name: "join-latency", About: "J2: commit-to-visible of a dimension update that 1,000 facts read, at 100 dimension updates/s beside 1,000 fact writes/s (goal p50 <= 100 ms, p99 <= 500 ms)", Run: runJoinLatency},
	{Name: "join-write-tax", About: "J3: single-row and 1000-row writes on the dimension and fact tables of a JOIN target vs the same tables without capture (goal >= 0.6x single-row, >= 0.5x 1000-row)", Run: runJoinWriteTax},
	{Name: "join-fanout", About: "J5: cost per root key re-derived through a dimension change (fan-out) vs the same keys changed directly, at 1,000 / 10,000 / 100,000 keys (goal <= 1.5x)", Run: runJoinFanout},
	{Name: "self-check", About: "standard self-check of a 1,000,000-row 1-1 and a 100,000-group target under 500 writes/s, vs EXCEPT ALL; writers' rate during the check (goal >= 0.9x)", Run: runSelfCheckBench},
}

// config is the command line.
type config struct {
	Profile     string
	Quick       bool
	Reps        int
	Duration    time.Duration
	Wait        time.Duration
	Out         string
	Disk        string
	DirectDSN   string
	ProxyDSN    string
	BouncerDSN  string
	ProxyBin    string
	ProxyArgs   string
	PgbenchBin  string
	BouncerBin  string
	RunAs       string
	Scale       int
	Clients     string
	Modes       string
	CopyRows    int
	StreamIters int
	IdleConns   int
	Sampling    float64
	NoProxy     bool
	NoBouncer   bool
	// RelayBaseline puts a second proxy, started with --routing=false, in
	// PgBouncer's place: the routing cost is then the proxy/pgb ratio.
	RelayBaseline bool
	Markdown      bool
}

// bench is what a scenario gets: the configuration and the output.
type bench struct {
	cfg  config
	out  *emitter
	fail int // correctness or harness failures, for the exit code
}

func main() {
	os.Exit(run())
}

func run() int {
	var cfg config
	fs := flag.NewFlagSet("trellis-bench", flag.ContinueOnError)
	fs.StringVar(&cfg.Profile, "profile", "quick", "quick (cells of a few seconds, the whole B1 in ~15 min on 2 cores) or full (60 s cells)")
	fs.BoolVar(&cfg.Quick, "quick", false, "smoke run: 2 s cells, 1 repetition, small COPY and 100 idle connections (checks the harness, figures are meaningless)")
	fs.IntVar(&cfg.Reps, "reps", 0, "repetitions per cell (default: 3; 1 with -quick)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "pgbench duration per cell (default: 5s quick, 60s full, 2s -quick)")
	fs.DurationVar(&cfg.Wait, "wait", time.Second, "pause between cells (the spec says 2s; 1s keeps the run under 15 minutes)")
	fs.StringVar(&cfg.Out, "out", "", "also write the JSON result lines to this file")
	fs.StringVar(&cfg.Disk, "disk", "", "put the cluster under this directory instead of tmpfs (/dev/shm)")
	fs.StringVar(&cfg.DirectDSN, "direct-dsn", "", "use this server instead of starting a cluster (ad hoc runs)")
	fs.StringVar(&cfg.ProxyDSN, "proxy-dsn", "", "use this proxy instead of starting one (no CPU or memory figures)")
	fs.StringVar(&cfg.BouncerDSN, "bouncer-dsn", "", "use this PgBouncer instead of starting one")
	fs.StringVar(&cfg.ProxyBin, "proxy-bin", "bin/trellis-proxy", "the proxy binary under test (make build)")
	fs.StringVar(&cfg.ProxyArgs, "proxy-args", "", "extra flags for the proxy, space separated (engine settings)")
	fs.StringVar(&cfg.PgbenchBin, "pgbench", "", "pgbench binary (default: on PATH or /usr/bin/pgbench)")
	fs.StringVar(&cfg.BouncerBin, "pgbouncer", "", "pgbouncer binary (default: on PATH or /usr/sbin/pgbouncer)")
	fs.StringVar(&cfg.RunAs, "run-as", "postgres", "unprivileged OS user for PgBouncer when running as root")
	fs.IntVar(&cfg.Scale, "scale", 0, "pgbench scale factor (default 20; 5 with -quick)")
	fs.StringVar(&cfg.Clients, "clients", "1,8", "pgbench client counts, comma separated")
	fs.StringVar(&cfg.Modes, "modes", "select-simple,select-extended,select-prepared,tpcb", "pgbench modes, comma separated; also: connect (-C)")
	fs.IntVar(&cfg.CopyRows, "copy-rows", 0, "rows per COPY (default 1000000; 100000 with -quick)")
	fs.IntVar(&cfg.StreamIters, "stream-iters", 0, "COPYs (and large results) per streaming cell, timed together (default 3; 1 with -quick)")
	fs.IntVar(&cfg.IdleConns, "idle-conns", 0, "idle client connections for the memory figure (default 1000; 100 with -quick)")
	fs.Float64Var(&cfg.Sampling, "sampling", 0.1, "share of transactions pgbench logs for latency percentiles (0 turns the log off)")
	fs.BoolVar(&cfg.NoProxy, "no-proxy", false, "leave the proxy out (baselines only)")
	fs.BoolVar(&cfg.Markdown, "markdown", false, "print the result tables as Markdown (for docs/benchmarks.md)")
	fs.BoolVar(&cfg.NoBouncer, "no-pgbouncer", false, "leave PgBouncer out")
	fs.BoolVar(&cfg.RelayBaseline, "relay-baseline", false, "in PgBouncer's column, measure a second proxy started with --routing=false (the relay without routing): proxy/pgb is then the cost of routing")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: trellis-bench [flags] SCENARIO...\n\nscenarios:\n")
		for _, s := range scenarios {
			fmt.Fprintf(fs.Output(), "  %-12s %s\n", s.Name, s.About)
		}
		fmt.Fprintf(fs.Output(), "  %-12s every scenario\n\nflags:\n", "all")
		fs.PrintDefaults()
	}
	// Flags may come before or after the scenario names.
	var names []string
	args := os.Args[1:]
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(names) == 0 {
		fs.Usage()
		return 2
	}
	if err := cfg.defaults(); err != nil {
		fmt.Fprintln(os.Stderr, "trellis-bench:", err)
		return 2
	}
	var todo []scenario
	for _, n := range names {
		if n == "all" {
			todo = append(todo, scenarios...)
			continue
		}
		found := false
		for _, s := range scenarios {
			if s.Name == n {
				todo, found = append(todo, s), true
			}
		}
		if !found {
			fmt.Fprintf(os.Stderr, "trellis-bench: unknown scenario %q (try -h)\n", n)
			return 2
		}
	}

	// Raise the open-files limit to the hard limit: 1,000 idle connections
	// need as many descriptors here and twice that in PgBouncer, which
	// inherits the limit (Go restores the original for children unless it
	// is set explicitly).
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := &bench{cfg: cfg, out: &emitter{ws: []io.Writer{os.Stdout}}}
	if cfg.Out != "" {
		f, err := os.Create(cfg.Out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "trellis-bench:", err)
			return 2
		}
		defer f.Close()
		b.out.ws = append(b.out.ws, f)
	}
	fmt.Fprintf(os.Stderr, "trellis-bench: %d cores, GOMAXPROCS %d. The load generator (pgbench), the proxy, PgBouncer and Postgres all share these cores: absolute figures are indicative only, same-run ratios are the result.\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0))
	for _, s := range todo {
		fmt.Fprintf(os.Stderr, "\n== %s: %s\n", s.Name, s.About)
		if err := s.Run(ctx, b); err != nil {
			fmt.Fprintf(os.Stderr, "trellis-bench: %s: %v\n", s.Name, err)
			return 1
		}
	}
	if b.fail > 0 {
		fmt.Fprintf(os.Stderr, "trellis-bench: %d runs or checks failed (see the error fields)\n", b.fail)
		return 1
	}
	return 0
}

func (c *config) defaults() error {
	switch c.Profile {
	case "quick", "full":
	default:
		return fmt.Errorf("--profile must be quick or full, not %q", c.Profile)
	}
	pick := func(v *int, quick, normal int) {
		if *v == 0 {
			*v = normal
			if c.Quick {
				*v = quick
			}
		}
	}
	pick(&c.Reps, 1, 3)
	pick(&c.Scale, 5, 20)
	pick(&c.CopyRows, 100_000, 1_000_000)
	pick(&c.IdleConns, 100, 1000)
	pick(&c.StreamIters, 1, 3)
	if c.Duration == 0 {
		switch {
		case c.Quick:
			c.Duration = 2 * time.Second
		case c.Profile == "full":
			c.Duration = 60 * time.Second
		default:
			c.Duration = 5 * time.Second
		}
	}
	if c.Duration < time.Second {
		return errors.New("--duration must be at least 1s (pgbench -T counts seconds)")
	}
	if _, err := c.clientList(); err != nil {
		return err
	}
	if _, err := c.modeList(); err != nil {
		return err
	}
	return nil
}

func (c *config) clientList() ([]int, error) {
	var out []int
	for _, f := range strings.Split(c.Clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--clients: bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func (c *config) modeList() ([]pgbenchMode, error) {
	var out []pgbenchMode
	for _, f := range strings.Split(c.Modes, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		m, ok := modeByName(f)
		if !ok {
			return nil, fmt.Errorf("--modes: unknown mode %q", f)
		}
		out = append(out, m)
	}
	return out, nil
}
