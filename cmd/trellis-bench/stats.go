package main

import (
	"fmt"
	"math"
	"slices"
)

// median returns the median of xs, NaN for none. The input is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile returns the p-th percentile (0..100) of xs by the nearest-rank
// method: exact for the per-transaction latencies pgbench logs, no
// interpolation between samples.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = max(1, min(rank, len(s)))
	return s[rank-1]
}

// ratio is a/b, NaN when either is missing or b is zero.
func ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return math.NaN()
	}
	return a / b
}

// control is the value a repetition's variants are compared with: the mean of
// its head and tail control runs, so drift during the repetition is split
// evenly rather than charged to whichever variant ran last.
func control(head, tail float64) float64 {
	switch {
	case math.IsNaN(head):
		return tail
	case math.IsNaN(tail):
		return head
	}
	return (head + tail) / 2
}

// drift is how far the tail control moved from the head, as a fraction:
// +0.05 means the machine got 5 % faster during the repetition.
func drift(head, tail float64) float64 {
	return ratio(tail, head) - 1
}

// schedule is the run order of one repetition (§1.2): the control first, the
// variants rotated by the repetition number so that none always runs in the
// same position, and the control again.
func schedule(rep int, control string, variants []string) []string {
	out := []string{control}
	n := len(variants)
	for i := range n {
		out = append(out, variants[(i+rep)%n])
	}
	if n > 0 {
		out = append(out, control)
	}
	return out
}

// Goal is a bound on one measured figure: a ratio or an absolute bound.
type Goal struct {
	What   string  // what is compared, e.g. "proxy/direct"
	AtMost bool    // true: value ≤ Bound; false: value ≥ Bound
	Bound  float64 // the bound
	Unit   string  // "×" for ratios, or a unit such as "KB"
}

// String renders the goal as text for result lines, e.g. "proxy/direct >= 0.80×".
func (g Goal) String() string {
	op := ">="
	if g.AtMost {
		op = "<="
	}
	unit := g.Unit
	if unit == "" {
		unit = "×"
	}
	if unit == "×" {
		return fmt.Sprintf("%s %s %.2f%s", g.What, op, g.Bound, unit)
	}
	return fmt.Sprintf("%s %s %g %s", g.What, op, g.Bound, unit)
}

// Met evaluates the goal: nil (JSON null) when the value is missing, because
// an unmeasured goal is neither met nor missed (§1.5).
func (g Goal) Met(value float64) *bool {
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return nil
	}
	ok := value >= g.Bound
	if g.AtMost {
		ok = value <= g.Bound
	}
	return &ok
}

// verdict renders a goal result for the human table.
func verdict(met *bool) string {
	switch {
	case met == nil:
		return "n/a"
	case *met:
		return "met"
	}
	return "MISSED"
}

// addedLatencyRatio is the goal figure "proxy's added p50 over PgBouncer's
// added p50" at one client. NaN when PgBouncer added nothing measurable:
// on a noisy box its added latency can come out ≤ 0, and a ratio against
// that says nothing.
func addedLatencyRatio(directP50, proxyP50, bouncerP50 float64) float64 {
	b := bouncerP50 - directP50
	if math.IsNaN(b) || b <= 0 {
		return math.NaN()
	}
	return (proxyP50 - directP50) / b
}

// nullable turns NaN into nil so JSON shows null rather than failing to
// encode.
func nullable(x float64) any {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return x
}
