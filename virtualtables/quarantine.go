package virtualtables

func init() {
	internalHelpers = append(internalHelpers, "_release_key")
}

// quarantineSQL is the part of the surface script for held keys (surface
// §6.3, §6.5): quarantined_rows, sample_quarantined, release_key. It runs
// after surfaceSQL (it reads trellis.poisoned and quarantine_status) and
// grants its own view. A column address pages the failing rows of a column
// the column fuse paused.
const quarantineSQL = `
-- §6.3: held keys, visible like trellis.poisoned. The cursor is
-- <byte length of src_table>:<src_table><key>.
-- (Reads storage itself: views are dropped by name on upgrade, without CASCADE.)
CREATE VIEW {{S}}.quarantined_rows WITH (security_barrier = true) AS
  SELECT coalesce(c.relname::text, d.compiled #>> '{spec,target,name}') AS target,
         coalesce(c.relname::text, d.compiled #>> '{spec,target,name}') AS transform,
         NULL::text AS column_name, p.src_table::text AS src_table, p.key::text AS key,
         p.error::text AS error_message, p.sqlstate::text AS sqlstate, p.poisoned_at::timestamptz AS failed_at,
         (octet_length(p.src_table)::text || ':' || p.src_table || p.key)::text AS cursor
  FROM {{S}}._poison p JOIN {{S}}._definitions d ON d.id = p.definition_id
  LEFT JOIN pg_class c ON c.oid = d.target_oid
  WHERE has_table_privilege(d.target_oid, 'SELECT')
    AND coalesce(has_table_privilege(to_regclass(p.src_table), 'SELECT'), false)
  UNION ALL
  SELECT coalesce(c.relname::text, d.compiled #>> '{spec,target,name}') || '.' || f.column_name,
         coalesce(c.relname::text, d.compiled #>> '{spec,target,name}'),
         f.column_name::text, f.src_table::text, f.key::text, f.error::text, f.sqlstate::text, f.failed_at::timestamptz,
         (octet_length(f.src_table)::text || ':' || f.src_table || f.key)::text
  FROM {{S}}._column_failures f
  JOIN {{S}}._paused_columns pc ON pc.definition_id = f.definition_id AND pc.column_name = f.column_name
  JOIN {{S}}._definitions d ON d.id = f.definition_id
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

-- §6.5, the privileged part: runs as the workers' role. The acting role must
-- be one the session could become and must own the target (as PAUSE).
CREATE FUNCTION {{S}}._release_key(acting regrole, transform text, src regclass, key text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '30s' AS $fn$
DECLARE
  def_id int8;
  target_oid oid;
  tname text;
  o pg_lsn;
BEGIN
  IF acting IS NULL OR NOT pg_has_role(session_user, acting, 'MEMBER') THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('permission denied to act as %s', acting),
      DETAIL = 'trellis: permission/MissingPrivilege';
  END IF;
  SELECT d.id, d.target_oid INTO def_id, target_oid
  FROM {{S}}._definitions d LEFT JOIN pg_class c ON c.oid = d.target_oid
  WHERE coalesce(c.relname::text, d.compiled #>> '{spec,target,name}') = _release_key.transform
  ORDER BY d.id LIMIT 1;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = '42704', MESSAGE = format('transform %s does not exist', _release_key.transform),
      DETAIL = 'trellis: not_found/TransformNotFound';
  END IF;
  IF NOT coalesce(pg_has_role(acting, (SELECT c.relowner FROM pg_class c WHERE c.oid = target_oid), 'USAGE'), false) THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('must be owner of transform %s', _release_key.transform),
      DETAIL = 'trellis: permission/NotOwner';
  END IF;
  SELECT format('%I.%I', n.nspname, c.relname) INTO tname
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = src;
  -- Waits (lock_timeout 30 s) for a drain page skipping the key.
  DELETE FROM {{S}}._poison p WHERE p.definition_id = def_id AND p.src_table = tname AND p.key = _release_key.key
  RETURNING p.origin_lsn INTO o;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = '42704',
      MESSAGE = format('key %L of %s is not held for %s', _release_key.key, coalesce(tname, src::text), _release_key.transform),
      DETAIL = 'trellis: not_found/KeyNotHeld';
  END IF;
  DELETE FROM {{S}}._key_deaths k WHERE k.definition_id = def_id AND k.src_table = tname AND k.key = _release_key.key;
  -- One re-derive of the key from its current row, carrying the least origin
  -- of the changes skipped while it was held (NULL: unknown, blocks every token).
  INSERT INTO {{S}}._change_log (src_table, key, op, definition_id, origin_lsn, hop)
  VALUES (tname, _release_key.key, 'rederive', def_id, o, 0);
  RAISE NOTICE '%', format('released key %s of %s for %s; it is re-derived from its current row',
    _release_key.key, tname, _release_key.transform);
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
