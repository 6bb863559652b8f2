package ddl

import (
	"context"
	"fmt"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Key columns are rendered, compared and cast by the workers on every
// drain, so a key type must carry no code a tenant owns (D20): a domain's
// CHECK, an enum's or a user type's input and output functions, a user
// cast or operator would all run as the workers. Keys are therefore of
// built-in (pg_catalog) base types only; arrays are refused too, since
// their element type may be a user's. This is wider than grammar spec
// §6.4's table (which also refuses numeric, float and interval source
// keys and allows enums): the engine renders every built-in base type
// under pinned output settings (TestCapturePinsOnlyWhatKeyTypesRead), and
// enums are user types.

// keyTypeRow is what checkKeyType needs to know of one key column's type.
type keyTypeRow struct {
	name, typ         string // column name, its type as format_type writes it
	typtype           string // pg_type.typtype ('b' base, 'd' domain, 'e' enum, ...)
	category          string // pg_type.typcategory ('A' array)
	builtin           bool   // the type lives in pg_catalog
	collation         string // the column's collation, "" when none
	deterministicColl bool
}

// checkSourceKeyTypes refuses a source whose primary key has a column of a
// type not allowed as a key.
func checkSourceKeyTypes(ctx context.Context, q Querier, rel uint32, relText string) error {
	rows, err := q.Query(ctx, `
		SELECT a.attname, format_type(t.oid, a.atttypmod), t.typtype::text, t.typcategory::text,
		       t.typnamespace = 'pg_catalog'::regnamespace, coalesce(co.collname, ''), coalesce(co.collisdeterministic, true)
		FROM pg_index i
		CROSS JOIN LATERAL pg_catalog.unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		JOIN pg_type t ON t.oid = a.atttypid
		LEFT JOIN pg_collation co ON co.oid = a.attcollation
		WHERE i.indrelid = $1 AND i.indisprimary ORDER BY k.ord`, rel)
	if err != nil {
		return err
	}
	defer rows.Close()
	var cols []keyTypeRow
	for rows.Next() {
		var r keyTypeRow
		if err := rows.Scan(&r.name, &r.typ, &r.typtype, &r.category, &r.builtin, &r.collation, &r.deterministicColl); err != nil {
			return err
		}
		cols = append(cols, r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range cols {
		if err := checkKeyType(r, fmt.Sprintf("primary key column %s of %s", r.name, relText), "UnsupportedPrimaryKeyType"); err != nil {
			return err
		}
	}
	return nil
}

// checkGroupKeyTypes refuses GROUP BY keys whose types (as the source's
// probe resolved them, format_type spelling) are not allowed as keys.
func checkGroupKeyTypes(ctx context.Context, q Querier, spec *model.Spec, base []string) error {
	rows, err := q.Query(ctx, `SELECT t.typtype::text, t.typcategory::text, t.typnamespace = 'pg_catalog'::regnamespace
		FROM pg_catalog.unnest($1::text[]) WITH ORDINALITY AS b(name, i) JOIN pg_type t ON t.oid = to_regtype(b.name) ORDER BY b.i`, base)
	if err != nil {
		return err
	}
	var types []keyTypeRow
	for rows.Next() {
		r := keyTypeRow{deterministicColl: true}
		if err := rows.Scan(&r.typtype, &r.category, &r.builtin); err != nil {
			rows.Close()
			return err
		}
		types = append(types, r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(types) != len(spec.GroupBy) {
		return fmt.Errorf("resolving the GROUP BY key types %v: %d of %d found", base, len(types), len(spec.GroupBy))
	}
	for i, g := range spec.GroupBy {
		r := types[i]
		r.name, r.typ = g.Name, base[i]
		if err := checkKeyType(r, fmt.Sprintf("GROUP BY key %s", g.Name), "UnsupportedGroupByKeyType"); err != nil {
			return err
		}
	}
	return nil
}

func checkKeyType(r keyTypeRow, what, variant string) error {
	if !r.builtin || r.typtype != "b" || r.category == "A" {
		kind := "type"
		switch {
		case r.category == "A":
			kind = "array type"
		case r.typtype == "d":
			kind = "domain"
		case r.typtype == "e":
			kind = "enum"
		case !r.builtin:
			kind = "user-defined type"
		}
		return pgerr.Newf(pgerr.FeatureNotSupported, "%s has %s %s, which cannot be a key", what, kind, r.typ).
			WithClass("validation", variant).
			WithDetail("column: %s, type: %s", r.name, r.typ).
			WithHint("keys must be of built-in types (integers, text, uuid, dates and times, bytea, ...); domains, enums, arrays and user types carry code the workers would run")
	}
	if !r.deterministicColl {
		return pgerr.Newf(pgerr.FeatureNotSupported, "%s has the nondeterministic collation %s, which cannot order or compare keys", what, r.collation).
			WithClass("validation", "NondeterministicKeyCollation").
			WithHint("use a deterministic collation for the key column")
	}
	return nil
}

// checkRowSecurity refuses a source whose row level security applies to
// the acting role (the client, on its own connection): the workers read
// with row_security off, so the target would hold rows its owner may not
// see (D9).
func checkRowSecurity(ctx context.Context, q Querier, rel uint32, relText string) error {
	var active bool
	if err := q.QueryRow(ctx, `SELECT row_security_active($1::oid)`, rel).Scan(&active); err != nil {
		return err
	}
	if active {
		return pgerr.Newf(pgerr.FeatureNotSupported, "row level security on %s applies to %s: a transform would copy rows its owner may not see", relText, "the defining role").
			WithClass("validation", "SourceHasRowSecurity").
			WithHint("define it as the table's owner or a role with BYPASSRLS, or disable row level security on %s", relText)
	}
	return nil
}
