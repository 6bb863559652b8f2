package main

// The client subcommands (surface spec §17.1): plain SQL clients of the
// catalog's real objects, so they work through a proxy or directly against
// Postgres with the URL role's privileges; only apply needs a proxy.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
	"github.com/trellis-proxy/trellis-proxy/virtualtables"
)

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:6432/postgres"

// clientCommands maps each client subcommand to its body.
var clientCommands = map[string]func(ctx context.Context, conn *pgx.Conn, fs *flag.FlagSet, stdout, stderr io.Writer) int{
	"status": cmdStatus,
	"dump":   cmdDump,
	"apply":  cmdApply,
	"health": cmdHealth,
}

// runClient parses -d/--database-url and the subcommand's flags, connects,
// and runs it.
func runClient(sub string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("trellis-proxy "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	url := defaultDatabaseURL
	if v, ok := os.LookupEnv("TRELLIS_DATABASE_URL"); ok {
		url = v
	}
	fs.StringVar(&url, "database-url", url, "client URL (a proxy, or Postgres for read-only commands)")
	fs.StringVar(&url, "d", url, "shorthand for --database-url")
	fs.String("o", "", "dump: write to this file instead of stdout")
	fs.Bool("no-pauses", false, "dump: leave out operator pauses")
	fs.Bool("strict", false, "health: also fail on halts, hold-ups and capture disruptions; check: strict mode")
	fs.Int64("timeout-ms", 30000, "check: bound of each convergence wait of a page")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: trellis-proxy %s [-d URL] ...\n", sub)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		fmt.Fprintf(stderr, "error: --database-url: %v\n", err)
		return 2
	}
	// Notices go out as they arrive: apply prints them, others have none.
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if n.Severity == "WARNING" {
			fmt.Fprintf(stderr, "warning: %s\n", n.Message)
		} else {
			fmt.Fprintln(stdout, n.Message)
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fail(stderr, err)
	}
	defer conn.Close(context.Background())
	return clientCommands[sub](ctx, conn, fs, stdout, stderr)
}

func cmdStatus(ctx context.Context, conn *pgx.Conn, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "error: status takes no arguments\n")
		return 2
	}
	report, err := virtualtables.StatusReport(ctx, conn)
	if err != nil {
		return fail(stderr, err)
	}
	fmt.Fprint(stdout, report)
	return 0
}

func cmdDump(ctx context.Context, conn *pgx.Conn, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	withPauses := fs.Lookup("no-pauses").Value.String() != "true"
	text, err := virtualtables.Dump(ctx, conn, withPauses)
	if err != nil {
		return fail(stderr, err)
	}
	if out := fs.Lookup("o").Value.String(); out != "" {
		if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
			return fail(stderr, err)
		}
		return 0
	}
	fmt.Fprint(stdout, text)
	return 0
}

// cmdApply runs one statement in autocommit through the proxy: notices on
// stdout, warnings on stderr as "warning: ...".
func cmdApply(ctx context.Context, conn *pgx.Conn, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "error: apply takes exactly one statement, quoted\n")
		return 2
	}
	_, err := conn.Exec(ctx, fs.Arg(0), pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return fail(stderr, err)
	}
	return 0
}

// cmdHealth prints one line; exit 0 when a staging worker and a drain
// worker are alive somewhere in the fleet, 1 when not.
func cmdHealth(ctx context.Context, conn *pgx.Conn, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	var staging, drain bool
	var quarantined int64
	err := conn.QueryRow(ctx, `SELECT trellis.has_live_staging_worker(), trellis.has_live_drain_workers(),
		(SELECT count(*) FROM trellis.status WHERE status = 'quarantined')`).Scan(&staging, &drain, &quarantined)
	if err != nil {
		return fail(stderr, err)
	}
	var problems []string
	if !staging {
		problems = append(problems, "no live staging worker")
	}
	if !drain {
		problems = append(problems, "no live drain worker")
	}
	if fs.Lookup("strict").Value.String() == "true" && quarantined > 0 {
		problems = append(problems, fmt.Sprintf("%d quarantined transforms", quarantined))
	}
	if len(problems) > 0 {
		fmt.Fprintf(stdout, "unhealthy: %s\n", strings.Join(problems, "; "))
		return 1
	}
	fmt.Fprintln(stdout, "healthy: staging and drain workers live")
	return 0
}

// runMigrate connects like serve (the upstream, or the embedded cluster)
// and migrates the catalog.
func runMigrate(args []string, stdout, stderr io.Writer) int {
	cfg, code, ok := serveConfig(args, stdout, stderr)
	if !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	report, err := proxy.Migrate(ctx, cfg, proxy.NewLogger(cfg, stderr))
	if err != nil {
		return fail(stderr, err)
	}
	fmt.Fprintln(stdout, report)
	return 0
}

// fail prints an error as surface §17.1 says: error, then sqlstate, detail
// and hint lines when present; exit 1.
func fail(stderr io.Writer, err error) int {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		fmt.Fprintf(stderr, "error: %s\nsqlstate: %s\n", pe.Message, pe.Code)
		if pe.Detail != "" {
			fmt.Fprintf(stderr, "detail: %s\n", pe.Detail)
		}
		if pe.Hint != "" {
			fmt.Fprintf(stderr, "hint: %s\n", pe.Hint)
		}
		return 1
	}
	fmt.Fprintf(stderr, "error: %s\n", strings.Join(strings.Fields(err.Error()), " "))
	return 1
}
