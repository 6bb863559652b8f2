// Command trellis-clients runs real client suites twice, directly against a
// throwaway PostgreSQL cluster and through trellis-proxy in front of it, and
// prints pass/fail/skip counts per suite with the tests that fail only
// through the proxy (issue 19: "indistinguishable from Postgres for every
// real client"). `make clients` runs it after scripts/clients/install.sh;
// docs/clients.md records its figures.
//
//	trellis-clients [-suites pgx,pq,node,jdbc,psycopg] [-proxy-bin bin/trellis-proxy]
//
// The suites: pgx v5's own tests (its module source from the module cache),
// lib/pq's own tests, and the scenario programs of scripts/clients (node-postgres
// and postgres.js, pgJDBC, psycopg 3), which print one "PASS|FAIL|SKIP name"
// line per case. Exit status is non-zero only when the harness itself failed,
// never for a failing client test: the counts are the result.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

type config struct {
	Suites   string
	ProxyBin string
	Repo     string
	Out      string
	Keep     bool
	PgxRun   string
	PgxPkgs  string
	PqRun    string
	Timeout  time.Duration
	Paths    string
	Serve    bool
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("trellis-clients", flag.ExitOnError)
	fs.StringVar(&cfg.Suites, "suites", "pgx,pgx-trellis,pq,node,jdbc,psycopg", "comma-separated suites to run")
	fs.StringVar(&cfg.Paths, "paths", "direct,proxy", "which paths to run each suite on")
	fs.StringVar(&cfg.ProxyBin, "proxy-bin", "bin/trellis-proxy", "the proxy binary under test (make build)")
	fs.StringVar(&cfg.Repo, "repo", ".", "the repository root (scripts/clients lives there)")
	fs.StringVar(&cfg.Out, "out", "", "also write every test's result per path as JSON here")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the scratch directory (logs, suite copies)")
	fs.StringVar(&cfg.PgxRun, "pgx-run", "", "go test -run for the pgx suite (empty: all)")
	fs.StringVar(&cfg.PgxPkgs, "pgx-pkgs", "./...", "packages of pgx to test")
	fs.StringVar(&cfg.PqRun, "pq-run", "", "go test -run for the lib/pq suite (empty: all)")
	fs.DurationVar(&cfg.Timeout, "timeout", 25*time.Minute, "limit for one suite on one path")
	fs.BoolVar(&cfg.Serve, "serve", false, "start the cluster and the proxy, print their addresses and wait for a signal (to run one client by hand)")
	fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "trellis-clients:", err)
		os.Exit(1)
	}
}

// env is what every suite needs to reach one path.
type env struct {
	Path     string // "direct" or "proxy"
	Host     string
	Port     int
	Scratch  string
	Repo     string
	ProxyLog string
}

// suite runs once per path and returns each test's final status.
type suite struct {
	Name  string
	About string
	Prep  func(ctx context.Context, r *runner) error // once, before both paths
	Run   func(ctx context.Context, r *runner, e env) (map[string]string, error)
}

type runner struct {
	cfg     config
	scratch string
	cluster *pgcluster.Cluster
	proxy   *proxyProc
	pgxDir  string
	pqDir   string
	pqVer   string
	pgxVer  string
	// why collects, for the suite and path running, a failing test's
	// first lines of output (the report shows them for proxy-only failures).
	why map[string]string
}

