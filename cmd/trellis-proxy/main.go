// Command trellis-proxy is a PostgreSQL wire-protocol proxy that passes
// ordinary SQL through byte for byte and will execute Trellis statements.
// With no --upstream it runs a private PostgreSQL cluster (the embedded
// default, D12).
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
	"strings"
	"syscall"
	"time"

	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
)

var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without os.Exit, for tests: 0 ok, 1 failure, 2 usage.
func run(args []string, stdout, stderr io.Writer) int {
	sub := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "version":
		fmt.Fprintf(stdout, "trellis-proxy %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	case "serve":
	case "migrate":
		return runMigrate(args, stdout, stderr)
	case "status", "dump", "apply", "health", "check":
		return runClient(sub, args, stdout, stderr)
	case "help":
		fs, _ := newFlagSet(new(proxy.Config))
		usage(fs, stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "error: unknown subcommand %q (try serve, migrate, status, dump, apply, health, check, version or --help)\n", sub)
		return 2
	}
	cfg, code, ok := serveConfig(args, stdout, stderr)
	if !ok {
		return code
	}
	log := proxy.NewLogger(cfg, stderr)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // restore default handling: a second signal kills at once
		second := make(chan os.Signal, 1)
		signal.Notify(second, syscall.SIGINT, syscall.SIGTERM)
		<-second
		fmt.Fprintln(stderr, "error: second signal, exiting at once")
		os.Exit(1)
	}()

	if err := proxy.Run(ctx, cfg, proxy.Options{Logger: log, Stdout: stdout, Version: version}); err != nil {
		var fe *proxy.FlagError
		if errors.As(err, &fe) {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return 2
		}
		fmt.Fprintf(stderr, "error: %s\n", strings.Join(strings.Fields(err.Error()), " "))
		return 1
	}
	return 0
}

// serveConfig parses serve's flags and variables (also used by migrate).
// When ok is false the caller exits with code: 0 after --help, 2 on a usage
// error, which has been printed.
func serveConfig(args []string, stdout, stderr io.Writer) (cfg proxy.Config, code int, ok bool) {
	cfg = proxy.Default()
	fs, err := parse(&cfg, args, os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		usage(fs, stdout)
		return cfg, 0, false
	}
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return cfg, 2, false
	}
	return cfg, 0, true
}

