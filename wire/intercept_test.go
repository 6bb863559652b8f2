package wire

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// fuzzInterceptor answers statements starting with "local" itself.
type fuzzInterceptor struct{}

func (fuzzInterceptor) Classify(_ *SessionInfo, sql string) Route {
	if strings.HasPrefix(sql, "local") {
		return Route{Local: true, Kind: "fuzz"}
	}
	return PassThroughRoute
}

func (fuzzInterceptor) Execute(ctx context.Context, s *SessionInfo, c *Call, up Upstream, w ResultWriter) error {
	if strings.Contains(c.SQL, "forward") {
		return up.Forward(ctx, "select 1", w)
	}
	w.RowDescription([]pgproto3.FieldDescription{TextField("x")})
	w.DataRow([][]byte{[]byte("1")})
	return w.CommandComplete("SELECT 1")
}
