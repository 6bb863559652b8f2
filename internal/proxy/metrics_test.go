package proxy

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDashboardMetricsExist checks that every trellis_* name the Grafana
// dashboard queries is one this binary exports.
func TestDashboardMetricsExist(t *testing.T) {
	reg := prometheus.NewRegistry()
	inst := prometheus.WrapRegistererWith(prometheus.Labels{InstanceLabel: "db/trellis"}, reg)
	m := NewMetrics(inst)
	m.Intercepted("transform")
	m.ErrorSent("upstream", "22012")
	m.UpstreamDialed(time.Millisecond, true)
	m.TLSHandshake("ok")
	p := &catalogPoller{}
	p.snap.Store(&catalogSnapshot{at: time.Now(), transforms: []transformSnap{
		{target: "t", status: "backfilling", buildDone: 1, buildEst: 2}}})
	inst.MustRegister(p)
	// The workers' per-transform series, after one event each.
	em := newEngineMetrics(inst)
	em.TransformPage("t", 1, time.Millisecond)
	em.TransformApplied("t", 1, time.Millisecond)
	em.SelfCheckPage("t", time.Millisecond, 1)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	// Families only present after their first event.
	for _, n := range []string{"trellis_proxy_call_seconds", "trellis_proxy_call_errors_total", "trellis_convergence_waits_total",
		"trellis_transform_pauses_total", "trellis_transform_column_fuses_total"} {
		have[n] = true
	}
	raw, err := os.ReadFile("../../deploy/grafana/trellis-proxy.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`trellis_[a-z_]+`)
	n := 0
	for _, pn := range dash.Panels {
		for _, tg := range pn.Targets {
			for _, name := range names.FindAllString(tg.Expr, -1) {
				if name == InstanceLabel {
					continue
				}
				n++
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
				if !have[name] && !have[base] {
					t.Errorf("panel %q queries %s, which is not exported", pn.Title, name)
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d metric references found in the dashboard", n)
	}
}

// TestErrorClassBounded: the sqlstate_class label is two characters of a
// SQLSTATE or "other", whatever an upstream sends.
func TestErrorClassBounded(t *testing.T) {
	for code, want := range map[string]string{"22012": "22", "42P01": "42", "XX000": "XX", "": "other", "2201": "other",
		"zz000": "other", "22012 ": "other", "\x00\x01abc": "other"} {
		if got := sqlstateClass(code); got != want {
			t.Errorf("sqlstateClass(%q) = %q, want %q", code, got, want)
		}
	}
}
