package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
)

// obsDB creates a fresh database for one observability test.
func obsDB(t *testing.T) string {
	t.Helper()
	return pgcluster.ForTest(t).FreshDB(t, "obs")
}

// startObs runs a proxy with the engine and the HTTP listener on db, with
// short engine intervals (the D17 knobs).
func startObs(t *testing.T, db, processID string, mod func(*proxy.Config)) *harness {
	t.Helper()
	c := pgcluster.ForTest(t)
	return start(t, func(cfg *proxy.Config, opts *proxy.Options) {
		opts.RelayOnly = false
		cfg.Upstream = c.URL(db)
		cfg.HTTPListen = "127.0.0.1:0"
		cfg.ProcessID = processID
		cfg.SealInterval = 10 * time.Millisecond
		cfg.PollInterval = 200 * time.Millisecond
		cfg.TakeoverInterval = 200 * time.Millisecond
		cfg.Heartbeat = 500 * time.Millisecond
		cfg.WorkerTTL = 5 * time.Second
		cfg.MetricsInterval = 100 * time.Millisecond
		if mod != nil {
			mod(cfg)
		}
	})
}

func httpGet(t testing.TB, h *harness, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + h.info.HTTPAddr.String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// scrapeResult maps a series ("name{k="v",...}", labels sorted, the
// trellis_instance label left out) to its value; histograms contribute
// name_count and name_sum.
type scrapeResult map[string]float64

func scrape(t testing.TB, h *harness) scrapeResult {
	t.Helper()
	code, body := httpGet(t, h, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	out := scrapeResult{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "trellis_") {
			continue
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
		for _, m := range f.Metric {
			key := seriesKey(t, name, m.Label)
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[strings.Replace(key, name, name+"_count", 1)] = float64(m.GetHistogram().GetSampleCount())
				out[strings.Replace(key, name, name+"_sum", 1)] = m.GetHistogram().GetSampleSum()
			default:
				out[key] = m.GetUntyped().GetValue()
			}
		}
	}
	return out
}

func seriesKey(t testing.TB, name string, labels []*dto.LabelPair) string {
	var parts []string
	inst := false
	for _, l := range labels {
		if l.GetName() == proxy.InstanceLabel {
			inst = true
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	if !inst {
		t.Errorf("%s%v lacks the %s label", name, labels, proxy.InstanceLabel)
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

func (s scrapeResult) keys() []string {
	var k []string
	for key := range s {
		k = append(k, key)
	}
	sort.Strings(k)
	return k
}

// delta asserts that series moved by exactly want between two scrapes.
func delta(t *testing.T, before, after scrapeResult, series string, want float64) {
	t.Helper()
	if got := after[series] - before[series]; got != want {
		var near []string
		name := series[:strings.IndexByte(series, '{')]
		for _, k := range after.keys() {
			if strings.HasPrefix(k, name) {
				near = append(near, fmt.Sprintf("%s=%v", k, after[k]))
			}
		}
		t.Errorf("%s moved by %v, want %v (now: %s)", series, got, want, strings.Join(near, " "))
	}
}

func waitReady(t *testing.T, h *harness) {
	t.Helper()
	eventually(t, 30*time.Second, "/readyz ok", func() bool {
		code, _ := httpGet(t, h, "/readyz")
		return code == 200
	})
}

func execAll(t *testing.T, conn *pgx.Conn, sqls ...string) {
	t.Helper()
	for _, s := range sqls {
		if _, err := conn.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestMetricsAfterWorkload scrapes /metrics before and after a scripted
// workload and checks that the counters moved by exactly what it did.
func TestMetricsAfterWorkload(t *testing.T) {
	db := obsDB(t)
	h := startObs(t, db, "obs-a", nil)
	waitReady(t, h)
	if code, body := httpGet(t, h, "/livez"); code != 200 || body != "ok" {
		t.Fatalf("/livez: %d %q", code, body)
	}
	if code, _ := httpGet(t, h, "/readyz?x=1"); code != 200 {
		t.Fatalf("/readyz with a query string: %d", code)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+h.info.HTTPAddr.String()+"/metrics", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /metrics: %v %v", resp, err)
	}
	url := h.url("postgres", "", db, "")
	before := scrape(t, h)

	// Raw protocol: one simple query, counted message by message.
	r := dialRaw(t, h.Addr)
	r.startup()
	mid := scrape(t, h)
	r.sendMsgs(&pgproto3.Query{String: "SELECT 1"})
	if got := types(r.untilZ()); got != "TDCZ" {
		t.Fatalf("SELECT 1 replied %s", got)
	}
	afterRaw := scrape(t, h)
	delta(t, mid, afterRaw, `trellis_proxy_relay_messages_total{direction="client_to_server"}`, 1)
	delta(t, mid, afterRaw, `trellis_proxy_relay_bytes_total{direction="client_to_server"}`, float64(1+4+len("SELECT 1")+1))
	delta(t, mid, afterRaw, `trellis_proxy_relay_messages_total{direction="server_to_client"}`, 4)
	delta(t, mid, afterRaw, `trellis_proxy_client_sessions{}`, 0)
	delta(t, before, afterRaw, `trellis_proxy_client_sessions{}`, 1)
	r.sendMsgs(&pgproto3.Terminate{})
	r.conn.Close()

	// Three pgx sessions that end normally, one that sends a bad cancel key.
	for i := 0; i < 3; i++ {
		c := connectURL(t, url)
		c.Close(context.Background())
	}
	cr := dialRaw(t, h.Addr)
	cr.sendMsgs(&pgproto3.CancelRequest{ProcessID: 1, SecretKey: []byte{1, 2, 3, 4}})
	io.ReadAll(cr.conn)

	conn := connectURL(t, url)
	execAll(t, conn, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`,
		`TRANSFORM order_totals FROM orders SELECT price + tax AS total`,
		`SELECT trellis.await_live('order_totals', 30000)`)
	const n = 50
	execAll(t, conn, fmt.Sprintf(`INSERT INTO orders SELECT g, g, g / 10.0 FROM generate_series(1, %d) g`, n),
		`SELECT trellis.await_converged(trellis.watermark_token(), 30000)`)
	if _, err := conn.Exec(context.Background(), `SELECT 1/0`); sqlstate(err) != "22012" {
		t.Fatalf("1/0: %v", err)
	}
	var dropState string // a failing Trellis statement, twice
	for i := 0; i < 2; i++ {
		_, err := conn.Exec(context.Background(), `TRANSFORM bad_totals FROM no_such_table SELECT price AS p`)
		if dropState = sqlstate(err); len(dropState) != 5 {
			t.Fatalf("TRANSFORM over a missing table: %v", err)
		}
	}

	var after scrapeResult
	defer func() {
		if t.Failed() {
			for _, k := range after.keys() {
				if after[k] != before[k] {
					t.Logf("%s: %v -> %v", k, before[k], after[k])
				}
			}
		}
	}()
	eventually(t, 60*time.Second, "the poller to see the transform live and its changes applied", func() bool {
		after = scrape(t, h)
		return after[`trellis_transform_status{status="live",transform="order_totals"}`] == 1 &&
			after[`trellis_changes_applied_total{}`]-before[`trellis_changes_applied_total{}`] >= n &&
			after[`trellis_proxy_sessions_total{outcome="ok"}`]-before[`trellis_proxy_sessions_total{outcome="ok"}`] >= 4 &&
			after[`trellis_proxy_cancel_requests_total{outcome="unknown_key"}`]-before[`trellis_proxy_cancel_requests_total{outcome="unknown_key"}`] >= 1
	})
	// This process sealed and drained the workload: its own distributions moved.
	for _, k := range []string{`trellis_commit_to_visible_seconds_count{}`, `trellis_seal_seconds_count{}`, `trellis_drain_page_seconds_count{}`, `trellis_build_task_seconds_count{}`} {
		if after[k]-before[k] < 1 {
			t.Errorf("%s did not move: %v -> %v", k, before[k], after[k])
		}
	}
	delta(t, before, after, `trellis_changes_applied_total{}`, n)
	delta(t, before, after, `trellis_changes_captured_total{}`, n)
	delta(t, before, after, `trellis_batches_sealed_total{}`, 1)
	delta(t, before, after, `trellis_batches_drained_total{}`, 1)
	delta(t, before, after, `trellis_pending_changes{}`, 0)
	delta(t, before, after, `trellis_transform_lag_rows{transform="order_totals"}`, 0)
	delta(t, before, after, `trellis_definitions{status="live"}`, 1)
	delta(t, before, after, `trellis_proxy_sessions_total{outcome="ok"}`, 4) // the raw session and three pgx ones
	delta(t, before, after, `trellis_proxy_client_connections_total{}`, 6)   // those, the cancel and conn
	delta(t, before, after, `trellis_proxy_client_sessions{}`, 1)            // conn
	delta(t, before, after, `trellis_proxy_cancel_requests_total{outcome="unknown_key"}`, 1)
	delta(t, before, after, `trellis_proxy_intercepted_total{kind="transform"}`, 3)
	delta(t, before, after, `trellis_proxy_errors_total{source="upstream",sqlstate_class="22"}`, 1)
	delta(t, before, after, fmt.Sprintf(`trellis_proxy_errors_total{source="proxy",sqlstate_class=%q}`, dropState[:2]), 2)
	delta(t, before, after, fmt.Sprintf(`trellis_proxy_call_errors_total{call="transform",sqlstate_class=%q}`, dropState[:2]), 2)
	delta(t, before, after, `trellis_proxy_upstream_connect_seconds_count{}`, 5)
	delta(t, before, after, `trellis_proxy_handshake_seconds_count{}`, 5)
	delta(t, before, after, `trellis_convergence_waits_total{call="await_live",outcome="ok"}`, 1)
	delta(t, before, after, `trellis_convergence_waits_total{call="await_converged",outcome="ok"}`, 1)
	if after[`trellis_staging_worker_live{}`] != 1 || after[`trellis_staging_worker_held{}`] != 1 || after[`trellis_drain_workers_live{}`] < 1 {
		t.Errorf("fleet gauges: staging live %v held %v, drain workers %v", after[`trellis_staging_worker_live{}`],
			after[`trellis_staging_worker_held{}`], after[`trellis_drain_workers_live{}`])
	}
	if t.Failed() {
		t.Logf("series: %v", after.keys())
	}

	// trellis.metrics_text() returns the same families through SQL.
	var text string
	if err := conn.QueryRow(context.Background(), `SELECT trellis.metrics_text()`).Scan(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, `trellis_transform_status{status="live",transform="order_totals",trellis_instance="`+db+`/trellis"} 1`) {
		t.Errorf("metrics_text lacks the transform's status:\n%s", text)
	}
}

// TestMetricsLabelsBounded runs the same kinds of work twice, the second time
// with ten times the keys and clients, and checks that no series appeared:
// no label carries a key, a statement or a client address.
func TestMetricsLabelsBounded(t *testing.T) {
	db := obsDB(t)
	h := startObs(t, db, "obs-b", nil)
	waitReady(t, h)
	url := h.url("postgres", "", db, "")
	setup := connectURL(t, url)
	execAll(t, setup, `CREATE TABLE orders (id bigint PRIMARY KEY, region text, price numeric)`,
		`TRANSFORM order_price FROM orders SELECT price * 2 AS doubled`,
		`TRANSFORM region_revenue FROM orders GROUP BY region SELECT SUM(price) AS revenue`,
		`SELECT trellis.await_live('order_price', 30000)`, `SELECT trellis.await_live('region_revenue', 30000)`)
	round := func(base, keys, clients int) scrapeResult {
		for i := 0; i < clients; i++ {
			c := connectURL(t, url)
			execAll(t, c, fmt.Sprintf(`INSERT INTO orders SELECT g, 'r' || (g %% 7), g FROM generate_series(%d, %d) g`,
				base+i*keys/clients, base+(i+1)*keys/clients-1),
				`SELECT trellis.await_converged(trellis.watermark_token(), 30000)`)
			if _, err := c.Exec(context.Background(), fmt.Sprintf(`SELECT 'key %d'::int`, i)); err == nil {
				t.Fatal("bad cast succeeded")
			}
			c.Close(context.Background())
		}
		// A snapshot taken after the round's writes, with nothing pending.
		done := time.Now()
		var s scrapeResult
		eventually(t, 60*time.Second, "a fresh snapshot without pending changes", func() bool {
			s = scrape(t, h)
			return s[`trellis_metrics_poll_age_seconds{}`] < time.Since(done).Seconds() &&
				s[`trellis_pending_changes{}`] == 0 && s[`trellis_proxy_client_sessions{}`] == 1
		})
		return s
	}
	first := round(1, 100, 5)
	second := round(1000, 1000, 50)
	var added, gone []string
	for _, k := range second.keys() {
		if _, ok := first[k]; !ok {
			added = append(added, k)
		}
	}
	for _, k := range first.keys() {
		if _, ok := second[k]; !ok {
			gone = append(gone, k)
		}
	}
	if len(added) > 0 || len(gone) > 0 {
		t.Errorf("series changed with 10x keys and clients: added %v, gone %v", added, gone)
	}
	if len(second) > 200 {
		t.Errorf("%d trellis_ series for two transforms", len(second))
	}
}

// TestReadyzFollowsStagingWorker: /readyz of a proxy that does not stage
// turns 503 when the staging worker's process stops and 200 again once
// another process takes the staging role.
func TestReadyzFollowsStagingWorker(t *testing.T) {
	db := obsDB(t)
	a := startObs(t, db, "obs-stager-a", nil)
	waitReady(t, a)
	eventually(t, 30*time.Second, "a to hold the staging lock", func() bool {
		return scrape(t, a)[`trellis_staging_worker_held{}`] == 1
	})
	b := startObs(t, db, "obs-drainer-b", func(c *proxy.Config) { c.Staging = "off"; c.Migrate = false })
	waitReady(t, b)

	a.stop()
	var body string
	eventually(t, 30*time.Second, "b unready without a staging worker", func() bool {
		var code int
		code, body = httpGet(t, b, "/readyz")
		return code == 503
	})
	if body != "no live staging worker" {
		t.Errorf("/readyz body %q", body)
	}
	eventually(t, 30*time.Second, "b's gauge to follow", func() bool {
		return scrape(t, b)[`trellis_staging_worker_live{}`] == 0
	})

	c := startObs(t, db, "obs-stager-c", func(c *proxy.Config) { c.DrainWorkers = 0 })
	waitReady(t, b)
	eventually(t, 30*time.Second, "c to hold the staging lock", func() bool {
		s := scrape(t, c)
		return s[`trellis_staging_worker_held{}`] == 1 && s[`trellis_staging_worker_live{}`] == 1
	})
	if s := scrape(t, b); s[`trellis_staging_worker_held{}`] != 0 {
		t.Errorf("b claims the staging lock: %v", s[`trellis_staging_worker_held{}`])
	}
}

// BenchmarkScrape measures one GET /metrics with 100 transforms in the
// catalog and 1,000 client connections open on the proxy. The connections
// are held before startup: the scrape walks every one of them (relayed
// traffic is summed per session) while a real session each would need 1,000
// Postgres backends. cpu-ms/op is the process's user+system CPU per scrape,
// everything included (the engine's workers and the poller run meanwhile).
func BenchmarkScrape(b *testing.B) {
	c := pgcluster.ForTest(b)
	db := c.FreshDB(b, "obs_bench")
	h := startBench(b, c.URL(db))
	conn := connectURL(b, h.url("postgres", "", db, ""))
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, region int, price numeric)`); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO orders SELECT g, g % 10, g FROM generate_series(1, 1000) g`); err != nil {
		b.Fatal(err)
	}
	const transforms, clients = 100, 1000
	for i := 0; i < transforms; i++ {
		stmt := fmt.Sprintf(`TRANSFORM t%03d FROM orders SELECT price + %d AS v`, i, i)
		if i%2 == 1 {
			stmt = fmt.Sprintf(`TRANSFORM t%03d FROM orders GROUP BY region SELECT SUM(price) AS s%d`, i, i)
		}
		if _, err := conn.Exec(ctx, stmt); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var live int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM trellis.status WHERE status = 'live'`).Scan(&live); err != nil {
			b.Fatal(err)
		}
		if live == transforms {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d transforms live", live, transforms)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 0; i < clients; i++ {
		c, err := net.Dial("tcp", h.Addr)
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(time.Second) // let the poller see everything
	url := "http://" + h.info.HTTPAddr.String() + "/metrics"
	get := func() int {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return int(n)
	}
	size := get()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		get()
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano() + ru1.Stime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(size), "bytes/scrape")
	var poll float64
	for _, line := range strings.Split(func() string {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}(), "\n") {
		if strings.HasPrefix(line, "trellis_metrics_poll_seconds{") {
			fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &poll)
		}
	}
	b.ReportMetric(poll*1000, "poll-ms")
}

// startBench is start for a benchmark: the engine on, HTTP on.
func startBench(b *testing.B, upstream string) *harness {
	cfg := proxy.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTPListen = "127.0.0.1:0"
	cfg.Upstream = upstream
	cfg.ShutdownGrace = 5 * time.Second
	cfg.AuthTimeout = 10 * time.Minute
	cfg.SealInterval = 10 * time.Millisecond
	cfg.TakeoverInterval = 200 * time.Millisecond
	ready := make(chan proxy.Info, 1)
	opts := proxy.Options{Ready: func(i proxy.Info) { ready <- i },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- proxy.Run(ctx, cfg, opts) }()
	select {
	case h.info = <-ready:
	case err := <-h.done:
		b.Fatal(err)
	}
	h.Addr = h.info.Addr.String()
	b.Cleanup(func() {
		cancel()
		<-h.done
	})
	return h
}
