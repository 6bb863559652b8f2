package intercept

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
	"github.com/trellis-proxy/trellis-proxy/router"
)

// Type OIDs of the values the proxy emits itself (surface spec §4).
const (
	oidBool      = 16
	oidInt8      = 20
	oidText      = 25
	oidJSONB     = 3802
	oidTextArray = 1009
	oidVoid      = 2278
)

func field(name string, oid uint32) pgproto3.FieldDescription {
	size := int16(-1)
	switch oid {
	case oidBool:
		size = 1
	case oidInt8:
		size = 8
	case oidVoid:
		size = 4
	}
	return pgproto3.FieldDescription{Name: []byte(name), DataTypeOID: oid, DataTypeSize: size, TypeModifier: -1}
}

// appliedFields is the row type trellis.applied (surface §3.2), column by
// column as Postgres describes SELECT * over a composite-returning function.
var appliedFields = []pgproto3.FieldDescription{
	field("kind", oidText), field("target", oidText), field("target_table", oidText),
	field("id", oidInt8), field("status", oidText), field("source_table", oidText),
	field("version", oidInt8), field("source_columns", oidJSONB), field("cardinality", oidText),
	field("relationship", oidJSONB), field("warnings", oidTextArray), field("resumed", oidTextArray),
	field("added", oidTextArray), field("dropped", oidTextArray), field("altered", oidTextArray),
}

// appliedValues lists a row's values in appliedFields order; nil is NULL.
func appliedValues(a *engine.Applied) []any {
	str := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	i64 := func(p *int64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	obj := func(m map[string]string) any {
		if m == nil {
			return nil
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	arr := func(s []string) any {
		if s == nil {
			return nil
		}
		return s
	}
	return []any{
		str(a.Kind), str(a.Target), str(a.TargetTable), i64(a.ID), str(a.Status), str(a.SourceTable),
		i64(a.Version), obj(a.SourceColumns), str(a.Cardinality), obj(a.Relationship),
		arr(a.Warnings), arr(a.Resumed), arr(a.Added), arr(a.Dropped), arr(a.Altered),
	}
}

// writeApplied sends a statement's reply: its notice and warnings (as far as
// the session's client_min_messages lets them through), one row, its tag.
func (x *execution) writeApplied(ctx context.Context, a *engine.Applied, tag string) error {
	var notice, warning bool
	if a.Notice != "" || len(a.Warnings) > 0 {
		notice, warning = x.messageLevels(ctx)
	}
	if a.Notice != "" && notice {
		if err := x.w.Notice(&pgerr.Error{Severity: pgerr.SeverityNotice, Code: pgerr.SuccessfulCompletion, Message: a.Notice}); err != nil {
			return err
		}
	}
	for _, w := range a.Warnings {
		if !warning {
			break
		}
		if err := x.w.Notice(&pgerr.Error{Severity: "WARNING", Code: pgerr.Warning, Message: w}); err != nil {
			return err
		}
	}
	return x.writeRow(appliedFields, appliedValues(a), tag)
}

// messageLevels reads the session's client_min_messages on the lent
// connection (it is not reported by ParameterStatus, and a Trellis statement
// is rare enough for one round trip) and says whether a NOTICE and a WARNING
// pass it, as Postgres decides for its own messages. Unreadable: both pass.
func (x *execution) messageLevels(ctx context.Context) (notice, warning bool) {
	var level string
	if err := (querier{x.up}).QueryRow(ctx, "SELECT pg_catalog.current_setting('client_min_messages')").Scan(&level); err != nil {
		return true, true
	}
	switch level {
	case "error":
		return false, false
	case "warning":
		return false, true
	}
	return true, true
}

// writeRow sends a one-row result, each value encoded in the format the
// client asked for in Bind (text when it asked for none).
func (x *execution) writeRow(fields []pgproto3.FieldDescription, values []any, tag string) error {
	m := pgtype.NewMap()
	out := make([]pgproto3.FieldDescription, len(fields))
	row := make([][]byte, len(values))
	for k, f := range fields {
		f.Format = x.format(k)
		out[k] = f
		if values[k] == nil {
			continue
		}
		if f.DataTypeOID == oidVoid {
			row[k] = []byte{} // Postgres sends void as an empty value
			continue
		}
		b, err := m.Encode(f.DataTypeOID, f.Format, values[k], nil)
		if err != nil {
			return pgerr.Newf(pgerr.InternalError, "encoding column %s: %v", f.Name, err)
		}
		if b == nil {
			b = []byte{}
		}
		row[k] = b
	}
	if err := x.w.RowDescription(out); err != nil {
		return err
	}
	if err := x.w.DataRow(row); err != nil {
		return err
	}
	return x.w.CommandComplete(tag)
}

func (x *execution) format(col int) int16 {
	f := x.c.ResultFormats
	switch {
	case !x.c.Extended || len(f) == 0:
		return pgtype.TextFormatCode
	case len(f) == 1:
		return f[0]
	case col < len(f):
		return f[col]
	}
	return pgtype.TextFormatCode
}

// callFields is the result description of a proxy-only call.
func callFields(c *router.Call) []pgproto3.FieldDescription {
	switch c.Func {
	case "apply", "define":
		return appliedFields
	case "await_converged":
		return []pgproto3.FieldDescription{field(c.Column, oidVoid)}
	case "try_await_converged":
		return []pgproto3.FieldDescription{field(c.Column, oidBool)}
	default:
		return []pgproto3.FieldDescription{field(c.Column, oidText)}
	}
}

// callParamOIDs gives the parameter types of a proxy-only call's signature,
// for a Describe of a prepared call whose client named no types.
func callParamOIDs(c *router.Call) []uint32 {
	switch c.Func {
	case "await_converged", "try_await_converged", "await_live":
		return []uint32{oidText, oidInt8}
	case "await_self_check":
		return []uint32{oidInt8, oidInt8}
	case "apply", "define":
		return []uint32{oidText}
	}
	return nil
}
