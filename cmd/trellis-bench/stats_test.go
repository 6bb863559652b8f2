package main

import (
	"math"
	"slices"
	"testing"
)

func TestMedian(t *testing.T) {
	cases := []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, 5, 1, 9, 7}, 5},
	}
	for _, c := range cases {
		in := slices.Clone(c.in)
		if got := median(in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("median reordered its input: %v", in)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median(nil) should be NaN")
	}
}

func TestPercentile(t *testing.T) {
	var xs []float64
	for i := 100; i >= 1; i-- {
		xs = append(xs, float64(i))
	}
	for _, c := range []struct{ p, want float64 }{{50, 50}, {99, 99}, {100, 100}, {0, 1}, {1, 1}} {
		if got := percentile(xs, c.p); got != c.want {
			t.Errorf("percentile(1..100, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile([]float64{7}, 99); got != 7 {
		t.Errorf("percentile of one sample = %v", got)
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("percentile(nil) should be NaN")
	}
}

func TestRatioControlDrift(t *testing.T) {
	if got := ratio(8, 10); got != 0.8 {
		t.Errorf("ratio = %v", got)
	}
	for _, c := range [][2]float64{{1, 0}, {math.NaN(), 1}, {1, math.NaN()}} {
		if !math.IsNaN(ratio(c[0], c[1])) {
			t.Errorf("ratio(%v, %v) should be NaN", c[0], c[1])
		}
	}
	if got := control(100, 110); got != 105 {
		t.Errorf("control = %v", got)
	}
	// A failed head or tail run leaves the other as the control.
	if got := control(math.NaN(), 90); got != 90 {
		t.Errorf("control(NaN, 90) = %v", got)
	}
	if got := control(90, math.NaN()); got != 90 {
		t.Errorf("control(90, NaN) = %v", got)
	}
	if got := drift(100, 95); math.Abs(got-(-0.05)) > 1e-12 {
		t.Errorf("drift = %v, want -0.05", got)
	}
}

func TestSchedule(t *testing.T) {
	v := []string{"proxy", "pgbouncer"}
	want := [][]string{
		{"direct", "proxy", "pgbouncer", "direct"},
		{"direct", "pgbouncer", "proxy", "direct"},
		{"direct", "proxy", "pgbouncer", "direct"},
	}
	for rep, w := range want {
		if got := schedule(rep, "direct", v); !slices.Equal(got, w) {
			t.Errorf("schedule(%d) = %v, want %v", rep, got, w)
		}
	}
	// Three variants: each takes each position once over three repetitions.
	three := []string{"a", "b", "c"}
	seen := map[string]map[int]bool{}
	for rep := range 3 {
		s := schedule(rep, "ctl", three)
		if s[0] != "ctl" || s[len(s)-1] != "ctl" || len(s) != 5 {
			t.Fatalf("schedule(%d) = %v: control must bracket the variants", rep, s)
		}
		for pos, name := range s[1:4] {
			if seen[name] == nil {
				seen[name] = map[int]bool{}
			}
			seen[name][pos] = true
		}
	}
	for name, pos := range seen {
		if len(pos) != 3 {
			t.Errorf("variant %s ran in positions %v, want all three", name, pos)
		}
	}
	if got := schedule(0, "direct", nil); !slices.Equal(got, []string{"direct"}) {
		t.Errorf("schedule without variants = %v", got)
	}
}

func TestGoal(t *testing.T) {
	atLeast := Goal{What: "proxy/direct", Bound: 0.80}
	atMost := Goal{What: "RSS per idle connection", AtMost: true, Bound: 64, Unit: "KB"}
	cases := []struct {
		g    Goal
		v    float64
		want *bool
	}{
		{atLeast, 0.85, ptr(true)},
		{atLeast, 0.80, ptr(true)},
		{atLeast, 0.79, ptr(false)},
		{atLeast, math.NaN(), nil},
		{atMost, 12.5, ptr(true)},
		{atMost, 64, ptr(true)},
		{atMost, 70, ptr(false)},
		{atMost, math.Inf(1), nil},
	}
	for _, c := range cases {
		got := c.g.Met(c.v)
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s with %v: got %v, want %v", c.g, c.v, verdict(got), verdict(c.want))
		}
	}
	if s := atLeast.String(); s != "proxy/direct >= 0.80×" {
		t.Errorf("String = %q", s)
	}
	if s := atMost.String(); s != "RSS per idle connection <= 64 KB" {
		t.Errorf("String = %q", s)
	}
}

func TestAddedLatencyRatio(t *testing.T) {
	// direct 0.100 ms, PgBouncer adds 0.020, the proxy 0.030: 1.5×.
	if got := addedLatencyRatio(0.100, 0.130, 0.120); math.Abs(got-1.5) > 1e-9 {
		t.Errorf("got %v, want 1.5", got)
	}
	// PgBouncer measured no faster than direct: no meaningful ratio.
	if got := addedLatencyRatio(0.100, 0.130, 0.095); !math.IsNaN(got) {
		t.Errorf("got %v, want NaN", got)
	}
}

func ptr[T any](v T) *T { return &v }
