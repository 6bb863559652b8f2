// Package intercept is the glue the architecture puts in cmd: it implements
// wire.Interceptor with the router (which statements are ours), the engine
// (what they do) and the proxy-only calls of the surface spec.
//
// A Trellis statement runs on the client's own upstream connection, inside
// the client's transaction (D6). In autocommit it is wrapped in a
// transaction of its own, so a statement's several catalog writes commit or
// roll back together; a multi-statement string that mixes SQL and Trellis
// statements is wrapped as one implicit transaction, which is what Postgres
// does with such a string.
package intercept

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
	"github.com/trellis-proxy/trellis-proxy/router"
	"github.com/trellis-proxy/trellis-proxy/wire"
)

// Config wires an Interceptor.
type Config struct {
	Engine *engine.Engine
	// Schema is the catalog schema (the router also accepts "trellis").
	Schema string
	// Database is the one database the proxy serves Trellis for (surface
	// §1.1); sessions on other databases are relayed untouched.
	Database string
	// MetricsText returns what GET /metrics would (trellis.metrics_text()).
	MetricsText func() string
	// Migrate runs the catalog migration for trellis.migrate() and returns
	// its one-line report.
	Migrate func(ctx context.Context) (string, error)
	// Relations returns the rows of trellis.config and
	// trellis.proxy_workers (surface §11.1); nil leaves them to their
	// catalog stubs.
	Relations func(name string) *router.Relation
	// CallBudget bounds each Trellis statement and proxy-answered call
	// other than a wait (surface §13); 0 means none.
	CallBudget time.Duration
	// LockTimeout bounds the lock waits of a Trellis statement's SQL in the
	// client's session, unless the session's lock_timeout is shorter
	// (surface §13); 0 leaves the session's value alone.
	LockTimeout time.Duration
	Logger      *slog.Logger
}

// Interceptor implements wire.Interceptor and wire.Describer.
type Interceptor struct {
	cfg    Config
	router router.Options
	log    *slog.Logger
}

// New returns the proxy's interceptor.
func New(cfg Config) *Interceptor {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	opts := router.Options{Schema: strings.ToLower(cfg.Schema), CatalogName: cfg.Schema, Relations: cfg.Relations}
	return &Interceptor{cfg: cfg, router: opts, log: cfg.Logger}
}

var (
	_ wire.Interceptor    = (*Interceptor)(nil)
	_ wire.Describer      = (*Interceptor)(nil)
	_ wire.ParamDescriber = (*Interceptor)(nil)
)

// Classify routes a statement; ordinary SQL costs the router's prefilter
// only.
func (i *Interceptor) Classify(s *wire.SessionInfo, sql string) wire.Route {
	plan := router.Classify(sql, i.router)
	if plan == nil {
		return wire.PassThroughRoute
	}
	kind := "relation" // only rewritten (surface §1.1, §11.1)
	for k := range plan.Units {
		if plan.Units[k].Kind != router.PassThrough {
			kind = plan.Units[k].StatementName()
			break
		}
	}
	// A rewritten Parse goes upstream as a Postgres prepared statement; a
	// simple Query runs in Execute, which maps error positions back.
	rewrite, _ := plan.Rewritten()
	return wire.Route{Local: true, Kind: kind, Payload: plan, Rewrite: rewrite}
}

// Execute runs a classified query string at its barrier.
func (i *Interceptor) Execute(ctx context.Context, s *wire.SessionInfo, c *wire.Call, up wire.Upstream, w wire.ResultWriter) error {
	plan, ok := c.Route.Payload.(*router.Plan)
	if !ok {
		return pgerr.New(pgerr.InternalError, "intercepted statement without a plan")
	}
	if i.cfg.Database != "" && s.Database != i.cfg.Database {
		return pgerr.Newf(pgerr.FeatureNotSupported, "Trellis is served for database %q only", i.cfg.Database).
			WithClass("unsupported", "OtherDatabase").WithHint("connect to database %q to use Trellis statements", i.cfg.Database)
	}
	if c.Extended && len(plan.Units) > 1 {
		return pgerr.New(pgerr.SyntaxError, "cannot insert multiple commands into a prepared statement")
	}
	x := &execution{i: i, s: s, c: c, up: up, w: w}
	return x.run(ctx, plan)
}

// execution is one Execute call.
type execution struct {
	i  *Interceptor
	s  *wire.SessionInfo
	c  *wire.Call
	up wire.Upstream
	w  wire.ResultWriter
	// wrapped is true while the proxy holds a transaction it opened itself.
	wrapped bool
	// last is true while the string's last statement runs.
	last bool
}

