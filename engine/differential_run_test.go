package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

type engineSet struct {
	mu      sync.Mutex
	t       *testing.T
	pool    *pgxpool.Pool
	cfg     Config
	plant   worker.Plants
	running []*runningEngine
}

type runningEngine struct {
	e      *Engine
	cancel context.CancelFunc
	done   chan error
}

func (s *engineSet) start() *Engine {
	e := New(s.pool, s.cfg)
	e.w.Plant = s.plant
	if err := e.Migrate(context.Background()); err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	re := &runningEngine{e: e, cancel: cancel, done: make(chan error, 1)}
	go func() { re.done <- e.Run(ctx) }()
	s.mu.Lock()
	s.running = append(s.running, re)
	s.mu.Unlock()
	return e
}

func (s *engineSet) stopOldest() {
	s.mu.Lock()
	if len(s.running) == 0 {
		s.mu.Unlock()
		return
	}
	re := s.running[0]
	s.running = s.running[1:]
	s.mu.Unlock()
	re.cancel()
	if err := <-re.done; err != nil {
		s.t.Errorf("engine run: %v", err)
	}
	re.e.Close()
}

func (s *engineSet) any() *Engine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[len(s.running)-1].e
}

func (s *engineSet) stopAll() {
	for {
		s.mu.Lock()
		n := len(s.running)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		s.stopOldest()
	}
}

// diagnose describes a diverging definition's ledger and catalog state.
func (dr *diffRun) diagnose(d *dDef) string {
	var b strings.Builder
	ctx := context.Background()
	ledger := base.Ident(d.name + "__ledger")
	var members, srcRows int64
	dr.pool.QueryRow(ctx, "SELECT count(*) FROM "+ledger+func() string {
		if len(d.group) > 0 {
			return " WHERE member"
		}
		return ""
	}()).Scan(&members)
	dr.pool.QueryRow(ctx, "SELECT count(*) FROM "+d.sourceSQL()+" x").Scan(&srcRows)
	fmt.Fprintf(&b, "ledger entries %d, source rows %d\n", members, srcRows)
	if len(d.group) > 0 {
		var gs, ts []string
		for i, g := range d.group {
			gs = append(gs, fmt.Sprintf("g%d", i))
			ts = append(ts, base.Ident(g.name))
		}
		audit := diff(dr.t, dr.pool, "SELECT "+strings.Join(ts, ", ")+", \"__members\" FROM "+base.Ident(d.name),
			"SELECT "+strings.Join(gs, ", ")+", count(*) FROM "+ledger+" WHERE member GROUP BY "+strings.Join(gs, ", "))
		fmt.Fprintf(&b, "ledger audit (target vs ledger): %s\n", audit)
	}
	var raw []byte
	if d.upstream == nil && dr.pool.QueryRow(ctx, `SELECT compiled FROM trellis._definitions WHERE target_table = 'public.' || $1`, d.name).Scan(&raw) == nil {
		c := &Compiled{}
		json.Unmarshal(raw, c)
		led := "SELECT k FROM " + ledger
		if len(d.group) > 0 {
			led += " WHERE member"
		}
		src := "SELECT " + model.KeySQL("x", c.Key, c.KeyNullable) + " FROM " + d.src + " x"
		for _, dir := range [][3]string{{src, led, "in source, not in ledger"}, {led, src, "in ledger, not in source"}} {
			rows, err := dr.pool.Query(ctx, "SELECT to_json(k)::text FROM (("+dir[0]+") EXCEPT ("+dir[1]+")) y(k) LIMIT 10")
			if err == nil {
				var ks []string
				for rows.Next() {
					var k string
					rows.Scan(&k)
					ks = append(ks, k)
				}
				rows.Close()
				fmt.Fprintf(&b, "%s: %v\n", dir[2], ks)
			}
		}
		fmt.Fprintf(&b, "key %+v nullable %v\n", c.Key, c.KeyNullable)
		// Where the mismatched keys' changes went: batch of each log row.
		// One line per mismatched key of each log row: a captured statement's
		// row holds its keys in keys, a rederive's in key.
		dr.writeRows(&b, "  log ", `SELECT format('%s', row(k.key, c.op, c.change_id, cardinality(c.keys), c.txid, c.origin_lsn,
			  (SELECT min(b.seq) FROM trellis._batches b WHERE pg_visible_in_snapshot(c.txid, b.snap)), c.staged_at))
			FROM trellis._change_log c CROSS JOIN LATERAL unnest(coalesce(c.keys, ARRAY[c.key])) AS k(key)
			WHERE c.src_table = 'public.' || $1
			  AND k.key IN ((`+src+` EXCEPT `+led+`) UNION ALL (`+led+` EXCEPT `+src+`))
			ORDER BY c.change_id, k.key LIMIT 80`, d.src)
		dr.writeRows(&b, "  batch ", `SELECT format('%s', row(seq, snap, sealed_at, row_count, bucket_count, has_truncate, drained_at)) FROM trellis._batches ORDER BY seq LIMIT 200`)
		dr.writeRows(&b, "  marker ", `SELECT format('%s', row(c.key, c.op, c.txid, c.staged_at)) FROM trellis._change_log c WHERE c.src_table = 'public.' || $1 AND c.key IS NULL AND c.keys IS NULL`, d.src)
		for _, line := range strings.Split(dr.logs.String(), "\n") {
			if strings.Contains(line, "capture install") || strings.Contains(line, "build started") || strings.Contains(line, "staging worker started") {
				b.WriteString("  " + line + "\n")
			}
		}
	}
	fmt.Fprintf(&b, "definitions: ")
	for _, o := range dr.defs {
		fmt.Fprintf(&b, "%s<-%s %v %v; ", o.name, o.src, o.group, o.fields)
	}
	b.WriteString("\n")
	rows, _ := dr.pool.Query(ctx, `SELECT format('%s', row(id, status, version, build_id, created_at)) FROM trellis._definitions ORDER BY id`)
	for rows.Next() {
		var s string
		rows.Scan(&s)
		b.WriteString(s + " ")
	}
	rows.Close()
	var pending, batches int64
	dr.pool.QueryRow(ctx, `SELECT count(*) FROM trellis._change_log`).Scan(&pending)
	dr.pool.QueryRow(ctx, `SELECT count(*) FROM trellis._batches WHERE state <> 'drained'`).Scan(&batches)
	fmt.Fprintf(&b, "\nlog rows %d, undrained batches %d", pending, batches)
	return b.String()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
