package proxy

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/router"
	"github.com/trellis-proxy/trellis-proxy/wire"
)

// relations answers trellis.config and trellis.proxy_workers (surface
// §11.1) from this process's configuration and its workers' states. The
// router splices the rows into the client's statement, so WHERE, joins and
// ORDER BY around them are Postgres's.
type relations struct {
	cfg      Config
	engine   *engine.Engine
	database string
	upstream string // host:port and sslmode, never credentials
	started  time.Time
	version  string

	mu                 sync.Mutex
	listen, httpListen string
	dataDir            string
}

func newRelations(cfg Config, e *engine.Engine, database string, up wire.UpstreamConfig, version string) *relations {
	upstream := up.Address + " sslmode=" + up.SSLMode
	if up.Network == "unix" {
		upstream = up.Address
	}
	if version == "" {
		version = "dev"
	}
	return &relations{cfg: cfg, engine: e, database: database, upstream: upstream, started: time.Now(), version: version}
}

// serving records what is known once the listeners are open.
func (r *relations) serving(listen, httpListen, dataDir string) {
	r.mu.Lock()
	r.listen, r.httpListen, r.dataDir = listen, httpListen, dataDir
	r.mu.Unlock()
}

var (
	configColumns = columns("schema text", "target_schema text", "database text", "upstream text", "listen text",
		"http_listen text", "staging text", "staging_held bool", "drain_workers int4", "pool_max_size int4",
		"pool_wait_timeout_ms int8", "call_budget_ms int8", "lock_timeout_ms int8", "embedded bool", "data_dir text",
		"proxy_id text", "proxy_version text", "catalog_version int4", "started_at timestamptz")
	workerColumns = columns("worker_id text", "kind text", "state text", "since timestamptz", "detail text")
)

// columns reads "name type" pairs, the way the catalog stubs declare them.
func columns(defs ...string) []router.Column {
	out := make([]router.Column, len(defs))
	for k, d := range defs {
		name, typ, _ := strings.Cut(d, " ")
		out[k] = router.Column{Name: name, Type: typ}
	}
	return out
}

func (r *relations) rows(name string) *router.Relation {
	str := func(s string) *string { return &s }
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	ms := func(d time.Duration) *string { return str(strconv.FormatInt(d.Milliseconds(), 10)) }
	ts := func(t time.Time) *string { return str(t.UTC().Format("2006-01-02 15:04:05.999999Z07:00")) }
	switch name {
	case "config":
		r.mu.Lock()
		listen, httpListen, dataDir := r.listen, r.httpListen, r.dataDir
		r.mu.Unlock()
		c := r.cfg
		return &router.Relation{Columns: configColumns, Rows: [][]*string{{
			str(c.Schema), str(c.TargetSchema), str(r.database), str(r.upstream), str(listen), opt(httpListen),
			str(c.Staging), str(strconv.FormatBool(r.engine.StagingHeld())), str(strconv.Itoa(c.DrainWorkers)),
			str(strconv.Itoa(c.PoolMaxSize)), ms(c.PoolWaitTimeout), ms(c.CallBudget), ms(c.LockTimeout),
			str(strconv.FormatBool(c.Upstream == "")), opt(dataDir), str(c.ProcessID), str(r.version),
			str(strconv.Itoa(engine.FormatVersion())), ts(r.started),
		}}}
	case "proxy_workers":
		rel := &router.Relation{Columns: workerColumns}
		for _, w := range r.engine.Workers() {
			rel.Rows = append(rel.Rows, []*string{str(w.ID), str(w.Kind), str(w.State), ts(w.Since), opt(w.Detail)})
		}
		return rel
	}
	return nil
}
