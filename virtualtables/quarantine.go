package virtualtables

// quarantineSQL is the part of the surface script for held keys (surface
// §6.3, §6.5): quarantined_rows, sample_quarantined, release_key (over the
// engine's privileged _release_key). It runs after surfaceSQL (it reads
// trellis.poisoned and quarantine_status) and grants its own view. A column address pages the failing rows of a column
// the column fuse paused.
const quarantineSQL = `
-- §6.3: held keys, visible like trellis.poisoned. The cursor is
-- <byte length of src_table>:<src_table><key>.
-- (Reads the read views itself: views are dropped by name on upgrade, without CASCADE.)
CREATE VIEW {{S}}.quarantined_rows WITH (security_barrier = true) AS
  SELECT coalesce(c.relname::text, d.recorded_name) AS target,
         coalesce(c.relname::text, d.recorded_name) AS transform,
         NULL::text AS column_name, p.src_table::text AS src_table, p.key::text AS key,
         p.error::text AS error_message, p.sqlstate::text AS sqlstate, p.poisoned_at::timestamptz AS failed_at,
         (octet_length(p.src_table)::text || ':' || p.src_table || p.key)::text AS cursor
  FROM {{S}}._read_held_keys p JOIN {{S}}._read_definitions d ON d.id = p.definition_id
  LEFT JOIN pg_class c ON c.oid = d.target_oid
  WHERE has_table_privilege(d.target_oid, 'SELECT')
    AND coalesce(has_table_privilege(to_regclass(p.src_table), 'SELECT'), false)
  UNION ALL
  SELECT coalesce(c.relname::text, d.recorded_name) || '.' || f.column_name,
         coalesce(c.relname::text, d.recorded_name),
         f.column_name::text, f.src_table::text, f.key::text, f.error::text, f.sqlstate::text, f.failed_at::timestamptz,
         (octet_length(f.src_table)::text || ':' || f.src_table || f.key)::text
  FROM {{S}}._read_column_failures f
  JOIN {{S}}._read_paused_columns pc ON pc.definition_id = f.definition_id AND pc.column_name = f.column_name
  JOIN {{S}}._read_definitions d ON d.id = f.definition_id
  LEFT JOIN pg_class c ON c.oid = d.target_oid
  WHERE has_table_privilege(d.target_oid, 'SELECT')
    AND coalesce(has_table_privilege(to_regclass(f.src_table), 'SELECT'), false);

CREATE FUNCTION {{S}}.sample_quarantined(target text, after_cursor text DEFAULT NULL, max_rows int8 DEFAULT 100)
RETURNS TABLE (src_table text, key text, error_message text, cursor text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  t text := split_part(sample_quarantined.target, '.', 1);
  c text := nullif(substr(sample_quarantined.target, length(t) + 2), '');
  at text := NULL;
  ak text := NULL;
  n int8;
  rest bytea;
BEGIN
  IF max_rows IS NULL OR max_rows < 1 THEN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('max_rows must be at least 1, not %s', coalesce(max_rows::text, 'NULL')),
      DETAIL = 'trellis: validation/BadArgument';
  END IF;
  -- Unknown or unreadable transform: 42704 / 42501, as quarantine_status.
  PERFORM 1 FROM {{S}}.quarantine_status(t);
  IF after_cursor IS NOT NULL THEN
    IF after_cursor !~ '^(0|[1-9][0-9]{0,8}):' THEN
      RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('malformed cursor %L', after_cursor),
        DETAIL = 'trellis: validation/BadCursor', HINT = 'pass back a cursor sample_quarantined returned, or NULL';
    END IF;
    n := split_part(after_cursor, ':', 1)::int8;
    rest := convert_to(substr(after_cursor, length(split_part(after_cursor, ':', 1)) + 2), 'UTF8');
    IF n > octet_length(rest) THEN
      RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('malformed cursor %L', after_cursor),
        DETAIL = 'trellis: validation/BadCursor', HINT = 'pass back a cursor sample_quarantined returned, or NULL';
    END IF;
    BEGIN
      at := convert_from(substring(rest from 1 for n::int), 'UTF8');
      ak := convert_from(substring(rest from n::int + 1), 'UTF8');
    EXCEPTION WHEN character_not_in_repertoire OR untranslatable_character THEN
      RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('malformed cursor %L', after_cursor),
        DETAIL = 'trellis: validation/BadCursor', HINT = 'pass back a cursor sample_quarantined returned, or NULL';
    END;
  END IF;
  RETURN QUERY
    SELECT q.src_table, q.key, q.error_message, q.cursor FROM {{S}}.quarantined_rows q
    WHERE q.transform = t AND q.column_name IS NOT DISTINCT FROM c
      AND (at IS NULL OR (q.src_table COLLATE "C", q.key COLLATE "C") > (at COLLATE "C", ak COLLATE "C"))
    ORDER BY q.src_table COLLATE "C", q.key COLLATE "C"
    LIMIT max_rows;
END
$fn$;

-- §6.5: resolves source_table through the caller's search_path, then acts as
-- the caller's current role.
CREATE FUNCTION {{S}}.release_key(transform text, source_table text, key text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  rel regclass := pg_catalog.to_regclass(source_table);
BEGIN
  IF rel IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = '42704',
      MESSAGE = pg_catalog.format('key %L of %s is not held for %s', key, source_table, transform),
      DETAIL = 'trellis: not_found/KeyNotHeld';
  END IF;
  PERFORM {{S}}._release_key(pg_catalog.quote_ident(current_user)::regrole, transform, rel, key);
END
$fn$;

GRANT SELECT ON {{S}}.quarantined_rows TO PUBLIC;
`
