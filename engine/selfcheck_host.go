package engine

import (
	"context"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine/selfcheck"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
)

// checkHost is the engine as the self-check sees it (selfcheck.Host).
type checkHost struct{ e *Engine }

var _ selfcheck.Host = checkHost{}

func (h checkHost) Compiled(id, version int64, raw []byte) (*sqlgen.Def, error) {
	cd, err := h.e.w.CompiledFor(id, version, raw)
	if err != nil {
		return nil, err
	}
	return cd.Def, nil
}

func (h checkHost) Instance() sqlgen.Instance { return h.e.w.Inst() }

func (h checkHost) WatermarkToken(ctx context.Context) (string, error) {
	return h.e.WatermarkToken(ctx)
}

func (h checkHost) AwaitConverged(ctx context.Context, token string, timeout time.Duration) error {
	return h.e.AwaitConverged(ctx, token, timeout)
}

func (h checkHost) DrainedSnapSQL() string         { return h.e.w.DrainedSnapSQL() }
func (h checkHost) SignalDrained()                 { h.e.w.SignalDrained() }
func (h checkHost) DrainedCh() <-chan struct{}     { return h.e.w.DrainedCh() }
func (h checkHost) Working(id, state, what string) { h.e.w.States.Working(id, state, what) }

func (h checkHost) PageDone(target string, took time.Duration, divergences int) {
	h.e.w.TMetrics().SelfCheckPage(target, took, divergences)
}

// AwaitSelfCheck waits until self-check job id finishes (proxy-answered
// await_self_check) and returns its outcome (done) or its state (failed,
// cancelled).
func (e *Engine) AwaitSelfCheck(ctx context.Context, id int64, timeout time.Duration) (string, error) {
	return e.w.Checks.Await(ctx, id, timeout)
}
