package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// captureVersion changes whenever the generated capture code changes, so
// the staging worker replaces stale bodies.
const captureVersion = "8"

var captureEvents = []string{"insert", "update", "delete", "truncate"}

// capturePlan is everything needed to install capture on one table.
type capturePlan struct {
	table    string // canonical name, valid SQL
	key      []keyCol
	nullable bool
	hash     string
	// keyTypes are the OIDs of the key columns' types, resolved by
	// installCapture: the guard compares OIDs, since a type name cast in
	// the function would raise 42704 in the writer once the type is renamed.
	keyTypes []uint32
}

func (e *Engine) newCapturePlan(table string, key []keyCol, nullable bool) *capturePlan {
	h := sha256.New()
	kj, _ := json.Marshal(key)
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%t\x00%s", captureVersion, e.cfg.Schema, e.workerRole(), table, nullable, kj)
	return &capturePlan{table: table, key: key, nullable: nullable, hash: hex.EncodeToString(h.Sum(nil))[:32]}
}

func (p *capturePlan) keyTypeNames() []string {
	out := make([]string, len(p.key))
	for i, k := range p.key {
		out[i] = k.Type
	}
	return out
}

func (e *Engine) tableTag(table string) string {
	h := sha256.Sum256([]byte(e.cfg.Schema + "\x00" + table))
	return hex.EncodeToString(h[:8])
}

func (e *Engine) capFunc(table, event string) string {
	return e.tbl("_cap_" + event + "_" + e.tableTag(table))
}

// triggerName is <schema>_capture_<event> (§12.3), so two instances can
// capture one table.
func (e *Engine) triggerName(event string) string {
	n := e.cfg.Schema + "_capture_" + event
	if len(n) > 63 {
		h := sha256.Sum256([]byte(e.cfg.Schema))
		n = "t" + hex.EncodeToString(h[:6]) + "_capture_" + event
	}
	return n
}

// outputPins are the settings a key's text rendering can depend on, pinned
// to the engine's session values (workerSettings) so a key reads the same
// whatever the writing session set.
var outputPins = []struct{ name, value string }{
	{"datestyle", "'ISO, YMD'"}, {"timezone", "'UTC'"}, {"intervalstyle", "'postgres'"},
	{"bytea_output", "'hex'"}, {"extra_float_digits", "1"},
}

// pinsByType lists, for built-in key types, the output settings their text
// output reads; a type not listed (domains, enums, ranges, arrays,
// composites, extension types) gets every pin. Each SET clause is a GUC set
// and restore on every call of the capture function (the five cost about a
// fifth of a single-row INSERT's own work), so a bigint, text or uuid key
// pays none.
var pinsByType = map[uint32][]string{
	16: nil, 18: nil, 19: nil, 20: nil, 21: nil, 23: nil, 25: nil, 26: nil, // bool "char" name int8 int2 int4 text oid
	1042: nil, 1043: nil, 1700: nil, 2950: nil, // bpchar varchar numeric uuid
	650: nil, 869: nil, 829: nil, 774: nil, 1560: nil, 1562: nil, // cidr inet macaddr macaddr8 bit varbit
	700: {"extra_float_digits"}, 701: {"extra_float_digits"}, // float4 float8
	1082: {"datestyle"}, 1083: {"datestyle"}, 1114: {"datestyle"}, 1266: {"datestyle"}, // date time timestamp timetz
	1184: {"datestyle", "timezone"}, // timestamptz
	1186: {"intervalstyle"},         // interval
	17:   {"bytea_output"},          // bytea
}

// setClauses renders the capture function's SET clauses: search_path
// always (SECURITY DEFINER), and the output pins the key types need.
func (p *capturePlan) setClauses(event string) string {
	need := map[string]bool{}
	if event != "truncate" { // a truncate renders no key
		for _, oid := range p.keyTypes {
			pins, known := pinsByType[oid]
			if !known {
				for _, o := range outputPins {
					need[o.name] = true
				}
			}
			for _, n := range pins {
				need[n] = true
			}
		}
	}
	s := "SET search_path = pg_catalog, pg_temp"
	for _, o := range outputPins {
		if need[o.name] {
			s += " SET " + o.name + " = " + o.value
		}
	}
	return s
}

