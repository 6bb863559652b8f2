package main

// B10 memory: the engine (this process) drains a backlog built while it was
// stopped: a 1-1 target is made live, the engine stops, N rows are inserted
// into the captured source, the engine starts again and drains. Go heap (live
// objects, runtime/metrics) and RSS are sampled every 250 ms on a goroutine
// locked to its own thread. Two backlogs, N/4 then N: memory must be bounded
// by the page size, not by the backlog (peak heap at N ≤ 1.25× peak at N/4).

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

type memResult struct {
	Rows                 int
	DrainSecs            float64
	HeapBase, HeapPeak   float64 // MB
	RSSBase, RSSPeak     float64 // MB
	GCShare              float64 // GC CPU / total CPU during the drain
	OracleErr, HarnessEr error
}

func runMemory(ctx context.Context, b *bench) error {
	def := 1_000_000
	if b.cfg.Quick {
		def = 40_000
	}
	big := envInt("TRELLIS_BENCH_B10_ROWS", def)
	l, err := startLab(ctx, b, "memory")
	if err != nil {
		return err
	}
	defer l.stop()
	fmt.Fprintf(os.Stderr, "B10: 1-1 target, backlogs of %d and %d rows drained by a restarted engine (defaults: 2 drain workers, 5000-key pages)\n", big/4, big)
	var res []memResult
	for _, n := range []int{big / 4, big} {
		r := memoryCell(ctx, l, n)
		if r.HarnessEr != nil {
			return r.HarnessEr
		}
		if r.OracleErr != nil {
			b.failf("memory %d rows: %v", n, r.OracleErr)
		}
		res = append(res, r)
		b.out.emit(map[string]any{"scenario": "memory", "variant": "drain backlog", "shape": fmt.Sprint(n), "rows": n,
			"drain_seconds": r.DrainSecs, "rows_per_sec": float64(n) / r.DrainSecs, "heap_base_mb": r.HeapBase, "heap_peak_mb": r.HeapPeak,
			"rss_base_mb": r.RSSBase, "rss_peak_mb": r.RSSPeak, "gc_cpu_share": r.GCShare, "oracle_ok": r.OracleErr == nil, "error": errString(r.OracleErr)})
		pause(ctx, b.cellWait())
	}
	g := Goal{What: "peak heap(N)/peak heap(N/4)", AtMost: true, Bound: 1.25}
	rt := ratio(res[1].HeapPeak, res[0].HeapPeak)
	b.out.emit(map[string]any{"scenario": "memory", "summary": true, "heap_peak_ratio": rt, "goal": g.String(), "goal_met": g.Met(rt)})
	t := &table{header: []string{"B10 backlog", "drain s", "rows/s", "heap MB base→peak", "RSS MB base→peak", "GC share of CPU"}}
	for _, r := range res {
		t.add(fmt.Sprint(r.Rows), fmtNum(r.DrainSecs, 1), fmtNum(float64(r.Rows)/r.DrainSecs, 0),
			fmtNum(r.HeapBase, 1)+"→"+fmtNum(r.HeapPeak, 1), fmtNum(r.RSSBase, 1)+"→"+fmtNum(r.RSSPeak, 1), fmtPct(r.GCShare))
	}
	b.printTable(t)
	fmt.Fprintf(os.Stderr, "peak heap ratio %s (goal %s): %s\n", fmtRatio(rt), g.String(), verdict(g.Met(rt)))
	return nil
}

func memoryCell(ctx context.Context, l *engineLab, n int) (r memResult) {
	r.Rows = n
	pool, _, drop, err := l.newDB(ctx, 4)
	if err != nil {
		r.HarnessEr = err
		return r
	}
	defer drop()
	if _, err := pool.Exec(ctx, `CREATE TABLE mem_src (id bigint PRIMARY KEY, v int)`); err != nil {
		r.HarnessEr = err
		return r
	}
	e, err := startEngine(ctx, pool, engine.Config{})
	if err != nil {
		r.HarnessEr = err
		return r
	}
	if err := define(ctx, e, pool, oneToOne("mem_t", "mem_src", engine.Field{Name: "v", Expr: col("v")}), time.Minute); err != nil {
		e.stop()
		r.HarnessEr = err
		return r
	}
	if err := e.stop(); err != nil {
		r.HarnessEr = err
		return r
	}
	// The backlog: captured, nothing drains.
	for lo := 1; lo <= n; lo += 100_000 {
		if _, err := pool.Exec(ctx, `INSERT INTO mem_src SELECT g, g % 1000 FROM generate_series($1::bigint, $2::bigint) g`, lo, min(lo+99_999, n)); err != nil {
			r.HarnessEr = err
			return r
		}
	}
	runtime.GC()
	r.HeapBase, r.RSSBase = heapMB(), rssMB()
	stopSampler := make(chan struct{})
	peaks := make(chan [2]float64, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ph, pr := 0.0, 0.0
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			ph, pr = max(ph, heapMB()), max(pr, rssMB())
			select {
			case <-stopSampler:
				peaks <- [2]float64{ph, pr}
				return
			case <-tk.C:
			}
		}
	}()
	gc0, all0 := cpuMetric("/cpu/classes/gc/total:cpu-seconds"), cpuMetric("/cpu/classes/total:cpu-seconds")
	start := time.Now()
	e, err = startEngine(ctx, pool, engine.Config{})
	if err != nil {
		close(stopSampler)
		r.HarnessEr = err
		return r
	}
	cerr := e.converge(ctx, 15*time.Minute)
	r.DrainSecs = time.Since(start).Seconds()
	close(stopSampler)
	p := <-peaks
	r.HeapPeak, r.RSSPeak = p[0], p[1]
	gc1, all1 := cpuMetric("/cpu/classes/gc/total:cpu-seconds"), cpuMetric("/cpu/classes/total:cpu-seconds")
	r.GCShare = ratio(gc1-gc0, all1-all0)
	if cerr != nil {
		r.OracleErr = cerr
	} else {
		r.OracleErr = checkSame(ctx, pool, "SELECT id, v FROM mem_t", "SELECT id, v FROM mem_src")
	}
	if err := e.stop(); err != nil && r.OracleErr == nil {
		r.OracleErr = err
	}
	return r
}

func heapMB() float64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64()) / (1 << 20)
}

func rssMB() float64 {
	kb, err := rssKB(os.Getpid())
	if err != nil {
		return 0
	}
	return float64(kb) / 1024
}

// cpuMetric reads a runtime/metrics CPU estimate in seconds.
func cpuMetric(name string) float64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}