func (x *execution) run(ctx context.Context, plan *router.Plan) error {
	if x.up.TxStatus() == 'I' && needsWrap(plan) {
		if _, err := x.up.Exec(ctx, "BEGIN"); err != nil {
			return err
		}
		x.wrapped = true
	}
	for k := range plan.Units {
		u := &plan.Units[k]
		x.last = k == len(plan.Units)-1
		uctx, cancel := x.budget(ctx, u)
		err := x.unit(uctx, u)
		if err != nil && context.Cause(uctx) == errCallBudget {
			err = x.budgetExceeded(u)
		}
		cancel()
		if err != nil {
			return x.fail(ctx, u, err)
		}
	}
	if x.wrapped {
		x.wrapped = false
		if _, err := x.up.Exec(ctx, "COMMIT"); err != nil {
			return err
		}
	}
	return nil
}

// errCallBudget is the cancel cause of a unit whose call budget ran out.
var errCallBudget = errors.New("call budget exhausted")

// budget bounds a Trellis statement or a proxy-answered call other than a
// wait by the call budget (surface §13), pool waits included. When it runs
// out, the statement in flight on the client's backend is cancelled as a
// client's CancelRequest would cancel it, so the session's own, shorter
// statement_timeout keeps working untouched and no round trip is spent
// setting and restoring one.
func (x *execution) budget(ctx context.Context, u *router.Unit) (context.Context, context.CancelFunc) {
	b := x.i.cfg.CallBudget
	if b <= 0 || u.Kind == router.PassThrough || (u.Kind == router.ProxyCall && isWait(u.Call.Func)) {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, b, errCallBudget)
}

func isWait(fn string) bool { return strings.HasPrefix(fn, "await_") || fn == "try_await_converged" }

func (x *execution) budgetExceeded(u *router.Unit) error {
	secs := strconv.FormatFloat(x.i.cfg.CallBudget.Seconds(), 'f', -1, 64)
	return pgerr.Newf(pgerr.QueryCanceled, "Trellis call exceeded its %s s budget", secs).
		WithClass("timeout", "CallBudgetExceeded").
		WithDetail("%s ran out of time; nothing it did was kept", u.StatementName()).
		WithHint("look for locks other sessions hold on the tables it touches (pg_locks), or raise --call-budget")
}

// needsWrap says whether an autocommit string needs the proxy's own
// transaction: a Trellis statement makes several catalog writes that must
// commit together, and a mixed string runs all-or-nothing like Postgres runs
// it. A string with its own transaction control is left to it.
func needsWrap(plan *router.Plan) bool {
	for _, u := range plan.Units {
		if u.Kind == router.PassThrough && isTransactionControl(u.Text) {
			return false
		}
	}
	for _, u := range plan.Units {
		if u.Kind == router.Statement {
			return true
		}
		if u.Kind == router.ProxyCall && (u.Call.Func == "apply" || u.Call.Func == "define") {
			return true
		}
	}
	return len(plan.Units) > 1
}

func isTransactionControl(text string) bool {
	switch strings.ToLower(router.LeadingWord(text)) {
	case "begin", "start", "commit", "end", "rollback", "abort", "savepoint", "release", "prepare":
		return true
	}
	return false
}

// unit runs one statement of the string.
func (x *execution) unit(ctx context.Context, u *router.Unit) error {
	if x.up.TxStatus() == 'E' && u.Kind != router.PassThrough {
		return pgerr.New(pgerr.InFailedSQLTransaction, "current transaction is aborted, commands ignored until end of transaction block")
	}
	switch u.Kind {
	case router.PassThrough:
		// COPY TO STDOUT streams frames only the raw relay passes on (its
		// error positions then stay the piece's own).
		if (u.CharOffset == 0 && len(u.Splices) == 0) || strings.EqualFold(router.LeadingWord(u.Text), "copy") {
			return x.up.Forward(ctx, u.Text, x.w)
		}
		return x.up.Forward(ctx, u.Text, positionWriter{x.w, u})
	case router.Statement:
		// The session's settings first: in a LATIN1 session the parse error
		// would blame bytes that are fine in the client's encoding.
		if err := x.checkSessionSettings(u); err != nil {
			return err
		}
		if u.Err != nil {
			return u.Err
		}
		var a *engine.Applied
		err := x.underLockTimeout(ctx, u.Stmt.CommandTag(), int(u.Stmt.Position()), x.keepsSettings(), func() (err error) {
			a, err = x.i.cfg.Engine.Apply(ctx, querier{x.up}, u.Stmt, engine.ApplyOptions{InTransactionBlock: !x.wrapped})
			return err
		})
		if err != nil {
			return shift(err, u.CharOffset)
		}
		return x.writeApplied(ctx, a, a.CommandTag)
	case router.ProxyCall:
		return x.call(ctx, u)
	}
	return nil
}