// captureDDL renders the functions and triggers of a table's capture.
func (e *Engine) captureDDL(p *capturePlan) []string {
	tag := "$cap_" + e.tableTag(p.table) + "$"
	head := func(event string) string {
		return "CREATE OR REPLACE FUNCTION " + e.capFunc(p.table, event) + `() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER ` + p.setClauses(event) + `
AS ` + tag + `
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
` + e.captureGuard(p, event) + `
  -- Inherit origin and hop only when a Trellis drain is the writer (chains).
  -- An application's writer evaluates one condition here, not a setting
  -- (each PL/pgSQL expression costs a snapshot in a volatile function).
  IF session_user = ` + base.Lit(e.workerRole()) + ` AND coalesce(current_setting('trellis.origin', true), '') <> '' THEN
    v_s := current_setting('trellis.origin', true);
    v_origin := CASE v_s WHEN 'unknown' THEN NULL ELSE v_s::pg_lsn END;
    v_hop := coalesce(nullif(current_setting('trellis.hop', true), '')::smallint, 0);
    -- The chain's original write (epoch seconds), for its end-to-end latency.
    v_at := to_timestamp(nullif(current_setting('trellis.origin_at', true), '')::float8);
  ELSE
    v_origin := pg_current_wal_insert_lsn();
  END IF;
`
	}
	tail := "  RETURN NULL;\nEND " + tag
	log := e.tbl("_change_log")
	key := model.KeySQL("x", p.key, p.nullable)
	tl := base.Lit(p.table)
	// One log row per statement: its changed keys in one array (an empty
	// statement writes nothing, array_agg of no rows being NULL).
	one := func(event, rel string) string {
		return head(event) + "  INSERT INTO " + log + " (src_table, keys, op, origin_lsn, hop, origin_at)\n  SELECT " + tl + ", a.k, '" + event +
			"', v_origin, v_hop, v_at FROM (SELECT array_agg(" + key + ") AS k FROM " + rel + " x) a WHERE a.k IS NOT NULL;\n" + tail
	}
	fn := map[string]string{
		"insert": one("insert", "trellis_new"),
		"delete": one("delete", "trellis_old"),
		"update": head("update") + "  INSERT INTO " + log + " (src_table, keys, op, origin_lsn, hop, origin_at)\n  SELECT " + tl +
			`, a.k, 'update', v_origin, v_hop, v_at
  FROM (SELECT array_agg(coalesce(n.k, d.k)) AS k
        FROM      (SELECT ` + key + ` AS k, x AS r FROM trellis_new x) n
        FULL JOIN (SELECT ` + key + ` AS k, x AS r FROM trellis_old x) d ON n.k = d.k COLLATE "C"
        WHERE n.k IS NULL OR d.k IS NULL OR n.r *<> d.r) a   -- no-op filter: binary row images
  WHERE a.k IS NOT NULL;
` + tail,
		"truncate": head("truncate") + "  INSERT INTO " + log + " (src_table, key, op, origin_lsn, hop, origin_at)\n  VALUES (" + tl +
			", NULL, 'truncate', v_origin, v_hop, v_at);\n" + e.truncateRecord(p) + tail,
	}
	var out []string
	for _, ev := range captureEvents {
		out = append(out, fn[ev], "REVOKE ALL ON FUNCTION "+e.capFunc(p.table, ev)+"() FROM PUBLIC")
		trg := base.Ident(e.triggerName(ev))
		var ref string
		switch ev {
		case "insert":
			ref = " REFERENCING NEW TABLE AS trellis_new"
		case "update":
			ref = " REFERENCING OLD TABLE AS trellis_old NEW TABLE AS trellis_new"
		case "delete":
			ref = " REFERENCING OLD TABLE AS trellis_old"
		}
		out = append(out, "CREATE OR REPLACE TRIGGER "+trg+" AFTER "+strings.ToUpper(ev)+" ON "+p.table+ref+
			" FOR EACH STATEMENT EXECUTE FUNCTION "+e.capFunc(p.table, ev)+"()",
			"ALTER TABLE "+p.table+" ENABLE ALWAYS TRIGGER "+trg)
	}
	return out
}

