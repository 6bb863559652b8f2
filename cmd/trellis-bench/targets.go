package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Path names, as in the result lines' "path" key.
const (
	pathDirect  = "direct"
	pathProxy   = "proxy"
	pathBouncer = "pgbouncer"
)

// process is a server the harness started (proxy or PgBouncer): its address
// and pid, so CPU and memory can be read from /proc.
type process struct {
	Name string
	Addr string // 127.0.0.1:port
	PID  int
	Log  string // its log file, quoted on failure

	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	waitErr error         // its exit status, valid once done is closed
}

// DSN is a URI for the superuser's postgres database through this process.
func (p *process) DSN() string {
	return "postgres://postgres@" + p.Addr + "/postgres?sslmode=disable"
}

// Stop sends SIGTERM and waits, then SIGKILL after a grace period.
func (p *process) Stop() {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// alive reports an early exit as an error.
func (p *process) alive() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v (log: %s)", p.Name, p.waitErr, tailFile(p.Log, 8))
	default:
		return nil
	}
}

// startProcess starts cmd with its output in logPath and waits until a
// Postgres connection through addr works.
func startProcess(ctx context.Context, name, addr, logPath string, cmd *exec.Cmd) (*process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Its own process group: a Ctrl-C aimed at the harness must not kill it
	// before the harness has collected its figures and stopped it in order.
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{Name: name, Addr: addr, PID: cmd.Process.Pid, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := p.alive(); err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgconn.Connect(cctx, p.DSN())
		cancel()
		if err == nil {
			conn.Close(ctx)
			return p, nil
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("%s did not accept connections within 20s: %v (log: %s)", name, err, tailFile(logPath, 8))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeAddr picks a free loopback port. Racy by nature, but the window between
// closing and the server binding is tiny.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// bouncerOptions configure one PgBouncer.
type bouncerOptions struct {
	Bin        string
	Upstream   string // host:port of Postgres
	Dir        string // config, auth file and log go here
	PoolMode   string // session or transaction
	MaxClients int
	PoolSize   int
	RunAs      string // PgBouncer refuses to run as root
}

// startBouncer writes a PgBouncer configuration and starts it in the
// foreground as an unprivileged user.
func startBouncer(ctx context.Context, o bouncerOptions) (*process, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	uhost, uport, err := net.SplitHostPort(o.Upstream)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	// trust: the cluster itself trusts loopback, so PgBouncer need not check
	// passwords; the user must still be listed in auth_file.
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %s
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = %d
default_pool_size = %d
max_db_connections = 0
server_reset_query = DISCARD ALL
ignore_startup_parameters = extra_float_digits
logfile =
log_connections = 0
log_disconnections = 0
log_pooler_errors = 1
stats_period = 3600
`, uhost, uport, port, filepath.Join(o.Dir, "userlist.txt"), o.PoolMode, o.MaxClients, o.PoolSize)
	cfg := filepath.Join(o.Dir, "pgbouncer.ini")
	if err := os.WriteFile(cfg, []byte(ini), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "userlist.txt"), []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Bin, cfg)
	cmd.Dir = o.Dir
	if os.Geteuid() == 0 {
		cred, err := lookupCred(o.RunAs)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if err := chownAll(o.Dir, cred); err != nil {
			return nil, err
		}
	}
	return startProcess(ctx, "pgbouncer", addr, filepath.Join(o.Dir, "pgbouncer.log"), cmd)
}

// proxyOptions configure one trellis-proxy.
type proxyOptions struct {
	Bin       string
	Upstream  string // postgres:// URL of the cluster
	Dir       string // log goes here
	ExtraArgs []string
}

// startProxy starts the proxy under test on a free loopback port.
func startProxy(ctx context.Context, o proxyOptions) (*process, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--listen", addr, "--upstream", o.Upstream}, o.ExtraArgs...)
	cmd := exec.Command(o.Bin, args...)
	cmd.Dir = o.Dir
	return startProcess(ctx, "trellis-proxy", addr, filepath.Join(o.Dir, fmt.Sprintf("proxy-%d.log", time.Now().UnixNano())), cmd)
}

// proxyFlags reads the proxy's --help so the harness passes only flags this
// build knows (the proxy is developed alongside the harness).
func proxyFlags(bin string) map[string]bool {
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	flags := map[string]bool{}
	for _, f := range strings.Fields(string(out)) {
		f = strings.TrimRight(strings.TrimLeft(f, "-"), ",=")
		if f != "" {
			flags[f] = true
		}
	}
	return flags
}

func lookupCred(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("user %q for pgbouncer (it refuses to run as root): %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func chownAll(dir string, cred *syscall.Credential) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
}

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return lastLines(string(b), n)
}

// findBin looks a binary up on PATH and in the usual sbin directories, which
// root's PATH in a container may lack.
func findBin(name string, extra ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range append(extra, "/usr/sbin", "/usr/local/sbin", "/usr/bin") {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", errors.New(name + " not found")
}
