package intercept

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
	"github.com/trellis-proxy/trellis-proxy/router"
)

// maxWait bounds every proxy wait (surface §8.2).
const maxWait = time.Hour

// call answers a proxy-only function (surface §8.2, §3.5, §11.2).
func (x *execution) call(ctx context.Context, u *router.Unit) error {
	c := u.Call
	args, err := x.callArgs(ctx, c)
	if err != nil {
		return err
	}
	fields := callFields(c)
	switch c.Func {
	case "await_converged", "try_await_converged":
		token, timeout, err := tokenAndTimeout(args)
		if err != nil {
			return err
		}
		if err := x.refuseWaitInTransaction(ctx, token); err != nil {
			return err
		}
		err = x.i.cfg.Engine.AwaitConvergedAs(ctx, token, timeout, x.s.User)
		if c.Func == "try_await_converged" {
			if pgerr.CodeOf(err) == pgerr.QueryCanceled && ctx.Err() == nil {
				return x.writeRow(fields, []any{false}, "SELECT 1")
			}
			if err != nil {
				return err
			}
			return x.writeRow(fields, []any{true}, "SELECT 1")
		}
		if err != nil {
			return err
		}
		return x.writeRow(fields, []any{""}, "SELECT 1")
	case "await_live":
		if len(args) != 2 || args[0] == nil {
			return callShape(c, "trellis.await_live(target text, timeout_ms int8)")
		}
		timeout, err := waitTimeout(args[1])
		if err != nil {
			return err
		}
		if err := x.refuseSnapshotWait(ctx); err != nil {
			return err
		}
		if err := x.refuseInvisibleTransform(ctx, *args[0]); err != nil {
			return err
		}
		if err := x.i.cfg.Engine.AwaitLive(ctx, engine.TableName{Name: *args[0]}, timeout); err != nil {
			return err
		}
		return x.writeRow(fields, []any{"live"}, "SELECT 1")
	case "await_self_check":
		return x.awaitSelfCheck(ctx, c, args, fields)
	case "apply", "define":
		if len(args) != 1 || args[0] == nil {
			return callShape(c, "trellis."+c.Func+"(statement text)")
		}
		return x.applyText(ctx, c.Func, *args[0])
	case "metrics_text":
		text := ""
		if x.i.cfg.MetricsText != nil {
			text = x.i.cfg.MetricsText()
		}
		text, err := x.scopeMetricsText(ctx, text)
		if err != nil {
			return err
		}
		return x.writeRow(fields, []any{text}, "SELECT 1")
	case "migrate":
		if x.up.TxStatus() != 'I' || x.wrapped {
			return pgerr.New(pgerr.ActiveSQLTransaction, "trellis.migrate() cannot run inside a transaction block").
				WithClass("transaction", "RefusedInTransaction").WithHint("call it in autocommit")
		}
		if x.i.cfg.Migrate == nil {
			return pgerr.New(pgerr.FeatureNotSupported, "this proxy cannot migrate its catalog")
		}
		if err := x.refuseNonWorkerMigrate(ctx); err != nil {
			return err
		}
		report, err := x.i.cfg.Migrate(ctx)
		if err != nil {
			return err
		}
		return x.writeRow(fields, []any{report}, "SELECT 1")
	}
	return pgerr.Newf(pgerr.FeatureNotSupported, "trellis.%s is not supported by this proxy yet", c.Func).
		WithClass("unsupported", "NotYetSupported")
}

// callArgs evaluates the call's arguments on the client's own backend, with
// the client's bound parameters, so $n, casts and calls of real trellis
// functions work (surface §8.2). Values come back as text; NULL is nil.
func (x *execution) callArgs(ctx context.Context, c *router.Call) ([]*string, error) {
	if c.NArgs == 0 {
		return nil, nil
	}
	params, err := x.params(c)
	if err != nil {
		return nil, err
	}
	res, err := x.up.Query(ctx, c.ArgsSQL, params...)
	if err != nil {
		return nil, err
	}
	if len(res.Rows) != 1 {
		return nil, pgerr.Newf(pgerr.InternalError, "evaluating the arguments of trellis.%s returned %d rows", c.Func, len(res.Rows))
	}
	out := make([]*string, len(res.Rows[0]))
	for k, v := range res.Rows[0] {
		if v != nil {
			s := string(v)
			out[k] = &s
		}
	}
	return out, nil
}

