// Package pgcluster starts and stops private PostgreSQL clusters from the
// system's PostgreSQL binaries: the embedded default of trellis-proxy (D12) and
// the throwaway clusters of the tests and benchmarks.
//
// Postgres refuses to run as root, so when the process is root the cluster's
// data directory is owned by, and initdb and postgres run as, an unprivileged
// OS user (Options.RunAs).
package pgcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options describe the cluster to start.
type Options struct {
	// DataDir is the data directory. Empty means a fresh temporary directory
	// removed by Stop. An existing initialised directory is reused.
	DataDir string
	// BinDir holds initdb and postgres; empty means FindBinDir("").
	BinDir string
	// RunAs is the OS user that runs the cluster when this process is root.
	// Empty means "postgres" if that user exists, else "nobody".
	RunAs string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one; -1 listens on the
	// Unix socket only (the embedded default: no port to collide with).
	Port int
	// Password, when set, is the superuser's password and host connections
	// use scram-sha-256; empty means trust.
	Password string
	// Fast turns off durability (fsync, full_page_writes, synchronous_commit):
	// for throwaway test clusters only.
	Fast bool
	// Settings are extra postgresql.conf parameters passed on the command line.
	Settings map[string]string
	// Log receives the server's stderr; nil discards it (it is also kept in
	// DataDir/postgres.log for the embedded default).
	Log io.Writer
}

// Cluster is a running cluster.
type Cluster struct {
	DataDir   string
	SocketDir string
	Port      int    // 5432-style port number; also names the Unix socket
	TCP       bool   // whether it listens on 127.0.0.1:Port
	Version   int    // major version, e.g. 15
	BinDir    string // where its binaries were found
	Password  string // superuser password, empty for trust
	Reused    bool   // an already running postmaster was adopted

	cmd     *exec.Cmd
	pid     int
	temp    bool
	stopped bool
	done    chan struct{}
}

// Superuser is the cluster's superuser role (initdb -U).
const Superuser = "postgres"

// FindBinDir returns the directory holding initdb, pg_ctl and postgres,
// version 15 or later, highest first: explicit; pg_config --bindir on PATH;
// initdb on PATH; /usr/lib/postgresql/<N>/bin; /usr/pgsql-<N>/bin; Homebrew.
func FindBinDir(explicit string) (string, error) {
	if explicit != "" {
		if !isFile(filepath.Join(explicit, "initdb")) {
			return "", fmt.Errorf("no initdb in --pg-bin %s", explicit)
		}
		return explicit, nil
	}
	var candidates []string
	if pgc, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.Command(pgc, "--bindir").Output(); err == nil {
			candidates = append(candidates, strings.TrimSpace(string(out)))
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, filepath.Dir(real))
		}
		candidates = append(candidates, filepath.Dir(p))
	}
	var versioned []string
	for _, pattern := range []string{
		"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin",
		"/opt/homebrew/opt/postgresql@*/bin", "/usr/local/opt/postgresql@*/bin",
	} {
		m, _ := filepath.Glob(pattern)
		versioned = append(versioned, m...)
	}
	sort.Slice(versioned, func(i, j int) bool { return dirVersion(versioned[i]) > dirVersion(versioned[j]) })
	candidates = append(candidates, versioned...)
	for _, dir := range candidates {
		if dir == "" || !isFile(filepath.Join(dir, "initdb")) || !isFile(filepath.Join(dir, "postgres")) {
			continue
		}
		if v, err := binVersion(dir); err == nil && v >= 15 {
			return dir, nil
		}
	}
	return "", errors.New("no PostgreSQL 15+ server binaries found (looked for initdb on PATH and under /usr/lib/postgresql/*/bin); install them, e.g. `apt-get install postgresql`, or pass --pg-bin")
}

func dirVersion(dir string) int {
	for _, part := range strings.FieldsFunc(dir, func(r rune) bool { return r < '0' || r > '9' }) {
		if n, err := strconv.Atoi(part); err == nil {
			return n
		}
	}
	return 0
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// binVersion runs `postgres --version` and returns the major version.
func binVersion(dir string) (int, error) {
	out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return 0, err
	}
	// "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
	fields := strings.Fields(string(out))
	for _, f := range fields {
		if f != "" && f[0] >= '0' && f[0] <= '9' {
			major, _, _ := strings.Cut(f, ".")
			return strconv.Atoi(major)
		}
	}
	return 0, fmt.Errorf("cannot read version from %q", out)
}

