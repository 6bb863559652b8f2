package main

import (
	"math"
	"testing"
)

func pt(v float64) point { return point{Value: v, P50: math.NaN(), P99: math.NaN()} }

func TestSummarise(t *testing.T) {
	reps := []repPoints{
		{Head: pt(100), Tail: pt(100), Variants: map[string]point{pathProxy: pt(80), pathBouncer: pt(90)}},
		// The machine slowed down by half during this repetition: the ratio
		// is taken against the mean control (75), so the proxy still reads 0.8.
		{Head: pt(100), Tail: pt(50), Variants: map[string]point{pathProxy: pt(60), pathBouncer: pt(60)}},
		{Head: pt(200), Tail: pt(200), Variants: map[string]point{pathProxy: pt(170), pathBouncer: pt(160)}},
	}
	s := summarise(reps, pathDirect, []string{pathProxy, pathBouncer})
	if s.Reps != 3 {
		t.Errorf("Reps = %d", s.Reps)
	}
	if got := s.Median[pathDirect]; got != 100 {
		t.Errorf("direct median = %v, want 100 (of 100, 75, 200)", got)
	}
	if got := s.Median[pathProxy]; got != 80 {
		t.Errorf("proxy median = %v", got)
	}
	// proxy/control per rep: 0.8, 0.8, 0.85 → 0.8
	if got := s.ToControl[pathProxy]; math.Abs(got-0.8) > 1e-9 {
		t.Errorf("proxy/direct = %v, want 0.8", got)
	}
	// pgbouncer/control: 0.9, 0.8, 0.8 → 0.8
	if got := s.ToControl[pathBouncer]; math.Abs(got-0.8) > 1e-9 {
		t.Errorf("pgbouncer/direct = %v, want 0.8", got)
	}
	// proxy/pgbouncer: 0.889, 1.0, 1.0625 → 1.0
	if got := s.ProxyToBnc; math.Abs(got-1.0) > 1e-9 {
		t.Errorf("proxy/pgbouncer = %v, want 1.0", got)
	}
	if s.MaxDrift != -0.5 {
		t.Errorf("max drift = %v, want -0.5", s.MaxDrift)
	}
	if s.Drift != 0 {
		t.Errorf("median drift = %v, want 0", s.Drift)
	}
}

func TestSummariseSkipsFailedRuns(t *testing.T) {
	reps := []repPoints{
		{Head: pt(100), Tail: pt(100), Variants: map[string]point{pathProxy: pt(math.NaN())}},
		{Head: pt(100), Tail: pt(100), Variants: map[string]point{pathProxy: pt(90)}},
	}
	s := summarise(reps, pathDirect, []string{pathProxy, pathBouncer})
	if got := s.ToControl[pathProxy]; got != 0.9 {
		t.Errorf("proxy/direct = %v, want 0.9 from the one good run", got)
	}
	if !math.IsNaN(s.Median[pathBouncer]) || !math.IsNaN(s.ProxyToBnc) {
		t.Errorf("a path that never ran must read NaN: %v %v", s.Median[pathBouncer], s.ProxyToBnc)
	}
}

func TestB1Goals(t *testing.T) {
	sums := map[string]summary{
		"select-extended/c8": {
			ToControl:  map[string]float64{pathProxy: 0.85, pathBouncer: 0.90},
			ProxyToBnc: 0.94,
		},
		"select-extended/c1": {
			MedianP50: map[string]float64{pathDirect: 0.100, pathProxy: 0.120, pathBouncer: 0.120},
		},
		"copy-in":          {ToControl: map[string]float64{pathProxy: 0.95}},
		"select-simple/c8": {CPU: map[string]float64{pathProxy: 30, pathBouncer: 12}},
	}
	checks := b1Goals(sums, map[string]float64{pathProxy: 40})
	byKey := map[string]goalCheck{}
	for _, c := range checks {
		byKey[c.Shape+" "+c.Goal.What] = c
	}
	expect := func(key string, want *bool) {
		t.Helper()
		c, ok := byKey[key]
		if !ok {
			t.Fatalf("no goal %q in %v", key, checks)
		}
		if (c.Met == nil) != (want == nil) || c.Met != nil && *c.Met != *want {
			t.Errorf("%s: %v (value %v), want %v", key, verdict(c.Met), c.Value, verdict(want))
		}
	}
	expect("select-extended/c8 proxy/direct", ptr(true))
	expect("select-extended/c8 proxy/pgbouncer", ptr(false))
	expect("select-extended/c1 added p50 proxy/pgbouncer", ptr(true))
	expect("copy-in proxy/direct bytes/s", ptr(true))
	expect("copy-out proxy/direct bytes/s", nil) // not run: neither met nor missed
	expect("tpcb/c8 proxy/direct", nil)
	expect("idle-connections proxy RSS per idle connection", ptr(true))
	expect("instructions instructions per simple query proxy/pgbouncer", nil)
	expect("select-simple/c8 CPU per simple query proxy/pgbouncer", ptr(false)) // 2.5×
	if _, ok := byKey["connect/c8 proxy/direct"]; ok {
		t.Error("the -C goal appears only when that mode ran")
	}
}