// params returns the client's bound parameters as text values.
func (x *execution) params(c *router.Call) ([]any, error) {
	if !x.c.Extended || len(x.c.Params) == 0 {
		return nil, nil
	}
	m := pgtype.NewMap()
	out := make([]any, len(x.c.Params))
	for k, p := range x.c.Params {
		if p == nil {
			continue
		}
		format := int16(0)
		switch f := x.c.ParamFormats; {
		case len(f) == 1:
			format = f[0]
		case k < len(f):
			format = f[k]
		}
		if format == pgtype.TextFormatCode {
			out[k] = string(p)
			continue
		}
		oids := x.c.ParamOIDs
		if len(oids) == 0 {
			// The client used the types DescribeParams gave it.
			oids = c.ParamOIDs(callParamOIDs(c))
		}
		oid := uint32(0)
		if k < len(oids) {
			oid = oids[k]
		}
		t, ok := m.TypeForOID(oid)
		if !ok {
			return nil, pgerr.Newf(pgerr.FeatureNotSupported, "binary parameter $%d of unknown type %d", k+1, oid)
		}
		v, err := t.Codec.DecodeValue(m, oid, pgtype.BinaryFormatCode, p)
		if err != nil {
			return nil, pgerr.Newf(pgerr.ProtocolViolation, "parameter $%d: %v", k+1, err)
		}
		b, err := m.Encode(oid, pgtype.TextFormatCode, v, nil)
		if err != nil {
			return nil, pgerr.Newf(pgerr.ProtocolViolation, "parameter $%d: %v", k+1, err)
		}
		out[k] = string(b)
	}
	return out, nil
}

var tokenPattern = regexp.MustCompile(`^[0-9A-F]{1,8}/[0-9A-F]{1,8}$`)

func tokenAndTimeout(args []*string) (string, time.Duration, error) {
	if len(args) != 2 {
		return "", 0, pgerr.New(pgerr.UndefinedFunction, "trellis.await_converged takes (token text, timeout_ms int8)")
	}
	if args[0] == nil || !tokenPattern.MatchString(*args[0]) {
		got := "NULL"
		if args[0] != nil {
			got = strconv.Quote(*args[0])
		}
		return "", 0, pgerr.Newf(pgerr.InvalidParameterValue, "invalid watermark token %s", got).
			WithHint("pass the text trellis.watermark_token() returned, e.g. 16/B374D848")
	}
	timeout, err := waitTimeout(args[1])
	return *args[0], timeout, err
}

