package sqlgen

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// Capture (engine §12.3): per captured table, one AFTER ... FOR EACH
// STATEMENT trigger per event, whose SECURITY DEFINER function logs the
// statement's changed keys in one _change_log row.

// Instance names what the SQL of one engine instance refers to: its
// catalog schema and the workers' role.
type Instance struct {
	Schema string
	Worker string
}

// Table is a catalog table of the instance, quoted.
func (in Instance) Table(name string) string { return base.Table(in.Schema, name) }

// CaptureVersion changes whenever the generated capture code changes, so
// the staging worker replaces stale bodies.
const CaptureVersion = "8"

// CaptureEvents are the statement events capture has a trigger for.
var CaptureEvents = []string{"insert", "update", "delete", "truncate"}

// CapturePlan is everything needed to install capture on one table.
type CapturePlan struct {
	Table    string // canonical name, valid SQL
	Key      []model.KeyCol
	Nullable bool
	Hash     string
	// KeyTypes are the OIDs of the key columns' types, resolved by the
	// engine's installCapture: the guard compares OIDs, since a type name
	// cast in the function would raise 42704 in the writer once the type
	// is renamed.
	KeyTypes []uint32
	// Alt are the other unique keys JOIN targets join the table on: each
	// statement also logs their old and new values (NULL-aware renderings)
	// under their model.AltLogTable name.
	Alt []AltKey
	// AltTypes are the OIDs of the Alt columns' types (guard), in AltCols
	// order.
	AltTypes []uint32
}

// AltKey is one unique key other than the identity that capture logs.
type AltKey struct {
	Table string // model.AltLogTable of the captured table and Key's columns
	Key   []model.KeyCol
}

// AddAlt adds the alternate key cols of the plan's table, once, and keeps
// the hash current.
func (p *CapturePlan) AddAlt(cols []model.KeyCol, in Instance) {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	t := model.AltLogTable(p.Table, names)
	for _, a := range p.Alt {
		if a.Table == t {
			return
		}
	}
	p.Alt = append(p.Alt, AltKey{Table: t, Key: cols})
	h := sha256.New()
	aj, _ := json.Marshal(p.Alt)
	fmt.Fprintf(h, "%s\x00%s", p.Hash, aj)
	p.Hash = hex.EncodeToString(h.Sum(nil))[:32]
}

