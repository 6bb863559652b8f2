package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

func suites() []suite {
	return []suite{
		{Name: "pgx", About: "pgx v5's own go test ./... (the version in go.mod)", Prep: prepPgx, Run: runPgx},
		{Name: "pgx-trellis", About: "Trellis statements through pgx: every query exec mode, batches alone and mixed, transactions (in-process)", Run: runPgxTrellis},
		{Name: "pq", About: "lib/pq's own go test ./... (latest from the module proxy)", Prep: prepPq, Run: runPq},
		{Name: "node", About: "node-postgres and postgres.js scenarios (scripts/clients/node)", Run: runNode},
		{Name: "jdbc", About: "a pgJDBC program (scripts/clients/jdbc, Debian's postgresql.jar)", Run: runJdbc},
		{Name: "psycopg", About: "psycopg 3 scenarios, pipelines included (scripts/clients/psycopg)", Run: runPsycopg},
	}
}

// moduleSource downloads a module through the module proxy and copies its
// source out of the read-only module cache, where `go test` cannot write.
func (r *runner) moduleSource(ctx context.Context, mod, version, name string) (dir, ver string, err error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod+"@"+version)
	cmd.Dir = r.scratch // outside any module: an explicit version is enough
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("go mod download %s@%s: %w", mod, version, err)
	}
	var info struct{ Version, Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		return "", "", fmt.Errorf("go mod download %s@%s: %s %v", mod, version, info.Error, err)
	}
	// A fixed place per version, so later runs reuse the copy and the
	// build cache (test binaries are keyed by their source paths).
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = r.scratch
	}
	dir = filepath.Join(cache, "trellis-clients", name+"@"+info.Version)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		os.RemoveAll(dir)
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return "", "", err
		}
		if out, err := exec.CommandContext(ctx, "cp", "-r", info.Dir, dir).CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("copying %s: %v %s", info.Dir, err, out)
		}
		if out, err := exec.CommandContext(ctx, "chmod", "-R", "u+w", dir).CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("chmod %s: %v %s", dir, err, out)
		}
		if err := os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644); err != nil {
			return "", "", err
		}
	}
	// Fetch the suite's own dependencies before the timed runs.
	dl := exec.CommandContext(ctx, "go", "mod", "download")
	dl.Dir = dir
	if out, err := dl.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go mod download in %s: %v %s", dir, err, out)
	}
	return dir, info.Version, nil
}

// goModVersion is the version of mod this repository requires.
func (r *runner) goModVersion(ctx context.Context, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", mod)
	cmd.Dir = r.cfg.Repo
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", mod, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func prepPgx(ctx context.Context, r *runner) error {
	v, err := r.goModVersion(ctx, "github.com/jackc/pgx/v5")
	if err != nil {
		return err
	}
	r.pgxDir, r.pgxVer, err = r.moduleSource(ctx, "github.com/jackc/pgx/v5", v, "pgx")
	if err != nil {
		return err
	}
	// Build the test binaries once, so neither timed run pays for it.
	vet := exec.CommandContext(ctx, "go", "test", "-count=1", "-exec", "/bin/true", r.cfg.PgxPkgs)
	vet.Dir = r.pgxDir
	if out, err := vet.CombinedOutput(); err != nil {
		return fmt.Errorf("building pgx's tests: %v\n%s", err, out)
	}
	return nil
}

// runPgx points every PGX_TEST_* variable that needs no server TLS, no Unix
// socket of the proxy and no replication at the path: the main database,
// plain TCP, and the md5, cleartext and SCRAM password users (auth relay).
func runPgx(ctx context.Context, r *runner, e env) (map[string]string, error) {
	base := fmt.Sprintf("host=%s port=%d dbname=pgx_test sslmode=disable", e.Host, e.Port)
	vars := []string{
		"PGX_TEST_DATABASE=" + base + " user=postgres",
		"PGX_TEST_TCP_CONN_STRING=" + base + " user=postgres",
		"PGX_TEST_MD5_PASSWORD_CONN_STRING=" + base + " user=pgx_md5 password=secret",
		"PGX_TEST_PLAIN_PASSWORD_CONN_STRING=" + base + " user=pgx_pw password=secret",
		"PGX_TEST_SCRAM_PASSWORD_CONN_STRING=" + base + " user=pgx_scram password=secret channel_binding=disable",
		"PGX_TEST_UNIX_SOCKET_CONN_STRING=", "PGX_TEST_TLS_CONN_STRING=", "PGX_TEST_TLS_CLIENT_CONN_STRING=",
		"PGX_TEST_SCRAM_PLUS_CONN_STRING=", "PGX_TEST_PGBOUNCER_CONN_STRING=", "PGX_TEST_OAUTH_CONN_STRING=",
		"PGHOST=" + e.Host, "PGPORT=" + strconv.Itoa(e.Port), "PGUSER=postgres", "PGDATABASE=pgx_test", "PGSSLMODE=disable",
	}
	args := []string{"-count=1", "-p", "2", "-timeout", "20m"}
	if r.cfg.PgxRun != "" {
		args = append(args, "-run", r.cfg.PgxRun)
	}
	args = append(args, strings.Fields(r.cfg.PgxPkgs)...)
	return goTestJSON(ctx, r.pgxDir, "github.com/jackc/pgx/v5", vars, filepath.Join(e.Scratch, "pgx-"+e.Path+".jsonl"), r.why, args...)
}