func waitTimeout(arg *string) (time.Duration, error) {
	if arg == nil {
		return 0, pgerr.New(pgerr.InvalidParameterValue, "timeout_ms must not be NULL")
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(*arg), 10, 64)
	if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > maxWait {
		return 0, pgerr.Newf(pgerr.InvalidParameterValue, "timeout_ms must be between 0 and %d, got %s", maxWait.Milliseconds(), *arg)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// refuseWaitInTransaction applies surface §3.3: a wait cannot succeed for
// writes of the caller's own open transaction, nor be seen from a snapshot
// that cannot move.
func (x *execution) refuseWaitInTransaction(ctx context.Context, token string) error {
	if x.up.TxStatus() != 'T' {
		return nil
	}
	if err := x.refuseSnapshotWait(ctx); err != nil {
		return err
	}
	// The engine's catalog function (SECURITY DEFINER): the client's role
	// may not read the change log itself.
	res, err := x.up.Query(ctx, "SELECT "+quoteIdent(x.i.cfg.Schema)+"._has_captured_writes()")
	if err != nil {
		return err
	}
	if len(res.Rows) == 1 && string(res.Rows[0][0]) == "t" {
		return pgerr.New(pgerr.ActiveSQLTransaction, "cannot wait for convergence in a transaction that has written to captured tables").
			WithClass("transaction", "RefusedInTransaction").WithHint("its changes drain only after it commits: wait after COMMIT")
	}
	return nil
}

func (x *execution) refuseSnapshotWait(ctx context.Context) error {
	if x.up.TxStatus() != 'T' {
		return nil
	}
	res, err := x.up.Query(ctx, "SELECT current_setting('transaction_isolation')")
	if err != nil {
		return err
	}
	if len(res.Rows) == 1 && string(res.Rows[0][0]) != "read committed" {
		return pgerr.Newf(pgerr.ActiveSQLTransaction, "cannot wait inside a %s transaction", string(res.Rows[0][0])).
			WithClass("transaction", "RefusedInTransaction").
			WithHint("the transaction's snapshot cannot show rows that converge later: wait before BEGIN, or use READ COMMITTED")
	}
	return nil
}

// applyText runs trellis.apply(text) / trellis.define(text): one Trellis
// statement passed as a value, exactly as if sent bare. Errors locate the
// mistake with internal_position/internal_query (surface §3.5).
func (x *execution) applyText(ctx context.Context, fn, text string) error {
	internal := func(err error) error {
		pe, ok := pgerr.As(err)
		if !ok {
			return err
		}
		c := *pe
		if c.Position > 0 {
			c.InternalPosition, c.InternalQuery, c.Position = c.Position, text, 0
		}
		return &c
	}
	if !grammar.Recognize(text) {
		return pgerr.New(pgerr.InvalidParameterValue, "nothing was applied: the text is not a Trellis statement").
			WithHint("trellis.%s takes one TRANSFORM, RELATIONSHIP, PAUSE, RESUME, ALTER or DROP statement", fn)
	}
	st, err := grammar.Parse(strings.TrimRight(strings.TrimSpace(text), ";"))
	if err != nil {
		return internal(err)
	}
	if _, ok := st.(*grammar.TransformStmt); fn == "define" && !ok {
		return pgerr.Newf(pgerr.InvalidParameterValue, "nothing was applied: trellis.define takes a TRANSFORM statement, not %s", st.CommandTag()).
			WithHint("use trellis.apply for other statements")
	}
	var a *engine.Applied
	err = x.underLockTimeout(ctx, "trellis."+fn+"("+st.CommandTag()+")", 0, x.keepsSettings(), func() (err error) {
		a, err = x.i.cfg.Engine.Apply(ctx, querier{x.up}, st, engine.ApplyOptions{InTransactionBlock: !x.wrapped})
		return err
	})
	if err != nil {
		return internal(err)
	}
	return x.writeApplied(ctx, a, "SELECT 1")
}

func callShape(c *router.Call, signature string) error {
	return pgerr.Newf(pgerr.UndefinedFunction, "trellis.%s: wrong arguments", c.Func).
		WithClass("unsupported", "CallShape").WithHint("call it as %s", signature)
}

// refuseNonWorkerMigrate keeps trellis.migrate() to the workers' role, its
// members and superusers: the migration runs as the workers, so any other
// caller would make them take catalog locks and run DDL on her say.
func (x *execution) refuseNonWorkerMigrate(ctx context.Context) error {
	res, err := x.up.Query(ctx, "SELECT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)"+
		" OR pg_catalog.pg_has_role(current_user, "+quoteIdent(x.i.cfg.Schema)+"._instance_worker_role(), 'MEMBER')")
	if err != nil {
		return err
	}
	if len(res.Rows) == 1 && string(res.Rows[0][0]) == "t" {
		return nil
	}
	return pgerr.New(pgerr.InsufficientPrivilege, "permission denied for trellis.migrate()").
		WithClass("permission", "NotWorkerRole").
		WithHint("call it as the workers' role, a member of it, or a superuser")
}