// AltCols are the Alt keys' columns not in the identity, each once: the
// guard checks them too (a rename would fail the alternate INSERT).
func (p *CapturePlan) AltCols() []model.KeyCol {
	seen := map[string]bool{}
	for _, k := range p.Key {
		seen[k.Name] = true
	}
	var out []model.KeyCol
	for _, a := range p.Alt {
		for _, k := range a.Key {
			if !seen[k.Name] {
				seen[k.Name] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// NewCapturePlan plans table's capture; Hash changes with anything the
// generated code depends on, so a stale install is replaced.
func (in Instance) NewCapturePlan(table string, key []model.KeyCol, nullable bool) *CapturePlan {
	h := sha256.New()
	kj, _ := json.Marshal(key)
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%t\x00%s", CaptureVersion, in.Schema, in.Worker, table, nullable, kj)
	return &CapturePlan{Table: table, Key: key, Nullable: nullable, Hash: hex.EncodeToString(h.Sum(nil))[:32]}
}

// KeyTypeNames are the key columns' type names, for resolving KeyTypes.
func (p *CapturePlan) KeyTypeNames() []string {
	out := make([]string, len(p.Key))
	for i, k := range p.Key {
		out[i] = k.Type
	}
	return out
}

// AltTypeNames are the AltCols' type names, for resolving AltTypes.
func (p *CapturePlan) AltTypeNames() []string {
	var out []string
	for _, k := range p.AltCols() {
		out = append(out, k.Type)
	}
	return out
}

// TableTag is a short stable tag of a table within the instance.
func (in Instance) TableTag(table string) string {
	h := sha256.Sum256([]byte(in.Schema + "\x00" + table))
	return hex.EncodeToString(h[:8])
}

// CapFunc is the capture function of table for event.
func (in Instance) CapFunc(table, event string) string {
	return in.Table("_cap_" + event + "_" + in.TableTag(table))
}

// TriggerName is <schema>_capture_<event> (§12.3), so two instances can
// capture one table.
func (in Instance) TriggerName(event string) string {
	n := in.Schema + "_capture_" + event
	if len(n) > 63 {
		h := sha256.Sum256([]byte(in.Schema))
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
func (p *CapturePlan) setClauses(event string) string {
	need := map[string]bool{}
	if event != "truncate" { // a truncate renders no key
		for _, oid := range append(append([]uint32{}, p.KeyTypes...), p.AltTypes...) {
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

// CaptureDDL renders the functions and triggers of a table's capture.
func (in Instance) CaptureDDL(p *CapturePlan) []string {
	tag := "$cap_" + in.TableTag(p.Table) + "$"
	head := func(event string) string {
		return "CREATE OR REPLACE FUNCTION " + in.CapFunc(p.Table, event) + `() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER ` + p.setClauses(event) + `
AS ` + tag + `
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
` + in.CaptureGuard(p, event) + `
  -- Inherit origin and hop only when a Trellis drain is the writer (chains).
  -- An application's writer evaluates one condition here, not a setting
  -- (each PL/pgSQL expression costs a snapshot in a volatile function).
  IF session_user = ` + base.Lit(in.Worker) + ` AND coalesce(current_setting('trellis.origin', true), '') <> '' THEN
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
	log := in.Table("_change_log")
	key := model.KeySQL("x", p.Key, p.Nullable)
	tl := base.Lit(p.Table)
	// One log row per statement: its changed keys in one array (an empty
	// statement writes nothing, array_agg of no rows being NULL); one more
	// per alternate key JOIN targets join on, its values in rel (old and
	// new rows for an update, every one: an extra re-derive is harmless).
	alt := func(event string, rels ...string) string {
		var b strings.Builder
		for _, a := range p.Alt {
			var from []string
			for _, r := range rels {
				from = append(from, "SELECT "+model.KeySQL("x", a.Key, true)+" AS k FROM "+r+" x")
			}
			b.WriteString("  INSERT INTO " + log + " (src_table, keys, op, origin_lsn, hop, origin_at)\n  SELECT " + base.Lit(a.Table) +
				", a.k, '" + event + "', v_origin, v_hop, v_at FROM (SELECT array_agg(DISTINCT u.k) AS k FROM (" +
				strings.Join(from, " UNION ALL ") + ") u) a WHERE a.k IS NOT NULL;\n")
		}
		return b.String()
	}
	one := func(event, rel string) string {
		return head(event) + "  INSERT INTO " + log + " (src_table, keys, op, origin_lsn, hop, origin_at)\n  SELECT " + tl + ", a.k, '" + event +
			"', v_origin, v_hop, v_at FROM (SELECT array_agg(" + key + ") AS k FROM " + rel + " x) a WHERE a.k IS NOT NULL;\n" + alt(event, rel) + tail
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
` + alt("update", "trellis_old", "trellis_new") + tail,
		"truncate": head("truncate") + "  INSERT INTO " + log + " (src_table, key, op, origin_lsn, hop, origin_at)\n  VALUES (" + tl +
			", NULL, 'truncate', v_origin, v_hop, v_at);\n" + in.truncateRecord(p) + tail,
	}
	var out []string
	for _, ev := range CaptureEvents {
		out = append(out, fn[ev], "REVOKE ALL ON FUNCTION "+in.CapFunc(p.Table, ev)+"() FROM PUBLIC")
		trg := base.Ident(in.TriggerName(ev))
		var ref string
		switch ev {
		case "insert":
			ref = " REFERENCING NEW TABLE AS trellis_new"
		case "update":
			ref = " REFERENCING OLD TABLE AS trellis_old NEW TABLE AS trellis_new"
		case "delete":
			ref = " REFERENCING OLD TABLE AS trellis_old"
		}
		out = append(out, "CREATE OR REPLACE TRIGGER "+trg+" AFTER "+strings.ToUpper(ev)+" ON "+p.Table+ref+
			" FOR EACH STATEMENT EXECUTE FUNCTION "+in.CapFunc(p.Table, ev)+"()",
			"ALTER TABLE "+p.Table+" ENABLE ALWAYS TRIGGER "+trg)
	}
	return out
}

// CaptureGuard is the head of a capture function: a key column that is
// missing or has another type than the one the function was generated for
// makes the statement log one 'schema' marker row instead of running the
// keyed INSERT (which would fail the writer's statement, or log keys in
// another rendering). The staging worker then pauses the readers.
//
// The fast probe reads pg_attribute, and so sees the catalog as of the
// writer's snapshot: in REPEATABLE READ or SERIALIZABLE a snapshot older
// than a committed rename, drop or re-type still shows the old column,
// while the keyed INSERT is planned against the current catalog. So the
// probe trusts only row versions nothing has updated or deleted (xmax = 0):
// a unique (attrelid, attname) row never touched since it was written is
// the current one whatever the snapshot's age. Anything else (a change, or
// a row version the snapshot may hold stale) takes the slow path, which
// asks the planner: pg_typeof of each key column of the transition table,
// resolved against the current catalog, with 42703 (undefined column)
// caught. Its subtransaction writes nothing, so it takes no XID. Nothing
// here depends on the isolation level.
//
// The probe is a PERFORM counted by FOUND or ROW_COUNT: the same rows as a
// count(*) subquery compared in an IF, without its aggregate and subplan
// (measured: 35 k instructions per statement instead of 63 k, against
// 75 k for a whole single-row INSERT).
func (in Instance) CaptureGuard(p *CapturePlan, event string) string {
	var rel string
	switch event {
	case "insert", "update":
		rel = "trellis_new"
	case "delete":
		rel = "trellis_old"
	default:
		return ""
	}
	cols := append(append([]model.KeyCol{}, p.Key...), p.AltCols()...)
	types := append(append([]uint32{}, p.KeyTypes...), p.AltTypes...)
	names := make([]string, len(cols))
	pairs := make([]string, len(cols))
	now := make([]string, len(cols))
	want := make([]string, len(cols))
	for i, k := range cols {
		names[i] = base.Lit(k.Name)
		oid := model.Itoa(int(types[i]))
		pairs[i] = "(" + base.Lit(k.Name) + "::name, " + oid + "::oid)"
		now[i] = "pg_typeof((SELECT x." + base.Ident(k.Name) + " FROM " + rel + " x LIMIT 0))::oid"
		want[i] = oid + "::oid"
	}
	// One unique-index probe per key column on pg_attribute (attrelid,
	// attname) in one SPI statement.
	probe := `  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN (` + strings.Join(names, ", ") + `)
    AND NOT attisdropped AND (attname, atttypid) IN (` + strings.Join(pairs, ", ") + `) AND xmax = 0;
`
	miss := "NOT FOUND"
	if len(cols) > 1 {
		probe += "  GET DIAGNOSTICS v_n = ROW_COUNT;\n"
		miss = "v_n <> " + model.Itoa(len(cols))
	}
	return probe + `  IF ` + miss + ` THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[` + strings.Join(now, ", ") + `] = ARRAY[` + strings.Join(want, ", ") + `];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO ` + in.Table("_change_log") + ` (src_table, key, op, origin_lsn)
      VALUES (` + base.Lit(p.Table) + `, NULL, 'schema', pg_current_wal_insert_lsn());
      RETURN NULL;
    END IF;
  END IF;`
}

// truncateRecord keeps the new relfilenode a TRUNCATE gave the table, in the
// truncating transaction, so the rewrite check below does not take a
// captured truncate for a rewrite behind capture's back.
//
// pg_relation_filenode reads the relation cache, never pg_class under the
// writer's snapshot: in REPEATABLE READ or SERIALIZABLE, a snapshot older
// than another committed change of the table's pg_class row (a concurrent
// TRUNCATE) sees that row's old version as well as this truncate's new one,
// and a scalar subquery over pg_class failed the application's TRUNCATE
// with 21000. The bookkeeping UPDATE itself can meet a concurrent
// truncate's in those isolation levels (40001); the application's TRUNCATE
// must not fail for it, so that failure is swallowed: the stored relfilenode
// then stays stale and the rewrite check rebuilds the readers, a false
// positive that costs a rebuild, never correctness.
func (in Instance) truncateRecord(p *CapturePlan) string {
	return "  BEGIN\n    UPDATE " + in.Table("_captured_tables") + " SET relfilenode = pg_relation_filenode(TG_RELID)\n" +
		"    WHERE table_name = " + base.Lit(p.Table) + " AND relfilenode IS NOT NULL;\n" +
		"  EXCEPTION WHEN serialization_failure THEN NULL;\n  END;\n"
}

// PinOutputs sets, for the transaction, every output setting a key's
// rendering reads to the value capture pins it to, so keys rendered in it
// read as capture logs them.
func PinOutputs() string {
	var sets []string
	for _, o := range outputPins {
		sets = append(sets, "SET LOCAL "+o.name+" = "+o.value)
	}
	return strings.Join(sets, "; ")
}
