package ddl

// D20: a transform's target and ledger are owned by the workers' role, so
// no tenant can attach a trigger, rule, default, check, generated column or
// expression index that would run as the workers when they write. The
// tables are made by the SECURITY DEFINER _define (catalog/functions/1_privileged.sql) from
// structured data (names, type oids, typmods, collation names), never SQL
// text; the defining role is the transform's owner in the catalog and is
// granted SELECT WITH GRANT OPTION. tamperSQL is the second wall: a table
// that grows such an object anyway (a superuser can add one) pauses the
// transform with a capture_failure before the next worker write.

import (
	"context"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// The shapes are the model's (engine/model: TableShape); resolving their
// type names needs the caller's session.
type (
	tableShape = model.TableShape
	shapeCol   = model.ShapeCol
)

// resolveShape turns each column's type name (format_type's rendering, as the
// engine compiled it) into the oid and typmod the catalog function takes:
// the caller's session parses "NULL::type" and the row description says.
func resolveShape(ctx context.Context, q Querier, s *tableShape) error {
	exprs := make([]string, len(s.Cols))
	for i := range s.Cols {
		typ := s.Cols[i].Type
		if j := strings.LastIndex(typ, " COLLATE "); j >= 0 {
			s.Cols[i].Coll = typ[j+len(" COLLATE "):]
			typ = typ[:j]
		}
		exprs[i] = "NULL::" + typ
	}
	rows, err := q.Query(ctx, "SELECT "+strings.Join(exprs, ", ")+" LIMIT 0")
	if err != nil {
		return err
	}
	for i, fd := range rows.FieldDescriptions() {
		s.Cols[i].OID, s.Cols[i].Mod = fd.DataTypeOID, fd.TypeModifier
	}
	rows.Close()
	return rows.Err()
}

func nonNilCols(c []shapeCol) []shapeCol {
	if c == nil {
		return []shapeCol{}
	}
	return c
}
