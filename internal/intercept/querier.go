package intercept

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/wire"
)

// querier adapts the client's lent upstream connection to engine.Querier, so
// the engine runs a statement's SQL in the client's own transaction (D6).
// Values travel as text parameters, never inside the SQL (D9).
type querier struct{ up wire.Upstream }

var _ engine.Querier = querier{}

func (q querier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	enc, err := encodeArgs(args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := q.up.Exec(ctx, sql, enc...)
	return pgconn.NewCommandTag(tag), err
}

func (q querier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	enc, err := encodeArgs(args)
	if err != nil {
		return nil, err
	}
	res, err := q.up.Query(ctx, sql, enc...)
	if err != nil {
		return nil, err
	}
	return newRows(res), nil
}

func (q querier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return rowOf{rows}
}

// encodeArgs turns Go values into what wire.Upstream binds: the basic kinds
// pass as they are; anything else (arrays, maps for jsonb, pgtype values)
// is encoded to Postgres's text format by pgtype.
func encodeArgs(args []any) ([]any, error) {
	var m *pgtype.Map
	out := make([]any, len(args))
	for k, a := range args {
		switch a.(type) {
		case nil, string, []byte, bool, int, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64:
			out[k] = a
			continue
		case time.Time:
			out[k] = a.(time.Time).Format("2006-01-02 15:04:05.999999Z07:00")
			continue
		}
		if m == nil {
			m = pgtype.NewMap()
		}
		t, ok := m.TypeForValue(a)
		if !ok {
			return nil, fmt.Errorf("argument $%d: cannot encode %T", k+1, a)
		}
		b, err := m.Encode(t.OID, pgtype.TextFormatCode, a, nil)
		if err != nil {
			return nil, fmt.Errorf("argument $%d: %w", k+1, err)
		}
		if b == nil {
			out[k] = nil
		} else {
			out[k] = string(b)
		}
	}
	return out, nil
}

// rows is pgx.Rows over a fully read text-format result.
type rows struct {
	res    *wire.Result
	fields []pgconn.FieldDescription
	at     int
	m      *pgtype.Map
	err    error
}

func newRows(res *wire.Result) *rows {
	fields := make([]pgconn.FieldDescription, len(res.Fields))
	for k, f := range res.Fields {
		fields[k] = pgconn.FieldDescription{Name: string(f.Name), TableOID: f.TableOID, TableAttributeNumber: f.TableAttributeNumber,
			DataTypeOID: f.DataTypeOID, DataTypeSize: f.DataTypeSize, TypeModifier: f.TypeModifier, Format: pgtype.TextFormatCode}
	}
	return &rows{res: res, fields: fields, at: -1, m: pgtype.NewMap()}
}

func (r *rows) Close()                                       {}
func (r *rows) Err() error                                   { return r.err }
func (r *rows) CommandTag() pgconn.CommandTag                { return pgconn.NewCommandTag(r.res.Tag) }
func (r *rows) FieldDescriptions() []pgconn.FieldDescription { return r.fields }
func (r *rows) Conn() *pgx.Conn                              { return nil }
func (r *rows) TypeMap() *pgtype.Map                         { return r.m }

func (r *rows) Next() bool {
	if r.err != nil || r.at+1 >= len(r.res.Rows) {
		r.at = len(r.res.Rows)
		return false
	}
	r.at++
	return true
}

func (r *rows) RawValues() [][]byte {
	if r.at < 0 || r.at >= len(r.res.Rows) {
		return nil
	}
	return r.res.Rows[r.at]
}

func (r *rows) Scan(dest ...any) error {
	vals := r.RawValues()
	if vals == nil {
		return errors.New("scan called without a current row")
	}
	if len(dest) != len(vals) {
		r.err = fmt.Errorf("number of field descriptions must equal number of destinations, got %d and %d", len(vals), len(dest))
		return r.err
	}
	for k, d := range dest {
		if d == nil {
			continue
		}
		if err := r.m.Scan(r.fields[k].DataTypeOID, pgtype.TextFormatCode, vals[k], d); err != nil {
			r.err = fmt.Errorf("scanning column %s: %w", r.fields[k].Name, err)
			return r.err
		}
	}
	return nil
}

func (r *rows) Values() ([]any, error) {
	vals := r.RawValues()
	out := make([]any, len(vals))
	for k, v := range vals {
		if v == nil {
			continue
		}
		t, ok := r.m.TypeForOID(r.fields[k].DataTypeOID)
		if !ok {
			out[k] = string(v)
			continue
		}
		val, err := t.Codec.DecodeValue(r.m, t.OID, pgtype.TextFormatCode, v)
		if err != nil {
			return nil, err
		}
		out[k] = val
	}
	return out, nil
}

type rowOf struct{ rows pgx.Rows }

func (r rowOf) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	return r.rows.Scan(dest...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