// newFlagSet declares every serve flag bound to cfg.
func newFlagSet(cfg *proxy.Config) (*flag.FlagSet, map[string]string) {
	fs := flag.NewFlagSet("trellis-proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	groups := map[string]string{}
	str := func(p *string, name, group, usage string) { fs.StringVar(p, name, *p, usage); groups[name] = group }
	num := func(p *int, name, group, usage string) { fs.IntVar(p, name, *p, usage); groups[name] = group }
	str(&cfg.Listen, "listen", "proxy", "client-facing Postgres address")
	str(&cfg.Upstream, "upstream", "proxy", "upstream Postgres URL or DSN (none: embedded cluster)")
	fs.StringVar(&cfg.Upstream, "u", cfg.Upstream, "shorthand for --upstream")
	str(&cfg.TLSCert, "tls-cert", "proxy", "client-side TLS certificate (PEM)")
	str(&cfg.TLSKey, "tls-key", "proxy", "client-side TLS key (PEM)")
	str(&cfg.HTTPListen, "http-listen", "proxy", "address for /metrics, /livez, /readyz (empty: off)")
	num(&cfg.MaxClientConns, "max-client-conns", "proxy", "refuse clients beyond this with 53300 (0: no limit)")
	num(&cfg.MaxAuthenticating, "max-authenticating", "proxy", "refuse clients with 53300 while this many others are still authenticating (0: no limit); set it below --max-client-conns where untrusted clients can reach the port")
	num(&cfg.MaxMessageSize, "max-message-size", "proxy", "largest client message in bytes (0: 1 GiB)")
	num(&cfg.InstanceID, "instance-id", "proxy", "this proxy's id (1-2047) in the cancel keys it mints (0: random); give each proxy of a fleet its own")
	str(&cfg.CancelPeers, "cancel-peers", "proxy", "the fleet's other proxies as id=host:port,... (their --instance-id and --listen): a cancel that reaches this proxy for one of their sessions is forwarded there")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", cfg.ShutdownGrace, "time client sessions get at shutdown")
	groups["shutdown-grace"] = "proxy"
	fs.DurationVar(&cfg.AuthTimeout, "auth-timeout", cfg.AuthTimeout, "time a client gets to finish startup and authentication")
	groups["auth-timeout"] = "proxy"
	str(&cfg.LogLevel, "log-level", "proxy", "debug, info, warn or error")
	str(&cfg.LogFormat, "log-format", "proxy", "text or json")
	str(&cfg.DataDir, "data-dir", "embedded", "embedded cluster's data directory (default "+proxy.DefaultDataDir()+")")
	str(&cfg.PGBin, "pg-bin", "embedded", "directory holding initdb and postgres (default: searched)")
	str(&cfg.RunAs, "run-as", "embedded", "OS user for the embedded cluster when started as root")
	str(&cfg.EmbeddedPassword, "embedded-password", "embedded", "password of the embedded superuser (default: trust)")
	fs.BoolVar(&cfg.Ephemeral, "ephemeral", cfg.Ephemeral, "embedded cluster in a temporary directory removed at exit")
	groups["ephemeral"] = "embedded"
	str(&cfg.Schema, "schema", "engine", "catalog schema (instance identity)")
	str(&cfg.TargetSchema, "target-schema", "engine", "where bare target names are created")
	str(&cfg.Staging, "staging", "engine", "on, off or auto")
	num(&cfg.DrainWorkers, "drain-workers", "engine", "drain workers in this process")
	fs.BoolVar(&cfg.Migrate, "migrate", cfg.Migrate, "migrate the catalog before starting")
	groups["migrate"] = "engine"
	num(&cfg.PoolMaxSize, "pool-max-size", "engine", "the proxy's own connection pool size")
	fs.DurationVar(&cfg.PoolWaitTimeout, "pool-wait-timeout", cfg.PoolWaitTimeout, "wait for a free pooled connection")
	fs.DurationVar(&cfg.CallBudget, "call-budget", cfg.CallBudget, "budget of one Trellis statement or proxy call")
	fs.DurationVar(&cfg.LockTimeout, "lock-timeout", cfg.LockTimeout, "lock_timeout for the proxy's statements")
	groups["pool-wait-timeout"], groups["call-budget"], groups["lock-timeout"] = "engine", "engine", "engine"
	// D17: the engine's intervals are ordinary flags; 0 keeps the default.
	dur := func(p *time.Duration, name, usage string) {
		fs.DurationVar(p, name, *p, usage)
		groups[name] = "tuning"
	}
	dur(&cfg.SealInterval, "seal-interval", "staging probes for new changes this often (0: 50ms)")
	dur(&cfg.PollInterval, "poll-interval", "idle drain workers re-check this often without a wake-up (0: 1s)")
	dur(&cfg.Heartbeat, "heartbeat", "workers' heartbeat interval (0: 10s)")
	dur(&cfg.WorkerTTL, "worker-ttl", "a worker silent this long counts as dead (0: 30s)")
	dur(&cfg.TakeoverInterval, "takeover-interval", "standbys retry the staging lock this often (0: 2s)")
	fs.BoolVar(&cfg.Routing, "routing", cfg.Routing, "route statements through the Trellis router; false relays everything untouched (the passthrough benchmark's baseline)")
	groups["routing"] = "bench"
	groups["u"] = "proxy"
	return fs, groups
}

// parse fills cfg from args, then from TRELLIS_* variables for flags not
// given on the command line (a flag wins over its variable).
func parse(cfg *proxy.Config, args []string, lookup func(string) (string, bool)) (*flag.FlagSet, error) {
	fs, _ := newFlagSet(cfg)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return fs, err
		}
		return fs, errors.New(strings.TrimPrefix(err.Error(), "flag provided but not defined: ") + flagHint(err))
	}
	if fs.NArg() > 0 {
		return fs, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["u"] {
		set["upstream"] = true
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] || f.Name == "u" {
			return
		}
		env := "TRELLIS_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := lookup(env); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: invalid value %q for --%s", env, v, f.Name)
			}
		}
	})
	return fs, err
}

func flagHint(err error) string {
	if strings.Contains(err.Error(), "not defined") {
		return ": unknown flag (see --help)"
	}
	return ""
}

func usage(fs *flag.FlagSet, w io.Writer) {
	_, groups := newFlagSet(new(proxy.Config))
	fmt.Fprintf(w, `Usage: trellis-proxy [serve] [flags]     run the proxy (the default)
       trellis-proxy migrate [flags]     create or upgrade the catalog, then exit
       trellis-proxy status|dump|health [-d URL]
       trellis-proxy apply [-d URL] 'STATEMENT'
       trellis-proxy check [-d URL] [--strict] [--timeout-ms N] TARGET   self-check a target
       trellis-proxy version

Client commands connect to -d/--database-url or TRELLIS_DATABASE_URL
(default %s).

`, defaultDatabaseURL)
	fmt.Fprintf(w, "Every flag can also be set by TRELLIS_<FLAG> (upper case, - as _).\n")
	// One heading per group, each flag as flag.PrintDefaults prints it.
	for _, g := range []struct{ name, title string }{{"proxy", "Proxy"}, {"engine", "Engine"}, {"embedded", "Embedded cluster"}, {"tuning", "Engine tuning (D17)"}, {"bench", "Benchmarks only"}} {
		fmt.Fprintf(w, "\n%s flags:\n", g.title)
		one := flag.NewFlagSet("", flag.ContinueOnError)
		fs.VisitAll(func(f *flag.Flag) {
			if groups[f.Name] == g.name {
				one.Var(f.Value, f.Name, f.Usage)
				one.Lookup(f.Name).DefValue = f.DefValue
			}
		})
		one.SetOutput(w)
		one.PrintDefaults()
	}
}