// captureHealthy reports whether the table carries our current capture.
func (e *Engine) captureHealthy(ctx context.Context, conn *pgx.Conn, p *capturePlan) (bool, error) {
	names := make([]string, len(captureEvents))
	for i, ev := range captureEvents {
		names[i] = e.triggerName(ev)
	}
	var ok bool
	err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s ct
		WHERE ct.table_name = $1 AND ct.function_hash = $2 AND ct.table_oid = to_regclass($1)::oid)
		AND (SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = ANY($3) AND tgenabled = 'A') = 4`,
		e.tbl("_captured_tables")), p.table, p.hash, names).Scan(&ok)
	return ok, err
}

// installCapture installs or replaces capture under a short lock_timeout.
// The commit is the table's join fence (§12.3). ok=false: lock not granted,
// retry next pass.
func (e *Engine) installCapture(ctx context.Context, conn *pgx.Conn, p *capturePlan) (ok bool, err error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", e.cfg.InstallLockTimeout.Milliseconds())); err != nil {
		return false, err
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", p.table).Scan(&exists); err != nil || !exists {
		return false, err
	}
	// Waits out open writers, or fails fast: writers wait at most one attempt.
	if _, err := tx.Exec(ctx, "LOCK TABLE "+p.table+" IN SHARE ROW EXCLUSIVE MODE"); err != nil {
		if isLockTimeout(err) {
			return false, nil
		}
		return false, err
	}
	// Evidence that capture was disabled, dropped or replaced is read under
	// the lock, before the reinstall below erases it, and the readers are
	// sent to rebuild in the same transaction: writes made while capture was
	// off are repaired whatever the pass that asked for this install saw.
	tampered, err := e.captureTampered(ctx, tx, p.table)
	if err != nil {
		return false, err
	}
	if tampered {
		if _, err := e.requestRebuild(ctx, tx, p.table, "capture on "+p.table+" was disabled, dropped or replaced; reinstalled"); err != nil {
			return false, err
		}
		e.log.Warn("capture repaired; readers rebuild", "table", p.table)
	}
	if err := tx.QueryRow(ctx, `SELECT array_agg(to_regtype(t)::oid ORDER BY i) FROM unnest($1::text[]) WITH ORDINALITY u(t, i)`,
		p.keyTypeNames()).Scan(&p.keyTypes); err != nil {
		return false, err
	}
	for i, oid := range p.keyTypes {
		if oid == 0 {
			return false, fmt.Errorf("installing capture on %s: key type %s does not resolve", p.table, p.key[i].Type)
		}
	}
	for _, s := range e.captureDDL(p) {
		if _, err := tx.Exec(ctx, s); err != nil {
			return false, fmt.Errorf("installing capture on %s: %w", p.table, err)
		}
	}
	kj, _ := json.Marshal(p.key)
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (table_name, table_oid, key_columns, key_nullable, enable_mode, function_hash, installed_at)
		VALUES ($1, to_regclass($1)::oid, $2, $3, 'A', $4, now())
		ON CONFLICT (table_name) DO UPDATE SET table_oid = excluded.table_oid, key_columns = excluded.key_columns,
		  key_nullable = excluded.key_nullable, function_hash = excluded.function_hash, installed_at = now()`,
		e.tbl("_captured_tables")), p.table, kj, p.nullable, p.hash); err != nil {
		return false, err
	}
	if err := e.recordInstall(ctx, tx, p.table); err != nil {
		return false, err
	}
	// The wait, if one was shown, ends with the install's commit.
	if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE table_name = $1`, e.tbl("_capture_waits")), p.table); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// recordCaptureWait shows an install of capture on table that could not
// take its lock within InstallLockTimeout (status.capture_wait, surface
// §5.3): since when it waits, and the sessions holding a lock on the table
// that conflicts with SHARE ROW EXCLUSIVE. Nothing cancels them; the next
// install that commits clears it. A table that does not exist is no wait.
func (e *Engine) recordCaptureWait(ctx context.Context, q Querier, table string) error {
	_, err := q.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s AS w (table_name, operation, lock_mode, blockers)
		SELECT $1, CASE WHEN EXISTS (SELECT 1 FROM %[2]s WHERE table_name = $1) THEN 'reinstall' ELSE 'install' END,
		  'ShareRowExclusiveLock',
		  ARRAY(SELECT format('pid %%s (%%s) holds %%s for %%s, query started %%s', l.pid, coalesce(a.backend_type, '?'), l.mode,
		                      coalesce(date_trunc('second', now() - coalesce(a.xact_start, a.backend_start))::text, '?'),
		                      coalesce(to_char(a.query_start, 'YYYY-MM-DD HH24:MI:SS'), '?'))
		        FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		        WHERE l.locktype = 'relation' AND l.relation = to_regclass($1) AND l.granted AND l.pid <> pg_backend_pid()
		          AND l.mode IN ('RowExclusiveLock', 'ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
		                         'ExclusiveLock', 'AccessExclusiveLock')
		        ORDER BY l.pid, l.mode)
		WHERE to_regclass($1) IS NOT NULL
		ON CONFLICT (table_name) DO UPDATE SET operation = excluded.operation, observed_at = now(), blockers = excluded.blockers`,
		e.tbl("_capture_waits"), e.tbl("_captured_tables")), table)
	return err
}

// uninstallCapture removes capture from a table no definition reads.
func (e *Engine) uninstallCapture(ctx context.Context, conn *pgx.Conn, table string) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", e.cfg.InstallLockTimeout.Milliseconds())); err != nil {
		return err
	}
	// Still unread, seen under the row lock (a Define may be racing us).
	var unread bool
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT NOT EXISTS (SELECT 1 FROM %s WHERE table_name = $1)
		FROM %s WHERE table_name = $1 FOR UPDATE`, e.tbl("_definition_reads"), e.tbl("_captured_tables")), table).Scan(&unread); err != nil {
		if err == pgx.ErrNoRows {
			return nil
		}
		return err
	}
	if !unread {
		return nil
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return err
	}
	if exists {
		for _, ev := range captureEvents {
			if _, err := tx.Exec(ctx, "DROP TRIGGER IF EXISTS "+base.Ident(e.triggerName(ev))+" ON "+table); err != nil {
				if isLockTimeout(err) {
					return nil
				}
				return err
			}
		}
	}
	for _, ev := range captureEvents {
		if _, err := tx.Exec(ctx, "DROP FUNCTION IF EXISTS "+e.capFunc(table, ev)+"()"); err != nil {
			return err
		}
	}
	for _, t := range []string{"_captured_tables", "_capture_waits"} {
		if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE table_name = $1", e.tbl(t)), table); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

func isLockTimeout(err error) bool {
	return base.Code(err) == "55P03"
}

var _ = time.Second
