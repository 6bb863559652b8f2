package engine

// ALTER TRANSFORM t ADD e AS f / ALTER f AS e / DROP f (grammar spec §4.6),
// in the caller's transaction (D6) by the target's owner (D9).
//
// The clauses edit the stored statement text (grammar.ApplyAlter), the
// merged definition is validated exactly as define validates (against the
// live catalog as the caller sees it, probes under a savepoint, no source
// row read), then the caller's role adds and drops the target's columns and
// a catalog function stores the re-rendered statement and compiled form with
// a version bump. Added and altered fields are built by one rebuild of the
// definition started after commit (waiting_to_backfill, backfilling, live):
// every source key is re-derived with the new formulas, and a row is
// rewritten only where a value differs, so until its key's chunk runs an
// added column reads NULL and an altered one its old value, while pages
// compute new changes with the new formulas as soon as the build starts.
// A DROP alone needs no build.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// alterFunctions are the catalog parts of ALTER TRANSFORM and the readers
// lookup of ALTER's and DROP's DependentsBlockDrop (D9).
const alterFunctions = `
-- Lines "reader.field reads t.col" for every field or GROUP BY key of
-- another definition reading one of cols of def_id's target (all columns
-- when cols is NULL), for the target's owner.
CREATE OR REPLACE FUNCTION {{S}}._field_readers(acting regrole, def_id bigint, cols text[]) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE bare text;
BEGIN
  PERFORM {{S}}._lifecycle_check(acting, def_id);
  SELECT compiled #>> '{spec,target,name}' INTO bare FROM {{S}}._definitions WHERE id = def_id;
  RETURN ARRAY(SELECT format('%s.%s reads %s.%s', x.reader, x.field, bare, x.col)
               FROM {{S}}._column_readers(def_id, cols) x)
      -- readers of no column (constant fields over the key) when all count
      || ARRAY(SELECT format('%s reads %s', o.compiled #>> '{spec,target,name}', bare)
               FROM {{S}}._definitions d JOIN {{S}}._definition_reads r ON r.table_name = d.target_table AND r.definition_id <> d.id
               JOIN {{S}}._definitions o ON o.id = r.definition_id
               WHERE d.id = def_id AND cols IS NULL
                 AND NOT EXISTS (SELECT 1 FROM {{S}}._column_readers(def_id, NULL) x WHERE x.reader_id = o.id)
               ORDER BY 1);
END $fn$;

-- Stores an altered definition: statement and compiled form, version + 1,
-- the columns it reads (bound now, as the caller sees the catalog), and a
-- rebuild when fields were added or changed. A dropped field's pause and
-- failure bookkeeping goes with it. statement NULL is a no-op that returns
-- the current version.
CREATE OR REPLACE FUNCTION {{S}}._lifecycle_alter(acting regrole, def_id bigint, statement text, new_compiled jsonb,
    read_columns jsonb, dropped text[], rebuilt text[]) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; v bigint; blockers text;
BEGIN
  SELECT * INTO d FROM {{S}}._lifecycle_check(acting, def_id) AS x(id bigint, status text, owner_role oid, target_table text);
  IF d.status IN ('paused', 'quarantined') THEN
    RAISE EXCEPTION 'transform % is %', d.target_table, d.status USING ERRCODE = '55000',
      DETAIL = 'trellis: conflict/TransformNotLive';
  END IF;
  IF statement IS NULL THEN
    RETURN (SELECT version FROM {{S}}._definitions WHERE id = def_id);
  END IF;
  IF (SELECT kind FROM {{S}}._definitions WHERE id = def_id) <> 'one_to_one' THEN
    RAISE EXCEPTION 'transform % has GROUP BY; only 1-1 transforms can be altered', d.target_table USING ERRCODE = '0A000',
      DETAIL = 'trellis: validation/UnsupportedAlter';
  END IF;
  SELECT string_agg(format('%s.%s reads %s', x.reader, x.field, x.col), '; ') INTO blockers
  FROM {{S}}._column_readers(def_id, dropped) x;
  IF blockers IS NOT NULL THEN
    RAISE EXCEPTION 'cannot drop fields of %: %', d.target_table, blockers USING ERRCODE = '2BP01',
      DETAIL = 'trellis: conflict/DependentsBlockDrop';
  END IF;
  UPDATE {{S}}._definitions SET definition_sql = statement, compiled = new_compiled, version = version + 1,
    verified = {{S}}._trusted_writer(),
    status = CASE WHEN cardinality(rebuilt) > 0 THEN 'waiting_to_backfill' ELSE status END,
    build_started_at = CASE WHEN cardinality(rebuilt) > 0 THEN NULL ELSE build_started_at END,
    build_rows_done = CASE WHEN cardinality(rebuilt) > 0 THEN NULL ELSE build_rows_done END,
    build_rows_estimated = CASE WHEN cardinality(rebuilt) > 0 THEN NULL ELSE build_rows_estimated END,
    status_detail = CASE WHEN cardinality(rebuilt) > 0
      THEN coalesce(status_detail, '{}') || jsonb_build_object('rebuild_reason', 'alter') ELSE status_detail END
  WHERE id = def_id RETURNING version INTO v;
  IF cardinality(rebuilt) > 0 THEN
    -- Skip tasks a chunk holds: it waits on the definition row we lock;
    -- they belong to a superseded build and are never run.
    DELETE FROM {{S}}._build_tasks WHERE id IN (SELECT id FROM {{S}}._build_tasks WHERE definition_id = def_id FOR UPDATE SKIP LOCKED);
  END IF;
  UPDATE {{S}}._definition_reads r SET columns = read_columns, bindings = (
    SELECT coalesce(jsonb_agg(jsonb_build_object('name', c.name, 'attnum', a.attnum, 'typid', a.atttypid,
             'typmod', a.atttypmod, 'coll', a.attcollation, 'type', format_type(a.atttypid, a.atttypmod)) ORDER BY c.name), '[]')
    FROM (SELECT DISTINCT x AS name FROM jsonb_array_elements_text(read_columns ||
            coalesce((SELECT jsonb_agg(k -> 'name') FROM jsonb_array_elements(new_compiled -> 'key') k), '[]')) x) c
    LEFT JOIN pg_attribute a ON a.attrelid = r.table_oid AND a.attname = c.name AND a.attnum > 0 AND NOT a.attisdropped)
  WHERE r.definition_id = def_id AND r.role IN ('source', 'upstream_target');
  DELETE FROM {{S}}._paused_columns WHERE definition_id = def_id AND column_name = ANY (dropped);
  DELETE FROM {{S}}._column_failures WHERE definition_id = def_id AND column_name = ANY (dropped);
  -- Failures and inherited pauses of a changed field were about its old
  -- formula; a local pause survives. Pauses upstream are inherited anew.
  DELETE FROM {{S}}._column_failures f WHERE f.definition_id = def_id AND f.column_name = ANY (rebuilt)
    AND NOT EXISTS (SELECT 1 FROM {{S}}._paused_columns pc WHERE pc.definition_id = def_id AND pc.column_name = f.column_name);
  DELETE FROM {{S}}._column_pause_edges WHERE down_definition_id = def_id AND down_column = ANY (rebuilt);
  DELETE FROM {{S}}._paused_columns WHERE definition_id = def_id AND column_name = ANY (rebuilt) AND NOT local;
  PERFORM {{S}}._pause_inherit(acting, def_id);
  RETURN v;
END $fn$;

-- ALTER TRANSFORM's change of the target's columns, as the workers' role
-- that owns it (D20): names and type oids/typmods, never SQL. Readers of a
-- dropped column block it, as in _lifecycle_alter.
CREATE OR REPLACE FUNCTION {{S}}._alter_target(acting regrole, def_id bigint, dropped text[], added jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE rel regclass; ddl text[] := '{}'; c jsonb; col text; blockers text;
BEGIN
  PERFORM {{S}}._lifecycle_check(acting, def_id);
  SELECT target_oid::regclass INTO rel FROM {{S}}._definitions WHERE id = def_id;
  SELECT string_agg(format('%s.%s reads %s', x.reader, x.field, x.col), '; ') INTO blockers
  FROM {{S}}._column_readers(def_id, dropped) x;
  IF blockers IS NOT NULL THEN
    RAISE EXCEPTION 'cannot drop fields of %: %', rel, blockers USING ERRCODE = '2BP01',
      DETAIL = 'trellis: conflict/DependentsBlockDrop';
  END IF;
  FOREACH col IN ARRAY coalesce(dropped, '{}') LOOP
    IF col LIKE '\_\_%' OR col = ANY (ARRAY(SELECT k ->> 'name' FROM {{S}}._definitions d, jsonb_array_elements(d.compiled -> 'key') k WHERE d.id = def_id)) THEN
      RAISE EXCEPTION 'column % of % is not a field', col, rel USING ERRCODE = '22023';
    END IF;
    ddl := ddl || format('DROP COLUMN %I', col);
  END LOOP;
  FOR c IN SELECT x FROM jsonb_array_elements(coalesce(added, '[]')) x LOOP
    IF coalesce(c ->> 'n', '') = '' OR NOT EXISTS (SELECT 1 FROM pg_type WHERE oid = (c ->> 't')::oid) THEN
      RAISE EXCEPTION 'malformed column % of %', c ->> 'n', rel USING ERRCODE = '22023';
    END IF;
    IF NOT has_type_privilege(acting, (c ->> 't')::oid, 'USAGE') THEN
      RAISE EXCEPTION 'permission denied for type %', format_type((c ->> 't')::oid, NULL) USING ERRCODE = '42501';
    END IF;
    ddl := ddl || format('ADD COLUMN %I %s', c ->> 'n', format_type((c ->> 't')::oid, coalesce((c ->> 'm')::int4, -1)));
  END LOOP;
  IF cardinality(ddl) > 0 THEN
    EXECUTE format('ALTER TABLE %s %s', rel, array_to_string(ddl, ', '));
  END IF;
END $fn$;

GRANT EXECUTE ON FUNCTION {{S}}._alter_target(regrole, bigint, text[], jsonb), {{S}}._field_readers(regrole, bigint, text[]),
  {{S}}._lifecycle_alter(regrole, bigint, text, jsonb, jsonb, text[], text[]) TO PUBLIC;
`

