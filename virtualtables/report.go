package virtualtables

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

// maxReportKeys bounds the quarantined keys the status report lists; the
// rest are counted (trellis.poisoned has them all).
const maxReportKeys = 50

// Dump returns trellis.dump_definitions_sql(withPauses) (surface §10.1),
// read through the "trellis" name (the proxy's alias reaches any instance).
func Dump(ctx context.Context, q engine.Querier, withPauses bool) (string, error) {
	return DumpSchema(ctx, q, DefaultSchema, withPauses)
}

// DumpSchema is Dump for a catalog schema named explicitly (a direct
// connection to an instance with a non-default --schema).
func DumpSchema(ctx context.Context, q engine.Querier, schema string, withPauses bool) (string, error) {
	var out string
	err := q.QueryRow(ctx, fmt.Sprintf("SELECT %s.dump_definitions_sql($1)", ident(schema)), withPauses).Scan(&out)
	return out, err
}

// StatusReport renders the `trellis-proxy status` report (surface §17.4)
// from the real views, as q's role sees them.
func StatusReport(ctx context.Context, q engine.Querier) (string, error) {
	return StatusReportSchema(ctx, q, DefaultSchema)
}

// StatusReportSchema is StatusReport for a catalog schema named explicitly.
func StatusReportSchema(ctx context.Context, q engine.Querier, schema string) (string, error) {
	s := ident(schema)
	var b strings.Builder

	b.WriteString("Transform definitions:\n")
	rows, err := q.Query(ctx, fmt.Sprintf(`
		SELECT d.id, d.source_table, d.target_table, d.status, d.owner, d.created_at,
		       s.build, s.build_rows_done, s.build_rows_estimated, s.build_percent::float8, s.build_started_at,
		       s.backfill_failure, s.capture_failure, s.drain_failure, s.capture_wait, s.paused_columns
		FROM %[1]s.definitions d JOIN %[1]s.status s ON s.definition_id = d.id ORDER BY d.id`, s))
	if err != nil {
		return "", err
	}
	type defRow struct {
		ID                            int64
		Source, Target, Status, Owner string
		CreatedAt                     time.Time
		Build                         map[string]any
		Done, Estimated               *int64
		Percent                       *float64
		Started                       *time.Time
		Backfill, Capture, Drain      map[string]any
		Wait                          map[string]any
		PausedColumns                 []string
	}
	defs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[defRow])
	if err != nil {
		return "", err
	}
	if len(defs) == 0 {
		b.WriteString("  no transform definitions\n")
	}
	for _, d := range defs {
		fmt.Fprintf(&b, "  id=%d source=%s target=%s status=%s owner=%s created_at=%s\n",
			d.ID, d.Source, d.Target, d.Status, d.Owner, stamp(&d.CreatedAt))
		if d.Build != nil {
			kind := str(d.Build["build_kind"])
			if kind == "" {
				kind = "build"
			}
			done := int64(0)
			if d.Done != nil {
				done = *d.Done
			}
			switch {
			case d.Estimated != nil && d.Percent != nil:
				fmt.Fprintf(&b, "    build (%s): %d of ~%d keys (%.1f%%), started %s\n", kind, done, *d.Estimated, *d.Percent, stamp(d.Started))
			default:
				fmt.Fprintf(&b, "    build (%s): %d keys so far, started %s\n", kind, done, stamp(d.Started))
			}
		}
		if f := d.Backfill; f != nil {
			fmt.Fprintf(&b, "    build failing on %s: attempts=%s next_attempt_at=%s error=%s\n",
				orDash(str(f["source_table"])), orDash(str(f["attempts"])), jsonStamp(f["next_attempt_at"]), strconv.Quote(str(f["last_error"])))
		}
		if f := d.Capture; f != nil {
			verb := "capture failing"
			if str(f["kind"]) == "halt" {
				verb = "halted"
			}
			fmt.Fprintf(&b, "    %s on %s at %s: error=%s\n", verb, orDash(str(f["source_table"])), jsonStamp(f["detected_at"]), strconv.Quote(str(f["error"])))
		}
		if f := d.Drain; f != nil {
			fmt.Fprintf(&b, "    drain failing on batch %s (%s): attempts=%s since=%s last_seen=%s sqlstate=%s error=%s\n",
				orDash(str(f["batch_seq"])), strings.Join(strs(f["tables"]), ", "), orDash(str(f["attempts"])),
				jsonStamp(f["since"]), jsonStamp(f["last_seen"]), orDash(str(f["sqlstate"])), strconv.Quote(str(f["error"])))
		}
		if f := d.Wait; f != nil {
			fmt.Fprintf(&b, "    capture %s on %s waiting for %s since %s: blockers=%s\n", orDash(str(f["operation"])),
				orDash(str(f["table_name"])), orDash(str(f["lock_mode"])), jsonStamp(f["waiting_since"]), strconv.Quote(strings.Join(strs(f["blockers"]), "; ")))
		}
		if len(d.PausedColumns) > 0 {
			fmt.Fprintf(&b, "    paused columns: %s\n", strings.Join(d.PausedColumns, ", "))
		}
	}

	b.WriteString("\nRelationships:\n")
	rows, err = q.Query(ctx, fmt.Sprintf(`SELECT id, name, from_schema, from_table, from_col, to_schema, to_table, to_col,
		cardinality, created_at FROM %s.relationships ORDER BY id`, s))
	if err != nil {
		return "", err
	}
	type relRow struct {
		ID                                   int64
		Name, FromSchema, FromTable, FromCol string
		ToSchema, ToTable, ToCol             string
		Cardinality                          string
		CreatedAt                            time.Time
	}
	rels, err := pgx.CollectRows(rows, pgx.RowToStructByPos[relRow])
	if err != nil {
		return "", err
	}
	if len(rels) == 0 {
		b.WriteString("  no relationships\n")
	}
	for _, r := range rels {
		fmt.Fprintf(&b, "  id=%d name=%s %s.%s.%s -> %s.%s.%s cardinality=%s created_at=%s\n", r.ID, strconv.Quote(r.Name),
			r.FromSchema, r.FromTable, r.FromCol, r.ToSchema, r.ToTable, r.ToCol, r.Cardinality, stamp(&r.CreatedAt))
	}

	var held int64
	if err := q.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.poisoned", s)).Scan(&held); err != nil {
		return "", err
	}
	if held == 0 {
		b.WriteString("\nQuarantined source rows: none\n")
	} else {
		fmt.Fprintf(&b, "\nQuarantined source rows: %d\n", held)
		rows, err = q.Query(ctx, fmt.Sprintf(`SELECT transform, src_table, key, last_error FROM %s.poisoned
			ORDER BY transform, src_table, key LIMIT %d`, s, maxReportKeys))
		if err != nil {
			return "", err
		}
		type keyRow struct{ Transform, Table, Key, Error string }
		keys, err := pgx.CollectRows(rows, pgx.RowToStructByPos[keyRow])
		if err != nil {
			return "", err
		}
		for _, k := range keys {
			fmt.Fprintf(&b, "  transform=%s table=%s key=%s error=%s\n", ShellQuote(k.Transform), ShellQuote(k.Table),
				ShellQuote(k.Key), strconv.Quote(k.Error))
		}
		if held > int64(len(keys)) {
			fmt.Fprintf(&b, "  … and %d more (SELECT * FROM trellis.poisoned)\n", held-int64(len(keys)))
		}
		b.WriteString("  Fix the cause, then release a key with `trellis-proxy release <transform> <table> <key>`,\n")
		b.WriteString("  or RESUME TRANSFORM the transform to rebuild it.\n")
	}

	var stagingLive bool
	var stagingID *string
	var stagingSince *time.Time
	var drains int32
	if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT staging_worker_live, staging_worker_id, staging_since, live_drain_workers
		FROM %s.fleet`, s)).Scan(&stagingLive, &stagingID, &stagingSince, &drains); err != nil {
		return "", err
	}
	b.WriteString("\nFleet: ")
	if stagingLive {
		b.WriteString("staging worker")
		if stagingID != nil {
			b.WriteString(" " + *stagingID)
		}
		b.WriteString(" live")
		if stagingSince != nil {
			b.WriteString(" since " + stamp(stagingSince))
		}
	} else {
		b.WriteString("no live staging worker")
	}
	switch drains {
	case 0:
		b.WriteString("; no live drain workers\n")
	case 1:
		b.WriteString("; 1 drain worker live\n")
	default:
		fmt.Fprintf(&b, "; %d drain workers live\n", drains)
	}
	return b.String(), nil
}

// stamp renders a time as the report does: 2025-03-02 10:00:00 UTC.
func stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// jsonStamp renders an RFC 3339 time from a jsonb part like stamp does.
func jsonStamp(v any) string {
	s := str(v)
	if s == "" {
		return "-"
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return stamp(&t)
}

func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case json.Number:
		return x.String()
	default:
		return fmt.Sprint(x)
	}
}

func strs(v any) []string {
	a, _ := v.([]any)
	out := make([]string, 0, len(a))
	for _, x := range a {
		out = append(out, str(x))
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ShellQuote quotes a value so that a report line pastes into a shell
// (surface §17.4): bare when every character is an ASCII letter or digit or
// one of _-.,:/@+; otherwise single-quoted with ' written '\”, control
// characters as $'\ooo'; the empty string as ”.
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	bare := true
	for i := 0; i < len(s); i++ {
		if !safeByte(s[i]) {
			bare = false
			break
		}
	}
	if bare {
		return s
	}
	var b strings.Builder
	open := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f {
			if open {
				b.WriteByte('\'')
				open = false
			}
			fmt.Fprintf(&b, "$'\\%03o'", c)
			continue
		}
		if !open {
			b.WriteByte('\'')
			open = true
		}
		if c == '\'' {
			b.WriteString(`'\''`)
			continue
		}
		b.WriteByte(c)
	}
	if open {
		b.WriteByte('\'')
	}
	return b.String()
}

func safeByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("_-.,:/@+", c) >= 0
}
