package main

import (
	"math"
	"testing"
	"time"
)

func TestSlope(t *testing.T) {
	var ss []sample
	for i := range 10 {
		ss = append(ss, sample{T: float64(i), N: 100 + 50*float64(i)})
	}
	if got := slope(ss, 0, 9, 8); math.Abs(got-50) > 1e-9 {
		t.Fatalf("slope = %v, want 50", got)
	}
	// Only the span counts: a flat tail outside it changes nothing.
	ss = append(ss, sample{T: 20, N: 550}, sample{T: 30, N: 550})
	if got := slope(ss, 0, 9, 8); math.Abs(got-50) > 1e-9 {
		t.Fatalf("slope with tail outside the span = %v, want 50", got)
	}
	if got := slope(ss, 2.5, 9, 8); !math.IsNaN(got) {
		t.Fatalf("7 samples in span: slope = %v, want NaN (no fit)", got)
	}
	if got := slope([]sample{{1, 1}, {1, 2}}, 0, 2, 2); !math.IsNaN(got) {
		t.Fatalf("no time spread: slope = %v, want NaN", got)
	}
}

func TestDitherInterval(t *testing.T) {
	mean := 100 * time.Millisecond
	var sum time.Duration
	seen := map[time.Duration]bool{}
	for k := range 1000 {
		d := ditherInterval(k, mean)
		if d < mean/2 || d > 3*mean/2 {
			t.Fatalf("interval %d = %v, outside 0.5-1.5× mean", k, d)
		}
		sum += d
		seen[d] = true
	}
	if avg := sum / 1000; avg < 95*time.Millisecond || avg > 105*time.Millisecond {
		t.Fatalf("mean interval %v, want about %v", avg, mean)
	}
	if len(seen) < 900 {
		t.Fatalf("only %d distinct intervals: not dithered", len(seen))
	}
}

func TestSummarizeLatencies(t *testing.T) {
	var ms []float64
	for i := 1; i <= 100; i++ {
		ms = append(ms, float64(i))
	}
	s := summarizeLatencies(ms)
	if s.P50 != 50 || s.P99 != 99 || s.Max != 100 || s.Missing != 0 || s.Mean != 50.5 {
		t.Fatalf("summary = %+v", s)
	}
	// A row that never lands is infinite: it moves p99 and max, not the mean.
	ms[0] = math.Inf(1)
	ms[1] = math.Inf(1)
	s = summarizeLatencies(ms)
	if s.Missing != 2 || !math.IsInf(s.Max, 1) || !math.IsInf(s.P99, 1) {
		t.Fatalf("with missing rows: %+v", s)
	}
	if s.P50 != 52 {
		t.Fatalf("p50 with two missing = %v, want 52", s.P50)
	}
	if s := summarizeLatencies(nil); !math.IsNaN(s.P50) || s.N != 0 {
		t.Fatalf("empty: %+v", s)
	}
}

func TestGoalVerdictsOfEngineBenchmarks(t *testing.T) {
	ge := Goal{What: "trigger/none", Bound: 0.7}
	if m := ge.Met(0.69); m == nil || *m {
		t.Fatal("0.69 meets ≥ 0.7")
	}
	if m := ge.Met(0.7); m == nil || !*m {
		t.Fatal("0.7 misses ≥ 0.7")
	}
	le := Goal{What: "p99", AtMost: true, Bound: 250, Unit: "ms"}
	if m := le.Met(math.Inf(1)); m != nil {
		t.Fatal("an infinite p99 (rows never landed) should be n/a, not a verdict")
	}
	if m := le.Met(251); m == nil || *m {
		t.Fatal("251 ms meets ≤ 250 ms")
	}
	if !generatorBound(970, 1000) || generatorBound(985, 1000) || generatorBound(10, 0) {
		t.Fatal("generatorBound")
	}
	if got := cpuShare(300*time.Millisecond, 30*time.Second); math.Abs(got-0.01) > 1e-12 {
		t.Fatalf("cpuShare = %v", got)
	}
	if !math.IsNaN(cpuShare(time.Second, 0)) {
		t.Fatal("cpuShare over zero wall")
	}
}