// Start initialises (when needed) and starts a cluster, waiting until it
// accepts connections.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := FindBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	version, err := binVersion(bin)
	if err != nil {
		return nil, fmt.Errorf("reading PostgreSQL version in %s: %w", bin, err)
	}
	cred, err := credential(opts.RunAs)
	if err != nil {
		return nil, err
	}
	c := &Cluster{BinDir: bin, Version: version, Password: opts.Password, done: make(chan struct{})}
	if opts.DataDir == "" {
		dir, err := os.MkdirTemp("", "pgcluster-")
		if err != nil {
			return nil, err
		}
		c.DataDir, c.temp = dir, true
	} else {
		abs, err := filepath.Abs(opts.DataDir)
		if err != nil {
			return nil, err
		}
		c.DataDir = abs
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return nil, fmt.Errorf("creating data directory: %w", err)
		}
	}
	c.SocketDir = c.DataDir
	if err := chownTree(c.DataDir, cred); err != nil {
		return nil, err
	}
	fail := func(err error) (*Cluster, error) {
		if c.temp {
			os.RemoveAll(c.DataDir)
		}
		return nil, err
	}

	if !isFile(filepath.Join(c.DataDir, "PG_VERSION")) {
		if err := c.initdb(ctx, cred, opts); err != nil {
			return fail(err)
		}
	}
	if pid, port, ok := runningPostmaster(c.DataDir); ok {
		// A proxy killed with -9 leaves its cluster running: adopt it.
		c.pid, c.Port, c.Reused = pid, port, true
		c.TCP = opts.Port >= 0
		close(c.done)
		return c, c.waitReady(ctx, nil)
	}

	c.Port = opts.Port
	switch {
	case opts.Port == 0:
		if c.Port, err = freePort(); err != nil {
			return fail(err)
		}
		c.TCP = true
	case opts.Port < 0:
		// Unix socket only; the port number still names the socket file.
		c.Port = 5432
	default:
		c.TCP = true
	}
	if err := c.startPostgres(ctx, cred, opts); err != nil {
		return fail(err)
	}
	return c, nil
}

