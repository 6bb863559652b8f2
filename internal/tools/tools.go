//go:build tools

// Package tools pins the chosen dependencies in go.mod before every package imports them.
package tools

import (
	_ "github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/pgproto3"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/pganalyze/pg_query_go/v6"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/common/expfmt"
	_ "golang.org/x/sync/errgroup"
	_ "pgregory.net/rapid"
)
