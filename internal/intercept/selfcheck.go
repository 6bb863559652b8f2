package intercept

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
	"github.com/trellis-proxy/trellis-proxy/router"
)

// awaitSelfCheck answers trellis.await_self_check(id, timeout_ms) (surface
// §9): it waits until the job finishes and returns its outcome, or failed /
// cancelled.
func (x *execution) awaitSelfCheck(ctx context.Context, c *router.Call, args []*string, fields []pgproto3.FieldDescription) error {
	if len(args) != 2 || args[0] == nil {
		return callShape(c, "trellis.await_self_check(id int8, timeout_ms int8)")
	}
	id, err := strconv.ParseInt(strings.TrimSpace(*args[0]), 10, 64)
	if err != nil {
		return pgerr.Newf(pgerr.InvalidParameterValue, "invalid self-check id %q", *args[0])
	}
	timeout, err := waitTimeout(args[1])
	if err != nil {
		return err
	}
	if err := x.refuseSnapshotWait(ctx); err != nil {
		return err
	}
	out, err := x.i.cfg.Engine.AwaitSelfCheck(ctx, id, timeout)
	if err != nil {
		if pgerr.CodeOf(err) == pgerr.UndefinedObject && x.up.TxStatus() == 'T' {
			if pe, ok := pgerr.As(err); ok {
				return pe.WithHint("a job registered by this open transaction runs only after COMMIT: wait after COMMIT")
			}
		}
		return err
	}
	return x.writeRow(fields, []any{out}, "SELECT 1")
}