func prepPq(ctx context.Context, r *runner) error {
	var err error
	r.pqDir, r.pqVer, err = r.moduleSource(ctx, "github.com/lib/pq", "latest", "pq")
	if err != nil {
		return err
	}
	b := exec.CommandContext(ctx, "go", "test", "-count=1", "-exec", "/bin/true", "./...")
	b.Dir = r.pqDir
	if out, err := b.CombinedOutput(); err != nil {
		return fmt.Errorf("building lib/pq's tests: %v\n%s", err, out)
	}
	return nil
}

// runPq runs lib/pq's suite as its CI does against a plain server, minus its
// TLS tests (the server here has no certificates; left out on both paths).
// PGPORT is never 6432 or 7432, which the suite reads as PgBouncer/pgpool.
func runPq(ctx context.Context, r *runner, e env) (map[string]string, error) {
	// localhost, not 127.0.0.1: the suite compares parsed settings with
	// the default host.
	vars := []string{"PGHOST=localhost", "PGPORT=" + strconv.Itoa(e.Port), "PGUSER=pqgo", "PGDATABASE=pqgo", "PGSSLMODE=disable", "PQTEST_BINARY_PARAMETERS=no"}
	// The examples dial localhost:5432 or the host "postgres" (CI's
	// /etc/hosts) and log.Fatal, which would end the package before
	// TestMain's leaked-connection check; CI's cockroach job skips them too.
	args := []string{"-count=1", "-p", "2", "-timeout", "15m", "-skip", "^TestSSL|^Example"}
	if r.cfg.PqRun != "" {
		args = append(args, "-run", r.cfg.PqRun)
	}
	args = append(args, "./...")
	return goTestJSON(ctx, r.pqDir, "github.com/lib/pq", vars, filepath.Join(e.Scratch, "pq-"+e.Path+".jsonl"), r.why, args...)
}

// scenarioEnv is what the scenario programs read: where to connect, which
// path this is (Trellis cases run only through the proxy), and a tag that
// keeps the two runs' tables apart.
func scenarioEnv(e env) []string {
	return []string{"PGHOST=" + e.Host, "PGPORT=" + strconv.Itoa(e.Port), "PGUSER=postgres", "PGDATABASE=postgres", "PGSSLMODE=disable",
		"CLIENTS_PATH=" + e.Path, "CLIENTS_TAG=" + e.Path[:1]}
}

func runNode(ctx context.Context, r *runner, e env) (map[string]string, error) {
	dir := filepath.Join(r.cfg.Repo, "scripts", "clients", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "pg")); err != nil {
		return nil, fmt.Errorf("node modules missing: run scripts/clients/install.sh")
	}
	res, why, err := scenarioLines(ctx, dir, scenarioEnv(e), filepath.Join(e.Scratch, "node-"+e.Path+".log"), "node", "scenarios.mjs")
	for k, v := range why {
		r.why[k] = v
	}
	return res, err
}

func runJdbc(ctx context.Context, r *runner, e env) (map[string]string, error) {
	const jar = "/usr/share/java/postgresql.jar"
	src := filepath.Join(r.cfg.Repo, "scripts", "clients", "jdbc", "Clients.java")
	classes := filepath.Join(e.Scratch, "jdbc-classes")
	if err := os.MkdirAll(classes, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "javac", "-cp", jar, "-d", classes, src).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("javac: %v\n%s", err, out)
	}
	res, why, err := scenarioLines(ctx, e.Scratch, scenarioEnv(e), filepath.Join(e.Scratch, "jdbc-"+e.Path+".log"), "java", "-cp", classes+":"+jar, "Clients")
	for k, v := range why {
		r.why[k] = v
	}
	return res, err
}

func runPsycopg(ctx context.Context, r *runner, e env) (map[string]string, error) {
	// Debian's python3-psycopg is importable by Debian's interpreter, not
	// necessarily by the python3 first on PATH (pyenv and the like).
	script := filepath.Join(r.cfg.Repo, "scripts", "clients", "psycopg", "scenarios.py")
	res, why, err := scenarioLines(ctx, e.Scratch, scenarioEnv(e), filepath.Join(e.Scratch, "psycopg-"+e.Path+".log"), "/usr/bin/python3", script)
	for k, v := range why {
		r.why[k] = v
	}
	return res, err
}
