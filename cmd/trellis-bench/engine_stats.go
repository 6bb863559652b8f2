package main

// Pure figures of the engine benchmarks: least-squares slopes, dithered
// sampling intervals, latency summaries. Unit-tested in engine_stats_test.go.

import (
	"math"
	"time"
)

// sample is a progress reading: at T (seconds from the window's start) the
// target held N rows (or folded N source rows).
type sample struct {
	T float64
	N float64
}

// slope is the least-squares slope dN/dT of samples with from ≤ T ≤ to; NaN
// with fewer than minSamples in the span (§1.6: no fit, no verdict).
func slope(ss []sample, from, to float64, minSamples int) float64 {
	var n, st, sn, stt, stn float64
	for _, s := range ss {
		if s.T < from || s.T > to {
			continue
		}
		n++
		st += s.T
		sn += s.N
		stt += s.T * s.T
		stn += s.T * s.N
	}
	if n < float64(max(minSamples, 2)) {
		return math.NaN()
	}
	den := n*stt - st*st
	if den == 0 {
		return math.NaN()
	}
	return (n*stn - st*sn) / den
}

// ditherInterval is the k-th sampling interval around mean: a golden-ratio
// dither in 0.5–1.5× mean (§1.6), so a sampler cannot beat against the seal
// cadence.
func ditherInterval(k int, mean time.Duration) time.Duration {
	const phi = 0.6180339887498949
	f := math.Mod(float64(k)*phi, 1)
	return time.Duration(float64(mean) * (0.5 + f))
}

// latencySummary is p50, p99 and max in ms of per-row latencies; a row that
// never became visible counts as +Inf (so a stuck tail shows in p99 and max
// instead of hiding).
type latencySummary struct {
	N, Missing    int
	P50, P99, Max float64
	Mean          float64 // of the rows that landed
}

func summarizeLatencies(ms []float64) latencySummary {
	s := latencySummary{N: len(ms), P50: math.NaN(), P99: math.NaN(), Max: math.NaN(), Mean: math.NaN()}
	if len(ms) == 0 {
		return s
	}
	sum, landed := 0.0, 0
	for _, x := range ms {
		if math.IsInf(x, 1) {
			s.Missing++
			continue
		}
		sum += x
		landed++
	}
	if landed > 0 {
		s.Mean = sum / float64(landed)
	}
	s.P50 = percentile(ms, 50)
	s.P99 = percentile(ms, 99)
	s.Max = percentile(ms, 100)
	return s
}

// generatorBound reports whether a generator delivered more than 2 % less
// than it was asked for (§1.6).
func generatorBound(offered, asked float64) bool {
	return asked > 0 && offered < 0.98*asked
}

// cpuShare is CPU seconds over wall seconds: 0.01 is 1 % of one core.
func cpuShare(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return math.NaN()
	}
	return cpu.Seconds() / wall.Seconds()
}
