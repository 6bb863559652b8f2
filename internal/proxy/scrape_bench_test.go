package proxy

import (
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/trellis-proxy/trellis-proxy/wire"
)

// BenchmarkScrapeHandler is the in-process part of a scrape: GET /metrics
// through the real handler with a catalog snapshot of 100 transforms, each
// with every per-transform series of the workers, and a wire server
// holding 1,000 client connections, nothing else running. (The
// integration BenchmarkScrape measures the same against a live engine.)
func BenchmarkScrapeHandler(b *testing.B) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	inst := prometheus.WrapRegistererWith(prometheus.Labels{InstanceLabel: "app/trellis"}, reg)
	m := NewMetrics(inst)
	statuses := []string{"live", "backfilling", "catching_up", "paused"}
	var ts []transformSnap
	for i := 0; i < 100; i++ {
		ts = append(ts, transformSnap{target: fmt.Sprintf("transform_%03d", i), status: statuses[i%len(statuses)],
			buildDone: 10, buildEst: math.NaN(), lagRows: int64(i), lagSeconds: float64(i) / 10})
	}
	// Every per-transform series of this process's workers, one per
	// transform: commit-to-visible, re-derived, applied, end-to-end and
	// self-check.
	em := newEngineMetrics(inst)
	for _, t := range ts {
		em.TransformPage(t.target, 10, 30*time.Millisecond)
		em.TransformApplied(t.target, 12, 80*time.Millisecond)
		em.SelfCheckPage(t.target, time.Second, 1)
	}
	p := &catalogPoller{}
	p.snap.Store(&catalogSnapshot{at: time.Now(), transforms: ts, stagingLive: true, drainLive: 2})
	inst.MustRegister(p)
	for _, k := range []string{"transform", "drop", "await_converged"} {
		m.Intercepted(k)
	}
	for _, c := range []string{"22012", "42P01", "23505", "57014"} {
		m.ErrorSent("upstream", c)
	}

	srv, err := wire.NewServer(wire.Config{Upstream: wire.UpstreamConfig{Address: "127.0.0.1:1"}, Metrics: m, AuthTimeout: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	m.setRelayed(srv.Relayed)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	const clients = 1000
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < clients; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	h := httpHandler(reg, wire.UpstreamConfig{}, nil)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	// Wait until the server has registered every connection.
	for deadline := time.Now().Add(30 * time.Second); ; {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if counterValue(m.connections) >= clients || time.Now().After(deadline) {
			time.Sleep(100 * time.Millisecond) // accepted, then tracked
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		io.Copy(io.Discard, rec.Body)
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano() + ru1.Stime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

func counterValue(c prometheus.Counter) float64 {
	var d dto.Metric
	c.Write(&d)
	return d.GetCounter().GetValue()
}