// keepsSettings says whether the session goes on after the statement
// running now: anything but the last statement of the proxy's own
// transaction, whose COMMIT ends what the statement SET LOCAL.
func (x *execution) keepsSettings() bool { return !x.wrapped || !x.last }

// fail ends the string after an error: the proxy's own transaction is
// rolled back; in the client's block the upstream transaction is made to
// fail too, so client and backend agree it is aborted (surface §3.3).
func (x *execution) fail(ctx context.Context, u *router.Unit, err error) error {
	var fwd *wire.ForwardedError
	relayed := errors.As(err, &fwd)
	switch {
	case x.wrapped:
		x.wrapped = false
		if _, rbErr := x.up.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
			x.i.log.Warn("rolling back after a failed Trellis statement", "error", rbErr)
		}
	case !relayed && x.up.TxStatus() == 'T':
		pe, ok := pgerr.As(err)
		code := pgerr.InternalError
		if ok {
			code = pe.Code
		}
		// The error the client sees is ours; this one only aborts the block.
		_, failErr := x.up.Exec(context.WithoutCancel(ctx), fmt.Sprintf("SELECT %s._fail($1, $2)", quoteIdent(x.i.cfg.Schema)),
			code, "a Trellis statement failed in this transaction")
		if failErr == nil {
			x.i.log.Warn("could not abort the client's transaction after a Trellis error", "statement", u.StatementName())
		}
	}
	return err
}

// shift moves a statement-relative error position to the whole string.
func shift(err error, offset int) error {
	if pe, ok := pgerr.As(err); ok && pe.Position > 0 && offset > 0 {
		return pe.ShiftPosition(offset)
	}
	return err
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Describe answers Describe for an intercepted statement.
func (i *Interceptor) Describe(s *wire.SessionInfo, sql string, r wire.Route) ([]pgproto3.FieldDescription, error) {
	plan, ok := r.Payload.(*router.Plan)
	if !ok || len(plan.Units) != 1 {
		return nil, nil
	}
	u := plan.Units[0]
	switch u.Kind {
	case router.Statement:
		if u.Err != nil {
			return nil, u.Err
		}
		return appliedFields, nil
	case router.ProxyCall:
		return callFields(u.Call), nil
	}
	return nil, nil
}

// DescribeParams gives a prepared proxy-only call the parameter types of the
// function's signature for each argument written as a bare $n.
func (i *Interceptor) DescribeParams(s *wire.SessionInfo, sql string, r wire.Route) []uint32 {
	plan, ok := r.Payload.(*router.Plan)
	if !ok || len(plan.Units) != 1 || plan.Units[0].Kind != router.ProxyCall {
		return nil
	}
	return plan.Units[0].Call.ParamOIDs(callParamOIDs(plan.Units[0].Call))
}

// checkSessionSettings refuses a statement the proxy and the server would
// read differently (grammar spec §2.2): with standard_conforming_strings off
// a backslash in a plain literal, and any client_encoding but UTF8.
func (x *execution) checkSessionSettings(u *router.Unit) error {
	if enc := x.s.ServerParameter("client_encoding"); enc != "" && !strings.EqualFold(enc, "UTF8") {
		return pgerr.Newf(pgerr.FeatureNotSupported, "Trellis statements need client_encoding UTF8, the session uses %s", enc).
			WithClass("parse", "UnsupportedSessionSetting").WithHint("SET client_encoding = 'UTF8' before the statement")
	}
	if x.s.ServerParameter("standard_conforming_strings") == "off" {
		if pos, ok := grammar.BackslashInPlainString(u.Text); ok {
			return pgerr.New(pgerr.FeatureNotSupported, "a backslash in a plain string literal is ambiguous with standard_conforming_strings off").
				WithClass("parse", "UnsupportedSessionSetting").WithPosition(int(pos) + u.CharOffset).
				WithHint("SET standard_conforming_strings = on, or write the literal as E'...'")
		}
	}
	return nil
}

// positionWriter relays a forwarded piece's reply, moving the position of
// its error from the piece (as rewritten) to the client's whole string, so
// psql's caret lands under the mistake (surface §12.1).
type positionWriter struct {
	wire.ResultWriter
	u *router.Unit
}

func (w positionWriter) Error(e *pgerr.Error) error {
	c := *e
	c.Position = w.u.MapPosition(e.Position)
	return w.ResultWriter.Error(&c)
}
