package proxy

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/internal/intercept"
	"github.com/trellis-proxy/trellis-proxy/virtualtables"
)

// trellisSide is what a proxy runs besides the relay: the workers' pool, the
// engine with its workers, and the interceptor that executes Trellis
// statements for clients.
type trellisSide struct {
	migrate     func(ctx context.Context) (string, error)
	pool        *pgxpool.Pool
	engine      *engine.Engine
	interceptor *intercept.Interceptor
	database    string
}

// newTrellisSide connects the workers' pool with the upstream URL's
// credentials (the workers' role, surface §2.3) and migrates the catalog
// unless told not to.
func newTrellisSide(ctx context.Context, cfg Config, upURL string, reg *prometheus.Registry, log *slog.Logger) (*trellisSide, error) {
	pc, err := pgxpool.ParseConfig(upURL)
	if err != nil {
		return nil, &FlagError{"upstream", redact(err.Error())}
	}
	pc.MaxConns = int32(cfg.PoolMaxSize)
	host, _ := os.Hostname()
	pc.ConnConfig.RuntimeParams["application_name"] = "trellis-proxy workers"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connecting the workers' pool: %s", oneLine(err))
	}
	drain := cfg.DrainWorkers
	if drain == 0 {
		drain = -1 // engine.Config: 0 means the default, negative means none
	}
	e := engine.New(pool, engine.Config{
		Schema: cfg.Schema, TargetSchema: cfg.TargetSchema, Staging: engine.StagingMode(cfg.Staging),
		DrainWorkers: drain, ProcessID: fmt.Sprintf("%s:%d", host, os.Getpid()),
	})
	migrate := func(ctx context.Context) (string, error) {
		if err := e.Migrate(ctx); err != nil {
			return "", err
		}
		// The SQL surface (views and functions) follows every migration.
		if err := virtualtables.Install(ctx, pool, cfg.Schema); err != nil {
			return "", err
		}
		return fmt.Sprintf("catalog %s is up to date", cfg.Schema), nil
	}
	if cfg.Migrate {
		if _, err := migrate(ctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("migrating the catalog %q: %s", cfg.Schema, oneLine(err))
		}
		log.Info("catalog ready", "schema", cfg.Schema)
	}
	t := &trellisSide{migrate: migrate, pool: pool, engine: e, database: pc.ConnConfig.Database}
	t.interceptor = intercept.New(intercept.Config{
		Engine: e, Schema: cfg.Schema, Database: t.database, Logger: log, Migrate: migrate,
		MetricsText: func() string { return metricsText(reg) },
	})
	return t, nil
}

// run runs the engine's workers until ctx ends.
func (t *trellisSide) run(ctx context.Context) error {
	err := t.engine.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (t *trellisSide) close() {
	t.engine.Close()
	t.pool.Close()
}

// metricsText renders the registry as GET /metrics does.
func metricsText(reg *prometheus.Registry) string {
	mfs, err := reg.Gather()
	if err != nil {
		return "# error gathering metrics: " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return "# error encoding metrics: " + err.Error()
		}
	}
	return b.String()
}