func (c *Cluster) initdb(ctx context.Context, cred *syscall.Credential, opts Options) error {
	args := []string{"-D", c.DataDir, "-U", Superuser, "--encoding=UTF8", "--locale=C", "--no-instructions"}
	if opts.Fast {
		args = append(args, "--no-sync")
	}
	if opts.Password != "" {
		// initdb wants an empty data directory, so the password file lives beside it.
		pwdir, err := os.MkdirTemp("", "pgcluster-pw-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(pwdir)
		pwfile := filepath.Join(pwdir, "pw")
		if err := os.WriteFile(pwfile, []byte(opts.Password+"\n"), 0o600); err != nil {
			return err
		}
		if err := chownTree(pwdir, cred); err != nil {
			return err
		}
		args = append(args, "--pwfile="+pwfile, "--auth-local=scram-sha-256", "--auth-host=scram-sha-256")
	} else {
		args = append(args, "--auth=trust")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "initdb"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = c.DataDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb in %s failed: %v\n%s", c.DataDir, err, out)
	}
	return nil
}

func (c *Cluster) startPostgres(ctx context.Context, cred *syscall.Credential, opts Options) error {
	listen := ""
	if c.TCP {
		listen = "127.0.0.1"
	}
	settings := map[string]string{
		"listen_addresses":        listen,
		"port":                    strconv.Itoa(c.Port),
		"unix_socket_directories": c.SocketDir,
		"max_connections":         "300",
		"logging_collector":       "off",
	}
	if opts.Fast {
		for k, v := range map[string]string{
			"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off",
			"shared_buffers": "128MB", "max_wal_size": "2GB", "checkpoint_timeout": "30min",
		} {
			settings[k] = v
		}
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"-D", c.DataDir}
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	// Not CommandContext: the server must outlive a cancelled start context.
	cmd := exec.Command(filepath.Join(c.BinDir, "postgres"), args...)
	// Its own process group, so a Ctrl-C aimed at the proxy does not reach the
	// server before the proxy has shut down in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	cmd.Dir = c.DataDir
	logPath := filepath.Join(c.DataDir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	var stderr io.Writer = logFile
	if opts.Log != nil {
		stderr = io.MultiWriter(logFile, opts.Log)
	}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting postgres: %w", err)
	}
	c.cmd, c.pid = cmd, cmd.Process.Pid
	exited := make(chan error, 1)
	go func() {
		exited <- cmd.Wait()
		logFile.Close()
		close(c.done)
	}()
	if err := c.waitReady(ctx, exited); err != nil {
		c.Stop()
		return fmt.Errorf("%w (server log: %s)", err, tail(logPath, 10))
	}
	return nil
}

// waitReady polls postmaster.pid for the "ready" status line, then checks
// that the socket accepts a connection.
func (c *Cluster) waitReady(ctx context.Context, exited <-chan error) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if status := pidFileLine(c.DataDir, 8); strings.TrimSpace(status) == "ready" {
			conn, err := net.DialTimeout("unix", c.SocketPath(), time.Second)
			if err == nil {
				conn.Close()
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("postgres exited during start: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("postgres did not become ready within 60s")
		}
	}
}

// SocketPath is the Unix socket file of the cluster.
func (c *Cluster) SocketPath() string {
	return filepath.Join(c.SocketDir, ".s.PGSQL."+strconv.Itoa(c.Port))
}

// URL is a postgres:// URL for the superuser over TCP on 127.0.0.1, or over
// the Unix socket when the cluster has no TCP listener.
func (c *Cluster) URL(database string) string {
	auth := Superuser
	if c.Password != "" {
		auth += ":" + c.Password
	}
	if !c.TCP {
		return fmt.Sprintf("postgres://%s@/%s?host=%s&port=%d&sslmode=disable", auth, database, c.SocketDir, c.Port)
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", auth, c.Port, database)
}

// SocketURL is a postgres:// URL over the Unix socket.
func (c *Cluster) SocketURL(database string) string {
	auth := Superuser
	if c.Password != "" {
		auth += ":" + c.Password
	}
	return fmt.Sprintf("postgres://%s@/%s?host=%s&port=%d&sslmode=disable", auth, database, c.SocketDir, c.Port)
}

// Addr is the TCP address "127.0.0.1:port" ("" without a TCP listener).
func (c *Cluster) Addr() string {
	if !c.TCP {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port))
}

// Stop shuts the cluster down (fast shutdown) and removes a temporary data
// directory. It is safe to call more than once.
func (c *Cluster) Stop() error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	var err error
	if c.pid > 0 {
		// SIGINT is Postgres's fast shutdown: abort sessions, checkpoint, exit.
		if e := syscall.Kill(c.pid, syscall.SIGINT); e != nil && !errors.Is(e, syscall.ESRCH) {
			err = e
		}
		if c.cmd != nil {
			select {
			case <-c.done:
			case <-time.After(60 * time.Second):
				syscall.Kill(c.pid, syscall.SIGKILL)
				<-c.done
			}
		} else {
			// Adopted postmaster: not our child, poll for its exit.
			for i := 0; i < 3000 && syscall.Kill(c.pid, 0) == nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	if c.temp {
		if e := os.RemoveAll(c.DataDir); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// Kill stops the postmaster with SIGKILL, for tests of an upstream that dies.
// Backends notice the postmaster's death and exit shortly after.
func (c *Cluster) Kill() error {
	return syscall.Kill(c.pid, syscall.SIGKILL)
}

// PID is the postmaster's process id.
func (c *Cluster) PID() int { return c.pid }

// runningPostmaster reports a live postmaster recorded in dataDir's pid file.
func runningPostmaster(dataDir string) (pid, port int, ok bool) {
	pid, err := strconv.Atoi(strings.TrimSpace(pidFileLine(dataDir, 1)))
	if err != nil || pid <= 0 {
		return 0, 0, false
	}
	if syscall.Kill(pid, 0) != nil {
		return 0, 0, false
	}
	// Make sure the pid is really a postgres of this directory, not a reused pid.
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil &&
		!strings.Contains(string(cmdline), "postgres") {
		return 0, 0, false
	}
	port, err = strconv.Atoi(strings.TrimSpace(pidFileLine(dataDir, 4)))
	if err != nil {
		return 0, 0, false
	}
	return pid, port, true
}

// pidFileLine returns line n (1-based) of postmaster.pid, or "".
func pidFileLine(dataDir string, n int) string {
	f, err := os.Open(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for i := 1; s.Scan(); i++ {
		if i == n {
			return s.Text()
		}
	}
	return ""
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// credential returns the identity to run Postgres as: nil (ourselves) unless
// we are root, in which case the named user, creating a system user
// "trellis-pg" when neither the name nor postgres/nobody exists.
func credential(runAs string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	names := []string{runAs}
	if runAs == "" {
		names = []string{"postgres", "nobody"}
	}
	for _, name := range names {
		if u, err := user.Lookup(name); err == nil {
			return toCredential(u)
		}
	}
	if runAs != "" {
		return nil, fmt.Errorf("OS user %q for the cluster does not exist (running as root; Postgres refuses root): create it or pass --run-as", runAs)
	}
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "trellis-pg").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("creating OS user trellis-pg for the cluster: %v: %s", err, out)
	}
	u, err := user.Lookup("trellis-pg")
	if err != nil {
		return nil, err
	}
	return toCredential(u)
}

func toCredential(u *user.User) (*syscall.Credential, error) {
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// chownTree hands path (and everything below it) to cred's user, and makes
// sure every parent directory can be traversed by it.
func chownTree(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	err := filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
	if err != nil {
		return fmt.Errorf("handing %s to uid %d: %w", path, cred.Uid, err)
	}
	for dir := filepath.Dir(path); dir != "/" && dir != "."; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(dir, st.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("%s is not traversable by the cluster's user: %w", dir, err)
			}
		}
	}
	return nil
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
	return strings.Join(lines, " | ")
}
