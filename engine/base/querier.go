package base

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs SQL. Trellis statements take one so they run inside the
// caller's transaction: pgx.Tx, *pgx.Conn, *pgxpool.Pool and *pgxpool.Conn
// satisfy it, as does the proxy's handle on a client's upstream connection.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