func (e *Engine) applyAlter(ctx context.Context, q Querier, st *grammar.AlterTransformStmt, opts ApplyOptions) (*Applied, error) {
	d, err := e.lockTransform(ctx, q, st.Target)
	if err != nil {
		return nil, err
	}
	tname := grammar.QuoteIdentIfNeeded(d.target)
	if frozen(d.status) {
		return nil, pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "transform %s is %s and cannot be altered", d.text, d.status).
			WithClass("conflict", "TransformNotLive").WithPosition(int(st.Target.Pos)).
			WithDetail("status: %s", d.status).
			WithHint("RESUME TRANSFORM %s first, or DROP TRANSFORM %s and define it anew", tname, tname)
	}
	parsed, err := grammar.Parse(d.statement)
	if err != nil {
		return nil, err
	}
	def, ok := parsed.(*grammar.TransformStmt)
	if !ok {
		return nil, fmt.Errorf("definition %d: stored text is not a TRANSFORM", d.id)
	}
	if def.Source.Schema == "" && d.c != nil { // as in revalidate
		def.Source.Schema = d.c.Spec.Source.Schema
	}
	merged, res, err := grammar.ApplyAlter(def, st)
	if err != nil {
		return nil, err
	}
	id := d.id
	a := &Applied{Kind: "altered", Target: d.target, TargetTable: d.text, ID: &id, Status: d.status, SourceTable: d.source,
		Warnings: []string{}, Added: nonNil(res.Added), Dropped: nonNil(res.Dropped), Altered: nonNil(res.Altered), CommandTag: st.CommandTag()}
	if !res.Changed() {
		var v int64
		if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT %s._lifecycle_alter(current_user::regrole, $1, NULL, NULL, NULL, NULL, NULL)`,
			ident(e.cfg.Schema)), d.id).Scan(&v); err != nil {
			return nil, err
		}
		a.Version = &v
		types := map[string]string{}
		if src, err := e.resolveSource(ctx, q, def.Source); err == nil {
			types = src.types
		}
		a.SourceColumns = d.c.sourceColumns(types)
		a.Notice = fmt.Sprintf("transform %s unchanged: every clause was a no-op", d.text)
		return a, nil
	}

	// Stages C and D of define on the merged definition (grammar §9.2).
	src, err := e.resolveSource(ctx, q, merged.Source)
	if err != nil {
		return nil, err
	}
	resolution, err := grammar.Resolve(merged, &src.Source)
	if err != nil {
		return nil, err
	}
	spec, err := buildSpec(merged, src, resolution, e.cfg.TargetSchema)
	if err != nil {
		return nil, err
	}
	if err := spec.check(e.cfg.TargetSchema); err != nil {
		return nil, err
	}
	// D8's probes for the new formulas only: kept ones passed them at
	// define (or their last ALTER), and what the source did to them since
	// is the health check's and RESUME's business. resolveTypes below
	// still plans every formula against the live source.
	probe := *spec
	probe.Fields = nil
	for _, f := range spec.Fields {
		if slices.Contains(res.Added, f.Name) || slices.Contains(res.Altered, f.Name) {
			probe.Fields = append(probe.Fields, f)
		}
	}
	if err := e.checkFormulas(ctx, q, merged, src, &probe); err != nil {
		return nil, err
	}
	clausePos := func(field string) int {
		for _, c := range st.Clauses {
			if c.Field.Name == field {
				return int(c.Field.Pos)
			}
		}
		return int(st.Target.Pos)
	}
	for _, col := range res.Dropped {
		var lines []string
		if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT %s._field_readers(current_user::regrole, $1, $2)`, ident(e.cfg.Schema)),
			d.id, []string{col}).Scan(&lines); err != nil {
			return nil, err
		}
		if len(lines) > 0 {
			return nil, pgerr.Newf(pgerr.DependentObjectsStillExist, "cannot drop field %s of %s: other transforms read it", grammar.QuoteIdentIfNeeded(col), d.text).
				WithClass("conflict", "DependentsBlockDrop").WithPosition(clausePos(col)).
				WithDetail("subject: %s.%s\n%s", d.target, col, strings.Join(lines, "\n")).
				WithHint("alter or drop the readers first (leaves inward)")
		}
	}
	now := &compiled{Spec: *spec, SourceText: d.c.SourceText, TargetText: d.c.TargetText, Key: d.c.Key, KeyNullable: d.c.KeyNullable}
	if err := e.resolveTypes(ctx, q, now); err != nil {
		return nil, err
	}
	oldType := map[string]string{}
	for i, f := range d.c.Spec.Fields {
		oldType[f.Name] = d.c.FieldTypes[i]
	}
	newType := map[string]string{}
	for i, f := range now.Spec.Fields {
		newType[f.Name] = now.FieldTypes[i]
	}
	for _, f := range res.Altered {
		if oldType[f] != newType[f] {
			fq := grammar.QuoteIdentIfNeeded(f)
			return nil, pgerr.Newf(pgerr.FeatureNotSupported, "ALTER TRANSFORM %s ALTER %s would change the column's type from %s to %s", tname, fq, oldType[f], newType[f]).
				WithClass("validation", "UnsupportedAlter").WithPosition(clausePos(f)).
				WithDetail("transform: %s; field: %s; current type: %s; new type: %s; an edit never rewrites the table", d.target, f, oldType[f], newType[f]).
				WithHint("DROP %s, ADD <formula> AS %s in one ALTER TRANSFORM (the column is rebuilt), or cast the formula to %s", fq, fq, oldType[f])
		}
	}

	// The target is the workers' (D20): its columns change through a
	// SECURITY DEFINER function, its lock held until the caller's
	// transaction ends.
	if len(res.Dropped)+len(res.Added) > 0 {
		added := &tableShape{}
		for _, f := range res.Added {
			added.add(f, newType[f], false)
		}
		if len(added.Cols) > 0 {
			if err := added.resolve(ctx, q); err != nil {
				return nil, err
			}
		}
		raw, _ := json.Marshal(nonNilCols(added.Cols))
		if _, err := q.Exec(ctx, fmt.Sprintf(`SELECT %s._alter_target(current_user::regrole, $1, $2, $3)`, ident(e.cfg.Schema)),
			d.id, nonNil(res.Dropped), raw); err != nil {
			return nil, err
		}
	}
	raw, err := json.Marshal(now)
	if err != nil {
		return nil, err
	}
	cols, _ := json.Marshal(spec.reads())
	rebuilt := append(slices.Clone(res.Added), res.Altered...)
	var v int64
	if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT %s._lifecycle_alter(current_user::regrole, $1, $2, $3, $4, $5, $6)`, ident(e.cfg.Schema)),
		d.id, spec.Statement, raw, cols, nonNil(res.Dropped), nonNil(rebuilt)).Scan(&v); err != nil {
		return nil, err
	}
	a.Version = &v
	a.SourceColumns = now.sourceColumns(src.types)
	var parts []string
	for _, x := range []struct {
		verb  string
		names []string
	}{{"added", res.Added}, {"altered", res.Altered}, {"dropped", res.Dropped}} {
		if len(x.names) > 0 {
			quoted := make([]string, len(x.names))
			for i, n := range x.names {
				quoted[i] = grammar.QuoteIdentIfNeeded(n)
			}
			parts = append(parts, x.verb+" "+strings.Join(quoted, ", "))
		}
	}
	a.Notice = fmt.Sprintf("transform %s altered: %s", d.text, strings.Join(parts, "; "))
	if len(rebuilt) > 0 {
		a.Status = "waiting_to_backfill"
		a.Notice += "; the changed columns are rebuilt in the background"
		if opts.InTransactionBlock {
			a.Notice += " once this transaction commits"
		}
		if _, err := q.Exec(ctx, "SELECT pg_notify($1, 'alter')", e.channel("wake")); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// sourceColumns is what the reply shows as source_columns: the columns the
// definition reads, with their types in the live source, and a 1-1
// target's key.
func (c *compiled) sourceColumns(types map[string]string) map[string]string {
	out := map[string]string{}
	for _, n := range c.Spec.reads() {
		out[n] = types[n]
	}
	if !c.Spec.IsAggregate() {
		for _, k := range c.Key {
			out[k.Name] = k.FullType
		}
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
