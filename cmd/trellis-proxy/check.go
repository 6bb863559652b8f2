package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/jackc/pgx/v5"
)

func init() {
	clientCommands["check"] = cmdCheck
}

// cmdCheck runs a self-check of one target through the proxy (surface §9)
// and prints its verdict and divergences: exit 0 when converged, 1 when
// not (diverged, not live, not caught up, capture broken, failed).
func cmdCheck(ctx context.Context, conn *pgx.Conn, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "error: check takes exactly one target\n")
		return 2
	}
	mode := "standard"
	if fs.Lookup("strict").Value.String() == "true" {
		mode = "strict"
	}
	timeout, err := strconv.ParseInt(fs.Lookup("timeout-ms").Value.String(), 10, 64)
	if err != nil || timeout < 0 {
		fmt.Fprintf(stderr, "error: --timeout-ms must be a non-negative integer\n")
		return 2
	}
	var id int64
	if err := conn.QueryRow(ctx, `SELECT id FROM trellis.self_check($1, $2, $3)`, fs.Arg(0), timeout, mode).Scan(&id); err != nil {
		return fail(stderr, err)
	}
	var outcome string
	if err := conn.QueryRow(ctx, `SELECT trellis.await_self_check($1, 110000)`, id).Scan(&outcome); err != nil {
		return fail(stderr, err)
	}
	var rows, divs int64
	var truncated bool
	var why, notLive *string
	if err := conn.QueryRow(ctx, `SELECT rows_compared, divergence_count, coalesce(truncated, false), error, not_live_status
		FROM trellis.self_checks WHERE id = $1`, id).Scan(&rows, &divs, &truncated, &why, &notLive); err != nil {
		return fail(stderr, err)
	}
	line := fmt.Sprintf("%s: %s (self-check %d, %s mode, %d keys compared, %d divergences", fs.Arg(0), outcome, id, mode, rows, divs)
	if truncated {
		line += ", stopped early"
	}
	if notLive != nil {
		line += ", status " + *notLive
	}
	if why != nil {
		line += ", " + *why
	}
	fmt.Fprintln(stdout, line+")")
	r, err := conn.Query(ctx, `SELECT kind, coalesce(key, ''), coalesce(column_name, ''), coalesce(persisted, 'NULL'),
		coalesce(recomputed, 'NULL'), coalesce(table_name, ''), coalesce(detail, '')
		FROM trellis.self_check_divergences WHERE job_id = $1 ORDER BY ordinal`, id)
	if err != nil {
		return fail(stderr, err)
	}
	defer r.Close()
	for r.Next() {
		var kind, key, col, persisted, recomputed, table, detail string
		if err := r.Scan(&kind, &key, &col, &persisted, &recomputed, &table, &detail); err != nil {
			return fail(stderr, err)
		}
		switch kind {
		case "cell":
			fmt.Fprintf(stdout, "  cell key=%s column=%s persisted=%s recomputed=%s\n", key, col, persisted, recomputed)
		case "capture":
			fmt.Fprintf(stdout, "  capture table=%s: %s\n", table, detail)
		default:
			fmt.Fprintf(stdout, "  %s key=%s\n", kind, key)
		}
	}
	if err := r.Err(); err != nil {
		return fail(stderr, err)
	}
	if outcome != "converged" {
		return 1
	}
	return 0
}