func run(ctx context.Context, cfg config) error {
	repo, err := filepath.Abs(cfg.Repo)
	if err != nil {
		return err
	}
	cfg.Repo = repo
	if !filepath.IsAbs(cfg.ProxyBin) {
		cfg.ProxyBin = filepath.Join(repo, cfg.ProxyBin)
	}
	if _, err := os.Stat(cfg.ProxyBin); err != nil {
		return fmt.Errorf("no proxy binary at %s (make build): %w", cfg.ProxyBin, err)
	}
	r := &runner{cfg: cfg}
	if r.scratch, err = os.MkdirTemp("", "trellis-clients-"); err != nil {
		return err
	}
	// The cluster runs as an unprivileged user when we are root; it must
	// reach its data directory below the scratch directory.
	os.Chmod(r.scratch, 0o755)
	if cfg.Keep {
		fmt.Fprintf(os.Stderr, "scratch directory kept: %s\n", r.scratch)
	} else {
		defer os.RemoveAll(r.scratch)
	}

	fmt.Fprintf(os.Stderr, "starting a throwaway cluster\n")
	r.cluster, err = pgcluster.Start(ctx, pgcluster.Options{
		DataDir: filepath.Join(r.scratch, "pgdata"),
		Fast:    true,
		// pgx's and lib/pq's suites open many connections at once, and
		// the proxy holds a backend per client plus its own pool.
		Settings: map[string]string{"max_connections": "300"},
		Log:      nil,
	})
	if err != nil {
		return err
	}
	defer r.cluster.Stop()
	if err := r.setupCluster(ctx); err != nil {
		return fmt.Errorf("preparing the cluster: %w", err)
	}

	r.proxy, err = startProxy(ctx, cfg.ProxyBin, r.cluster.URL("postgres"), r.scratch)
	if err != nil {
		return err
	}
	defer func() { r.proxy.stop() }()

	if cfg.Serve {
		fmt.Printf("direct: %s\nproxy:  postgres://postgres@%s/postgres?sslmode=disable\nproxy log: %s\n", r.cluster.URL("postgres"), r.proxy.addr, r.proxy.log)
		<-ctx.Done()
		return nil
	}

	all := map[string]suite{}
	var order []string
	for _, s := range suites() {
		all[s.Name] = s
		order = append(order, s.Name)
	}
	var chosen []suite
	for _, n := range strings.Split(cfg.Suites, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		s, ok := all[n]
		if !ok {
			return fmt.Errorf("unknown suite %q (have %s)", n, strings.Join(order, ", "))
		}
		chosen = append(chosen, s)
	}
	paths := strings.Split(cfg.Paths, ",")

	results := map[string]map[string]map[string]string{} // suite -> path -> test -> status
	durations := map[string]map[string]time.Duration{}
	errs := map[string]map[string]string{}
	whys := map[string]map[string]map[string]string{}
	for _, s := range chosen {
		if s.Prep != nil {
			if err := s.Prep(ctx, r); err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
		}
		results[s.Name] = map[string]map[string]string{}
		durations[s.Name] = map[string]time.Duration{}
		errs[s.Name] = map[string]string{}
		whys[s.Name] = map[string]map[string]string{}
		for _, p := range paths {
			e, err := r.env(ctx, p)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "== %s %s\n", s.Name, p)
			sctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			t0 := time.Now()
			r.why = map[string]string{}
			whys[s.Name][p] = r.why
			res, err := s.Run(sctx, r, e)
			cancel()
			durations[s.Name][p] = time.Since(t0)
			if err != nil {
				errs[s.Name][p] = err.Error()
				fmt.Fprintf(os.Stderr, "   %s on %s: %v\n", s.Name, p, err)
			}
			results[s.Name][p] = res
			c := count(res)
			fmt.Fprintf(os.Stderr, "   %d pass, %d fail, %d skip in %s\n", c["pass"], c["fail"], c["skip"], durations[s.Name][p].Round(time.Second))
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}

	report(os.Stdout, r, chosen, paths, results, durations, errs, whys)
	if cfg.Out != "" {
		b, _ := json.MarshalIndent(map[string]any{"results": results, "errors": errs, "why": whys, "pgx": r.pgxVer, "pq": r.pqVer}, "", "  ")
		if err := os.WriteFile(cfg.Out, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// env gives the address of one path, restarting the proxy first if an
// earlier suite left it dead (reported: a crash is a finding).
func (r *runner) env(ctx context.Context, path string) (env, error) {
	e := env{Path: path, Scratch: r.scratch, Repo: r.cfg.Repo}
	switch path {
	case "direct":
		e.Host, e.Port = "127.0.0.1", r.cluster.Port
	case "proxy":
		if err := r.proxy.alive(); err != nil {
			fmt.Fprintf(os.Stderr, "WARNING: the proxy died (%v); log tail:\n%s\nrestarting it\n", err, tail(r.proxy.log, 20))
			p, err := startProxy(ctx, r.cfg.ProxyBin, r.cluster.URL("postgres"), r.scratch)
			if err != nil {
				return e, err
			}
			r.proxy = p
		}
		host, port, _ := net.SplitHostPort(r.proxy.addr)
		e.Host = host
		e.Port, _ = strconv.Atoi(port)
		e.ProxyLog = r.proxy.log
	default:
		return e, fmt.Errorf("unknown path %q (direct or proxy)", path)
	}
	return e, nil
}

// setupCluster creates what the suites' CI setups create: pgx's
// testsetup/postgresql_setup.sql and lib/pq's testdata/postgres, minus TLS,
// and a pg_hba.conf with their password users (so auth relay is exercised
// through the proxy too).
func (r *runner) setupCluster(ctx context.Context) error {
	conn, err := pgconn.Connect(ctx, r.cluster.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	execAll := func(c *pgconn.PgConn, sql string) error {
		_, err := c.Exec(ctx, sql).ReadAll()
		return err
	}
	// CREATE DATABASE refuses the implicit transaction of a multi-statement
	// Query.
	for _, q := range []string{`CREATE DATABASE pgx_test`, `CREATE ROLE pqgo SUPERUSER LOGIN`, `CREATE DATABASE pqgo OWNER pqgo`} {
		if err := execAll(conn, q); err != nil {
			return err
		}
	}
	if err := execAll(conn, `
		CREATE ROLE pgx_ssl SUPERUSER LOGIN PASSWORD 'secret';
		CREATE ROLE pgx_sslcert SUPERUSER LOGIN PASSWORD 'secret';
		SET password_encryption = md5;
		CREATE ROLE pgx_md5 SUPERUSER LOGIN PASSWORD 'secret';
		SET password_encryption = 'scram-sha-256';
		CREATE ROLE pgx_pw SUPERUSER LOGIN PASSWORD 'secret';
		CREATE ROLE pgx_scram SUPERUSER LOGIN PASSWORD 'secret';
		CREATE ROLE pgx_oauth SUPERUSER LOGIN;
		CREATE ROLE " tricky, ' } "" \ test user " SUPERUSER LOGIN PASSWORD 'secret';
		CREATE ROLE pqgossl LOGIN;
		CREATE ROLE pqgosslcert LOGIN;
		CREATE ROLE pqgopassword LOGIN PASSWORD 'wordpass';
		CREATE ROLE pqgoscram LOGIN PASSWORD 'wordpass';
		CREATE ROLE pqgomd5 LOGIN PASSWORD 'wordpass';
		UPDATE pg_authid SET rolpassword = 'md5' || md5('wordpasspqgomd5') WHERE rolname = 'pqgomd5';
		CREATE ROLE root SUPERUSER LOGIN;`); err != nil {
		return err
	}
	for _, db := range []string{"pgx_test", "pqgo"} {
		c, err := pgconn.Connect(ctx, r.cluster.URL(db))
		if err != nil {
			return err
		}
		err = execAll(c, `CREATE EXTENSION hstore; CREATE EXTENSION ltree; CREATE DOMAIN uint64 AS numeric(20,0);`)
		c.Close(context.Background())
		if err != nil {
			return fmt.Errorf("%s: %w", db, err)
		}
	}
	hba := `# written by trellis-clients: the password users of pgx's and lib/pq's setups
local all all                         trust
host  all pgx_md5      127.0.0.1/32   md5
host  all pgx_pw       127.0.0.1/32   password
host  all pgx_scram    127.0.0.1/32   scram-sha-256
host  all pqgomd5      127.0.0.1/32   md5
host  all pqgopassword 127.0.0.1/32   password
host  all pqgoscram    127.0.0.1/32   scram-sha-256
host  all all          127.0.0.1/32   trust
host  all all          ::1/128        trust
`
	// Overwriting keeps the file's owner (the cluster's OS user).
	if err := os.WriteFile(filepath.Join(r.cluster.DataDir, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return err
	}
	return execAll(conn, `SELECT pg_reload_conf()`)
}

// proxyProc is the proxy under test, started as a separate process the way
// a user runs it.
type proxyProc struct {
	addr    string
	log     string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

func startProxy(ctx context.Context, bin, upstream, dir string) (*proxyProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, fmt.Sprintf("proxy-%d.log", time.Now().UnixNano()))
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--listen", addr, "--upstream", upstream, "--log-level", "warn", "--shutdown-grace", "5s")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C aimed at the runner must not kill it
	// before the runner stops it in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proxyProc{addr: addr, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := p.alive(); err != nil {
			return nil, fmt.Errorf("proxy exited at startup: %v\n%s", err, tail(logPath, 20))
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgconn.Connect(cctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
		cancel()
		if err == nil {
			// The catalog is migrated before the listener opens; a
			// status read proves the engine answers.
			_, err = conn.Exec(ctx, "SELECT count(*) FROM trellis.status").ReadAll()
			conn.Close(ctx)
			if err == nil {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("proxy not ready within 60s: %v\n%s", err, tail(logPath, 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (p *proxyProc) alive() error {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return errors.New("exited with status 0")
		}
		return p.waitErr
	default:
		return nil
	}
}

func (p *proxyProc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// command runs a suite's process in its own process group, so a timeout
// also ends the test binaries `go test` started.
func command(ctx context.Context, dir string, extraEnv []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// goTestJSON runs `go test -json` and folds its events into each test's final
// status, named package-relative ("pgconn.TestConnect/sub"). A package that
// fails to build or panics outside a test counts as one failure.
func goTestJSON(ctx context.Context, dir, module string, extraEnv []string, logPath string, why map[string]string, args ...string) (map[string]string, error) {
	cmd := command(ctx, dir, extraEnv, "go", append([]string{"test", "-json"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// The module's root package is named by its last element ("v5" is
	// pgx's major version, so the element before it).
	rootName := filepath.Base(module)
	if strings.HasPrefix(rootName, "v") && len(rootName) <= 3 {
		rootName = filepath.Base(filepath.Dir(module))
	}
	res := map[string]string{}
	pkgFailed := map[string]bool{}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		logf.Write(line)
		logf.Write([]byte{'\n'})
		var ev struct {
			Action, Package, Test, Output string
		}
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(ev.Package, module), "/")
		if pkg == "" {
			pkg = rootName
		}
		switch ev.Action {
		case "output":
			if ev.Test == "" {
				continue
			}
			o := strings.TrimSpace(ev.Output)
			if o == "" || strings.HasPrefix(o, "=== ") || strings.HasPrefix(o, "--- ") {
				continue
			}
			name := pkg + "." + ev.Test
			if len(why[name]) < 300 {
				why[name] = strings.TrimSpace(why[name] + " " + o)
			}
		case "pass", "fail", "skip":
			if ev.Test == "" {
				pkgFailed[pkg] = ev.Action == "fail"
				continue
			}
			res[pkg+"."+ev.Test] = ev.Action
		}
	}
	werr := cmd.Wait()
	// A failed package with no failed test in it: a build failure, a
	// panic or a timeout; count it so it cannot hide.
	for pkg, failed := range pkgFailed {
		if !failed {
			continue
		}
		any := false
		for name, st := range res {
			if st == "fail" && strings.HasPrefix(name, pkg+".") {
				any = true
				break
			}
		}
		if !any {
			res[pkg+".(package)"] = "fail"
		}
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("timed out: %w", ctx.Err())
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return res, werr
	}
	return res, nil
}

// scenarioLines runs a scenario program that prints "PASS name",
// "FAIL name: why" or "SKIP name: why" lines; anything else is logged.
func scenarioLines(ctx context.Context, dir string, extraEnv []string, logPath string, name string, args ...string) (map[string]string, map[string]string, error) {
	cmd := command(ctx, dir, extraEnv, name, args...)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	defer logf.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	res, why := map[string]string{}, map[string]string{}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logf, line)
		verb, rest, _ := strings.Cut(line, " ")
		status := map[string]string{"PASS": "pass", "FAIL": "fail", "SKIP": "skip"}[verb]
		if status == "" {
			continue
		}
		name, reason, _ := strings.Cut(rest, ": ")
		res[name] = status
		if reason != "" {
			why[name] = reason
		}
	}
	werr := cmd.Wait()
	if ctx.Err() != nil {
		return res, why, fmt.Errorf("timed out: %w", ctx.Err())
	}
	if werr != nil {
		return res, why, fmt.Errorf("%s: %v (log %s: %s)", name, werr, logPath, tail(logPath, 5))
	}
	return res, why, nil
}

func count(res map[string]string) map[string]int {
	c := map[string]int{}
	for _, st := range res {
		c[st]++
	}
	return c
}

// report prints the table of counts and, per suite, the tests that fail only
// through the proxy (and, for honesty about flakiness, only directly).
func report(w io.Writer, r *runner, chosen []suite, paths []string, results map[string]map[string]map[string]string, durations map[string]map[string]time.Duration, errs map[string]map[string]string, whys map[string]map[string]map[string]string) {
	fmt.Fprintf(w, "\ntrellis-clients %s, PostgreSQL %d, proxy %s, pgx %s, lib/pq %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), r.cluster.Version, gitCommit(r.cfg.Repo), r.pgxVer, r.pqVer)
	fmt.Fprintf(w, "| suite | path | pass | fail | skip | time |\n|---|---|---:|---:|---:|---:|\n")
	for _, s := range chosen {
		for _, p := range paths {
			c := count(results[s.Name][p])
			note := ""
			if e := errs[s.Name][p]; e != "" {
				note = " (" + firstLine(e) + ")"
			}
			fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %s%s |\n", s.Name, p, c["pass"], c["fail"], c["skip"], durations[s.Name][p].Round(time.Second), note)
		}
	}
	if len(paths) < 2 {
		return
	}
	for _, s := range chosen {
		d, p := results[s.Name]["direct"], results[s.Name]["proxy"]
		var proxyOnly, directOnly, both []string
		for name, st := range p {
			if st != "fail" {
				continue
			}
			switch d[name] {
			case "fail":
				both = append(both, name)
			case "pass":
				proxyOnly = append(proxyOnly, name)
			default: // skipped or absent directly (e.g. a Trellis case)
				proxyOnly = append(proxyOnly, name+" (not run directly)")
			}
		}
		for name, st := range d {
			if st == "fail" && p[name] != "fail" {
				directOnly = append(directOnly, name)
			}
		}
		sort.Strings(proxyOnly)
		sort.Strings(directOnly)
		sort.Strings(both)
		fmt.Fprintf(w, "\n%s: %d fail only through the proxy, %d only directly, %d on both\n", s.Name, len(proxyOnly), len(directOnly), len(both))
		for _, n := range proxyOnly {
			fmt.Fprintf(w, "  proxy only:  %s\n", n)
			if y := whys[s.Name]["proxy"][strings.TrimSuffix(n, " (not run directly)")]; y != "" {
				fmt.Fprintf(w, "               %s\n", firstLine(y))
			}
		}
		for _, n := range directOnly {
			fmt.Fprintf(w, "  direct only: %s\n", n)
		}
		for _, n := range both {
			fmt.Fprintf(w, "  both:        %s\n", n)
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	if len(l) > 160 {
		l = l[:160] + "…"
	}
	return l
}

func gitCommit(repo string) string {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--", "wire", "cmd/trellis-proxy", "internal", "router", "grammar", "engine", "sqlscan", "pgerr", "virtualtables").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "-dirty"
	}
	return c
}
